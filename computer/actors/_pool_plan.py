"""The exec pools' decisions, pure (no Ray, no clock): what one round of the control loop does to a pool.

:func:`plan` takes a pool's limits, its maximum and what the control loop knows of each worker (its
latest :class:`~computer.actors._pool_admission.LoadReport`) and returns a :class:`Plan`: workers to
create, take back from draining, drain, remove, and whose lines to shed. The control loop
(:mod:`~computer.actors._pool_scaler`) applies it; the unit tests call it directly.

Demand is the queue and the wait of runs: runs waiting in a line that could go elsewhere, a run that
waited more than :data:`GROW_WAIT`, runs a dispatcher holds with no worker at all, and runs pinned to
their live sandbox on a full worker, waiting longer than a move costs, when no worker has a free
slot (with a free slot somewhere, the dispatchers move those whose sandbox is idle and start new
workspaces there: one more worker would not serve them sooner).

Growth under a machine-wide stall (decided, issue 23): the pool grows when runs wait for a slot, also
when the wait comes from a node whose real CPUs are saturated (other processes, a stall) while Ray
shows its declared CPUs free. The control loop sees declared CPUs, not real ones, and in a line a
stall and too few slots look alike (slots held longer). Refusing growth on a measured saturation
would refuse it where a new worker does help (on a real cluster a new worker goes to the node with the
fewest workers of the pool: usually another machine) and would make growth depend on other tenants'
load. What stalls cost before was not the growth but the moves it invited (each a fresh sandbox and a
cold mirror: pool_bench's CPU per run doubled): a pinned run now moves only when its wait is longer
than a move (``_pool_moves``), so a worker added in a stall serves new workspaces and the runs of long
lines, and is returned after ``pool_idle_after``. An operator whose nodes run out of real CPU before
declared CPU sets ``pool_worker_cpus`` to what a worker's runs use: declared CPUs then run out where
real ones do, and the pool asks the autoscaler for nodes instead of adding workers to a busy one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..config import Settings
from ._pool_admission import LoadReport, target_runs

__all__ = [
    "FLOOR_STUCK",
    "GROW_WAIT",
    "Plan",
    "PoolLimits",
    "WorkerState",
    "enabled",
    "limits_from",
    "plan",
    "resolve_max",
]

GROW_WAIT = 0.1  # seconds: a run that waited longer in a line is a reason to grow
# A worker of the minimum still pending after this long (its CPUs were taken meanwhile) is replaced by
# one reserving what is left: the floor must serve. Seconds.
FLOOR_STUCK = 15.0


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """One pool's settings: minimum and maximum workers (None: elastic), what each worker reserves."""

    backend: str
    min_workers: int
    max_workers: int | None
    worker_cpus: float
    worker_memory: int
    runs_per_cpu: float
    idle_after: float

    @property
    def target(self) -> int:
        """Concurrent runs of a worker reserving ``worker_cpus``."""
        return target_runs(self.worker_cpus, self.runs_per_cpu)


def limits_from(config: Settings, backend: str) -> PoolLimits:
    """The limits of ``backend``'s pool in ``config``."""
    low = int(getattr(config, f"{backend}_pool_size"))
    high = getattr(config, f"{backend}_pool_max")
    return PoolLimits(
        backend=backend,
        min_workers=low,
        max_workers=None if high is None else max(low, int(high)),
        worker_cpus=config.pool_worker_cpus,
        worker_memory=config.pool_worker_memory,
        runs_per_cpu=config.pool_runs_per_cpu,
        idle_after=config.pool_idle_after,
    )


def enabled(limits: PoolLimits) -> bool:
    """A pool exists when its minimum is above 0, or its maximum is (then it scales from zero)."""
    return limits.min_workers > 0 or (limits.max_workers or 0) > 0


def resolve_max(limits: PoolLimits, node_cpus: Iterable[float]) -> int:
    """The pool's maximum: the configured one, else what the nodes' CPUs hold plus one node's worth."""
    if limits.max_workers is not None:
        return max(limits.min_workers, limits.max_workers)
    per = limits.worker_cpus if limits.worker_cpus > 0 else 1.0
    fits = [math.floor(c / per + 1e-9) for c in node_cpus]
    elastic = sum(fits) + max(fits, default=1)
    return max(limits.min_workers, elastic, 1)


@dataclass(frozen=True, slots=True)
class WorkerState:
    """What the control loop knows of one worker when it decides."""

    name: str
    state: str  # "pending" (created, not answered yet) | "ready" | "draining"
    created: float  # monotonic
    report: LoadReport | None = None  # the latest answer (None while pending)
    cpus: float = 0.0  # what it asked Ray for


@dataclass
class Plan:
    """What one round decided for one pool."""

    grow: int = 0  # new workers to create
    floor: int = 0  # of which keep the pool at its minimum (created even without room)
    undrain: list[str] = field(default_factory=list)  # draining workers taken back instead of new ones
    drain: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)  # drained and holding nothing, or pending and unneeded
    shed: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    pressure: bool = False  # runs wait that more workers would serve sooner (movable, or none has room)


def plan(
    limits: PoolLimits,
    max_workers: int,
    workers: Sequence[WorkerState],
    *,
    waiting: int = 0,
    pressure_at: float | None = None,
    now: float,
) -> Plan:
    """Decide one round for one pool (no Ray, no clock: ``now`` and the reports are given).

    ``waiting``: runs dispatchers hold without any worker to send them to (a pool scaled to zero).
    ``pressure_at``: when runs last waited (pending workers are kept ``idle_after`` past it).
    """
    out = Plan()
    target = limits.target
    ready = [w for w in workers if w.state == "ready"]
    pending = [w for w in workers if w.state == "pending"]
    if len(ready) < limits.min_workers:
        stuck = [w for w in pending if w.cpus > 0 and now - w.created >= FLOOR_STUCK]
        for w in stuck[: limits.min_workers - len(ready)]:
            pending.remove(w)
            out.remove.append(w.name)
            out.reasons.append(f"remove {w.name}: pending {now - w.created:.0f} s below the minimum")
    draining = [w for w in workers if w.state == "draining"]
    reports = [w.report for w in ready + draining if w.report is not None]
    running = sum(r.running for r in reports)
    queued = sum(r.queued - r.pinned_queued for r in reports if not r.draining) + waiting
    waited = max((r.movable_wait for r in reports), default=0.0)
    # Runs pinned to their worker (a live sandbox) wait there while it is full. They are demand all
    # the same, but one more worker helps them only when no worker has a free slot: with a free slot
    # somewhere, dispatchers already send them ``movable`` (an idle sandbox moves) and new workspaces
    # go there. Without one, the pool grows; once the new worker is in their view, the next runs of
    # idle sandboxes move to it and new workspaces start there (see ``PoolBackend._movable``).
    serving = [r for r in reports if not r.draining]
    # Only pinned runs whose wait is longer than a move (the worker's measured ``move_cost``) count: a
    # new worker serves the others no sooner, as they would not move to it (``_pool_moves``): made for
    # them, it would idle until drained. A report without a measured cost (0) counts them all.
    pinned = sum(
        r.pinned_queued for r in serving if (r.queued + 1) * r.slot_time > r.move_cost or not r.move_cost
    )
    room = any(r.running + r.queued < r.target for r in serving)
    pinned_waited = max((r.pinned_wait for r in serving if r.pinned_wait > r.move_cost), default=0.0)
    pins_wait = not room and (pinned > 0 or pinned_waited > GROW_WAIT)

    for w in draining:  # drained and holding nothing (the report came after the drain): gone
        if w.report is not None and w.report.draining and w.report.holds == 0:
            out.remove.append(w.name)
            out.reasons.append(f"remove {w.name}: drained, holds nothing")

    active = len(ready) + len(pending)
    if active > max_workers:  # the maximum went down: pending first, then the least loaded
        excess = active - max_workers
        for w in pending[:excess]:
            out.remove.append(w.name)
            out.reasons.append(f"remove {w.name}: pending, above the maximum {max_workers}")
        excess -= min(excess, len(pending))
        by_load = sorted(ready, key=lambda w: (w.report.holds if w.report else 0, w.name))
        for w in by_load[:excess]:
            out.drain.append(w.name)
            out.reasons.append(f"drain {w.name}: above the maximum {max_workers}")
        return out

    out.pressure = queued > 0 or waited > GROW_WAIT or pins_wait
    if out.pressure:
        if queued or (pins_wait and pinned):
            need = math.ceil((running + queued + pinned) / target)
        else:
            need = active + (0 if pending else 1)
        want = min(max_workers, max(need, limits.min_workers))
        grow = want - active
        if grow > 0:
            back = [w for w in draining if w.name not in out.remove][:grow]
            out.undrain = [w.name for w in back]
            out.grow = grow - len(back)
            out.floor = max(0, min(limits.min_workers - active - len(back), out.grow))
            if queued:
                why = f"{queued} run(s) waiting"
            elif not pins_wait:
                why = f"a run waited {waited:.2f} s"
            elif pinned:
                why = f"{pinned} run(s) waiting for their live sandbox, no worker has a free slot"
            else:
                why = f"a run waited {pinned_waited:.2f} s for its live sandbox, no worker has a free slot"
            out.reasons.append(f"grow by {grow} to {want} (max {max_workers}): {why}, {running} running")
        free = [r for r in reports if not r.draining and r.running + r.queued < r.target]
        if free or out.grow or out.undrain:
            lines = [r for r in reports if not r.draining and r.queued > r.pinned_queued]
            out.shed = [r.name for r in lines] if free else []
            if out.shed:
                out.reasons.append(f"shed the lines of {', '.join(out.shed)}: slots free elsewhere")
        return out

    if active < limits.min_workers:
        out.grow = out.floor = limits.min_workers - active
        out.reasons.append(f"grow by {out.grow}: the minimum is {limits.min_workers}")
        return out

    spare = active - limits.min_workers
    calm_since = pressure_at if pressure_at is not None else -math.inf
    for w in sorted(pending, key=lambda w: -w.created):  # the newest pending first
        if spare <= 0:
            break
        if now - max(w.created, calm_since) >= limits.idle_after:
            out.remove.append(w.name)
            out.reasons.append(f"remove {w.name}: pending, not needed for {limits.idle_after:g} s")
            spare -= 1
    idle = [
        w
        for w in ready
        if w.report is not None
        and w.report.running == 0
        and w.report.queued == 0
        and w.report.idle_for >= limits.idle_after
    ]
    for w in sorted(idle, key=lambda w: -(w.report.idle_for if w.report else 0.0)):
        if spare <= 0:
            break
        out.drain.append(w.name)
        assert w.report is not None
        out.reasons.append(f"drain {w.name}: idle {w.report.idle_for:.0f} s")
        spare -= 1
    return out
