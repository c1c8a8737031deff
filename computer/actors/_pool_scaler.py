"""The exec pools' control loop: one actor for the whole cluster grows and shrinks every pool.

``PoolScaler`` is the detached named actor ``computer:pools`` (namespace ``computer``), restarted by
Ray when it dies; a restarted one adopts the workers it finds by name. Every :data:`TICK` seconds
(:data:`TICK_CALM` while every pool is calm) it

1. reads the pool settings the cluster's last ``computer.init`` published (min/max workers, CPUs and
   memory per worker, runs per CPU, idle time) and the alive nodes with their CPUs;
2. polls every worker's :class:`~computer.actors._pool_admission.LoadReport` (running, waiting in
   line, how long admitted runs waited, idle time, live sandboxes);
3. decides with :func:`plan` (pure, unit-tested) and applies: *grow* when runs wait (a worker's line
   is not empty, or a run waited more than :data:`GROW_WAIT`; runs pinned to a live sandbox count
   when no worker has a free slot), up to the maximum; *shed* the lines
   of busy workers when others have free slots (those runs have not started: their dispatchers send
   them again); *drain* workers idle for ``pool_idle_after`` while the pool is above its minimum
   (a draining worker takes no new run, runs in flight finish, a live sandbox keeps it until it ends)
   and *remove* a draining worker once it holds nothing; *replace* dead workers (keeping the minimum).

Owners ask it for a :class:`PoolView` (the ready workers with their node, target and load) at most
once a second while they dispatch to a busy pool (every 5 s to a calm one); each owner still chooses the worker of every run itself (pin,
warm mirror, its own node, least load). ``status()`` feeds ``computer status``.

Decisions where the issue is silent:

- A new worker goes to the node with the fewest workers of its pool among nodes with the CPUs free
  (ties: the most free CPUs). Without room anywhere it is created without a node: it stays pending
  and Ray's autoscaler sees the demand. Workers of the minimum are the exception: the floor must
  come up on any cluster (a laptop with 2 CPUs and 2 + 2 workers), so one that finds no room reserves
  what is left on the emptiest node, possibly 0 CPUs (its target then counts one CPU).
- The elastic maximum (``*_pool_max`` unset) is recomputed every tick from the alive nodes: the
  workers their CPUs hold, plus one more node's worth, so that waiting runs leave pending workers the
  autoscaler can answer; once a new node joins, the maximum grows with it.
- Pending workers count towards the pool's size (they are coming); they are the first to go when the
  runs stop waiting for ``pool_idle_after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ._nodes import ClusterSilentError, gcs_answer, listed_nodes, named_actor
from ._pool_admission import LoadReport, target_runs
from ._pool_plan import (
    GROW_WAIT,
    Plan,
    PoolLimits,
    WorkerState,
    enabled,
    limits_from,
    plan,
    resolve_max,
)
from ._pool_registry import create_worker, named_workers, worker_handle, worker_name
from ._pool_status import pool_status
from .naming import NAMESPACE

__all__ = [
    "BACKENDS",
    "SCALER_NAME",
    "Plan",
    "PoolLimits",
    "PoolScaler",
    "PoolView",
    "WorkerState",
    "WorkerView",
    "get_scaler",
    "limits_from",
    "plan",
    "resolve_max",
]

log = logging.getLogger(__name__)

SCALER_NAME = "computer:pools"
BACKENDS = ("shell", "python")
TICK = 0.5  # seconds between two rounds of polls and decisions
# Between two rounds while every pool is calm (every worker ready, nothing running or waiting, no
# dispatcher waiting for a worker, no view asked for in the last CALM_AFTER_VIEW seconds): an idle
# cluster's control loop polls 4x less (each round costs a few GCS calls and one actor call per
# worker). A dispatcher asking for a view wakes it at once, and keeps it at the busy pace a while
# (its runs reach the workers' lines just after the view: a round then must not wait 2 s to see them).
TICK_CALM = 2.0
CALM_AFTER_VIEW = 10.0
POLL_TIMEOUT = 10.0  # a worker that does not answer its load within this is left out of that round
# A ready worker whose last load report is older than this (seconds; a healthy one reports every round)
# is shown to dispatchers as draining: only the runs pinned to it (its live sandboxes) go there until it
# answers again. A worker stopped (SIGSTOP) or wedged kept its last report, "ready" with free slots:
# every dispatcher went on sending it new workspaces' runs, and each waited forever.
SILENT_AFTER = 30.0
# The shortest rest of the loop before an idle worker's drain is due, and the margin past it (seconds).
IDLE_DUE_MIN = 0.05
WINDOW = 60.0  # seconds of waits and runs the status summarises
DECISIONS_KEPT = 64
# Workers the loop removed itself (drained holding nothing, or pending and unneeded), the latest kept
# per pool: dispatchers tell such a retirement from a death (``PoolView.retired``). Names are never
# reused (indices only grow), so a name kept here never names a live worker.
RETIRED_KEPT = 1000


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A ready worker as dispatchers see it."""

    name: str
    node_id: str
    target: int
    load: int  # running + waiting at the last poll
    draining: bool


@dataclass(frozen=True, slots=True)
class PoolView:
    backend: str
    workers: tuple[WorkerView, ...]
    pending: int  # workers created but not ready yet
    # Workers this loop removed itself (the latest ``RETIRED_KEPT``): each held no run and no live
    # sandbox then (a drain ends only idle sandboxes: one running processes keeps its worker), so a
    # workspace pinned to one lost nothing; a dispatcher says nothing of it (before, the next run's
    # stderr said the worker "died" and the sandbox's background processes "ended with it").
    retired: tuple[str, ...] = ()


@dataclass
class _Worker:
    name: str
    index: int
    handle: Any
    state: str
    created: float
    cpus: float
    target: int
    node_id: str | None  # asked for (until the first report says where it runs)
    report: LoadReport | None = None
    poll: asyncio.Task[LoadReport] | None = None
    reported_at: float = 0.0  # monotonic, when ``report`` came

    def as_state(self) -> WorkerState:
        return WorkerState(self.name, self.state, self.created, self.report, self.cpus)


@dataclass
class _Pool:
    backend: str
    workers: dict[str, _Worker] = field(default_factory=dict)
    limits: PoolLimits | None = None
    max_workers: int = 0
    waits: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=50_000))
    admitted: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=10_000))
    decisions: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=DECISIONS_KEPT))
    waiting: int = 0  # runs dispatchers hold with no worker (reported with ``view``) since the last round
    moved: int = 0  # runs sent elsewhere after their idle live sandbox was ended (since the loop started)
    stayed: int = 0  # runs sent movable that waited: shorter than a move (since the loop started)
    pressure_at: float | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    retired: deque[str] = field(default_factory=lambda: deque(maxlen=RETIRED_KEPT))  # see PoolView


class PoolScaler:
    """The one control loop of every exec pool of the cluster (see the module docstring)."""

    def __init__(self) -> None:
        self._pools = {backend: _Pool(backend) for backend in BACKENDS}
        self._next_index = 0
        self._wake = asyncio.Event()
        self._resting = False  # the loop waits TICK_CALM: a view call wakes it
        self._viewed_at = -math.inf  # when a dispatcher last asked for a view (monotonic)
        # The last settings and nodes the GCS gave (``_cluster_state``), for rounds it does not answer.
        self._last_state: tuple[Settings, dict[str, tuple[float, float]]] | None = None
        self.started_at = time.time()
        self.rounds = 0
        self._adopt()
        self._loop = asyncio.get_running_loop().create_task(self._run())

    def _adopt(self) -> None:
        """Take over the workers a previous incarnation (or an older release) left running."""
        now = time.monotonic()
        for name, (backend, index) in named_workers().items():
            self._next_index = max(self._next_index, index + 1)
            pool = self._pools.get(backend)
            if pool is None:
                continue
            try:
                handle = worker_handle(name)
            except ValueError:
                continue
            pool.workers[name] = _Worker(name, index, handle, "pending", now, 0.0, 1, None)

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except Exception:
                log.exception("pool control loop: a round failed")
            self._wake.clear()
            self._resting = self.calm()
            rest = min(TICK_CALM if self._resting else TICK, self._idle_due())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), rest)
            self._resting = False

    def _idle_due(self) -> float:
        """Seconds until the first idle worker above its pool's minimum reaches ``pool_idle_after``
        (at least :data:`IDLE_DUE_MIN`), so that it is drained then and its memory is back within the
        idle time, not up to a calm round (:data:`TICK_CALM`) and a removal round later."""
        now = time.monotonic()
        due = math.inf
        for pool in self._pools.values():
            limits = pool.limits
            if limits is None or sum(w.state == "ready" for w in pool.workers.values()) <= limits.min_workers:
                continue
            for w in pool.workers.values():
                r = w.report
                if w.state == "ready" and r is not None and not (r.running or r.queued):
                    left = limits.idle_after - r.idle_for - (now - w.reported_at)
                    if left > 0:  # one already past it waits for the usual pace (it may be needed)
                        due = min(due, left)
        return max(IDLE_DUE_MIN, due + IDLE_DUE_MIN)

    def calm(self) -> bool:
        """Whether every pool is calm: its workers ready (none pending or draining), none running or
        holding a waiting run, no dispatcher waiting for a worker or asking for a view lately."""
        if time.monotonic() - self._viewed_at < CALM_AFTER_VIEW:
            return False
        for pool in self._pools.values():
            if pool.waiting:
                return False
            for w in pool.workers.values():
                r = w.report
                if w.state != "ready" or r is None or r.running or r.queued:
                    return False
                if max(r.movable_wait, r.pinned_wait) > GROW_WAIT:
                    return False
        return True

    async def _cluster_state(self) -> tuple[Settings, dict[str, tuple[float, float]]]:
        """The cluster's settings and nodes, or its last answer when its GCS does not answer within
        ``NODES_TIMEOUT`` (``ClusterSilentError`` without one): the round goes on polling workers,
        so owners keep a fresh view (before, it waited in ``ray.nodes()`` for as long as the GCS was
        stopped, polling nothing: every worker then looked silent, ``SILENT_AFTER``)."""
        try:
            state = await asyncio.to_thread(gcs_answer, _cluster_state, "give the pools' settings and nodes")
        except ClusterSilentError as exc:
            if self._last_state is None:
                raise
            log.warning("pool control loop: %s: this round uses its last answer", exc)
            return self._last_state
        self._last_state = state
        return state

    async def _round(self) -> None:
        config, nodes = await self._cluster_state()
        self.rounds += 1
        # CPUs free per node, less what workers of any pool asked for there and Ray has not placed yet
        # (shared by the pools of this round: a worker created for one is not free for the next).
        free = {node: available for node, (_, available) in nodes.items()}
        for pool in self._pools.values():
            for w in pool.workers.values():
                if w.state == "pending" and w.node_id in free:
                    free[w.node_id] -= w.cpus
        for backend, pool in self._pools.items():
            limits = limits_from(config, backend)
            pool.limits = limits
            pool.max_workers = (
                resolve_max(limits, [cpus for cpus, _ in nodes.values()]) if enabled(limits) else 0
            )
            await self._collect(pool)
            now = time.monotonic()
            decided = plan(
                limits,
                pool.max_workers,
                [w.as_state() for w in pool.workers.values()],
                waiting=pool.waiting,
                pressure_at=pool.pressure_at,
                now=now,
            )
            pool.waiting = 0
            if decided.pressure:
                pool.pressure_at = now
            await self._apply(pool, limits, decided, free)

    async def _collect(self, pool: _Pool) -> None:
        """Start a poll of every worker without one in flight; take the answers that came."""
        from ray.exceptions import ActorUnavailableError, RayActorError

        polls = [w.poll for w in pool.workers.values() if w.poll is not None]
        for w in pool.workers.values():
            if w.poll is None:
                w.poll = asyncio.ensure_future(_poll(w.handle))
                polls.append(w.poll)
        if polls:  # give the round's answers a moment (pending workers stay unanswered)
            await asyncio.wait(polls, timeout=min(TICK, POLL_TIMEOUT))
        now = time.monotonic()
        for w in list(pool.workers.values()):
            task = w.poll
            if task is None or not task.done():
                continue
            w.poll = None
            try:
                report = task.result()
            except ActorUnavailableError:
                continue  # restarting in place: still there
            except RayActorError as exc:
                del pool.workers[w.name]
                self._decided(pool, f"{w.name} died ({type(exc).__name__}): forgotten, replaced as needed")
                continue
            except Exception:
                continue
            if report.pinned_queued and not (w.report and w.report.pinned_queued):
                self._decided(
                    pool,
                    f"{w.name}: {report.pinned_queued} run(s) wait for their live sandbox here (it "
                    "runs processes or other runs of its workspace, which moving would end; or no "
                    "worker had a free slot: the pool grows for them then)",
                )
            _count(pool, report, now)
            w.report, w.reported_at = report, now
            w.node_id = report.node_id
            w.target, w.cpus = report.target, report.cpus
            if w.state == "pending":
                w.state = "draining" if report.draining else "ready"
                pool.ready.set()

    async def _apply(self, pool: _Pool, limits: PoolLimits, decided: Plan, free: dict[str, float]) -> None:
        for reason in decided.reasons:
            self._decided(pool, reason)
        for name in decided.remove:
            await _remove(pool, name)
        for name in decided.drain:
            w = pool.workers.get(name)
            if w is not None:
                w.state = "draining"
                with contextlib.suppress(Exception):
                    drained: LoadReport = await asyncio.wait_for(w.handle.drain.remote(), POLL_TIMEOUT)
                    w.report, w.reported_at = drained, time.monotonic()
                    # A drain's report is a load report too: the worker reset its counts with it.
                    _count(pool, drained, w.reported_at)
                if w.report is not None and w.report.draining and w.report.holds == 0:
                    # Drained holding nothing (its idle live sandboxes ended with the drain): gone
                    # now, not a round later, so an idle worker's memory is back at the idle time.
                    self._decided(pool, f"remove {name}: drained, holds nothing")
                    await _remove(pool, name)
        for name in decided.undrain:
            w = pool.workers.get(name)
            if w is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(w.handle.undrain.remote(), POLL_TIMEOUT)
                    w.state = "ready"
        for name in decided.shed:
            w = pool.workers.get(name)
            if w is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(w.handle.shed.remote(), POLL_TIMEOUT)
        if decided.grow:
            await self._grow(pool, limits, decided.grow, decided.floor, free)

    async def _grow(
        self, pool: _Pool, limits: PoolLimits, count: int, floor: int, free: dict[str, float]
    ) -> None:
        per_node: dict[str, int] = {}
        for w in pool.workers.values():
            if w.node_id is not None:
                per_node[w.node_id] = per_node.get(w.node_id, 0) + 1
        now = time.monotonic()
        for k in range(count):
            cpus = limits.worker_cpus
            node = _choose_node(free, per_node, cpus)
            if node is None and k < floor and free:
                node = max(free, key=lambda n: free[n])  # the floor comes up even without room
                cpus = max(0.0, min(cpus, math.floor(free[node] * 100) / 100))
            if node is not None:
                free[node] -= cpus
                per_node[node] = per_node.get(node, 0) + 1
            index = self._next_index
            self._next_index += 1
            target = target_runs(cpus, limits.runs_per_cpu)
            try:
                handle = await asyncio.to_thread(
                    create_worker,
                    pool.backend,
                    index,
                    cpus=cpus,
                    memory=limits.worker_memory,
                    target=target,
                    node_id=node,
                )
            except Exception as exc:
                self._decided(pool, f"could not create {worker_name(pool.backend, index)}: {exc}")
                continue
            name = worker_name(pool.backend, index)
            pool.workers[name] = _Worker(name, index, handle, "pending", now, cpus, target, node)
            where = f"node {node[:12]}" if node else "no node with room (pending: autoscaler demand)"
            self._decided(pool, f"create {name}: {cpus:g} CPU, {target} runs at once, {where}")

    def _decided(self, pool: _Pool, what: str) -> None:
        log.info("pool %s: %s", pool.backend, what)
        pool.decisions.append((time.time(), what))

    # --- what owners and the CLI call ---

    async def view(self, backend: str, waiting: int = 0, wait: float = 0.0) -> PoolView:
        """The ready workers of ``backend``'s pool. ``waiting``: runs the caller holds because no worker
        is ready (the pool grows from zero for them); ``wait``: seconds to wait for a ready worker."""
        pool = self._pools[backend]
        self._viewed_at = time.monotonic()
        if self._resting:  # a dispatcher at work: look at the pools now, then at the busy pace
            self._wake.set()
        if waiting:
            pool.waiting = max(pool.waiting, waiting)
            self._wake.set()
        if wait > 0 and not _ready(pool):
            pool.ready.clear()
            deadline = time.monotonic() + wait
            while not _ready(pool) and time.monotonic() < deadline:
                pool.waiting = max(pool.waiting, max(1, waiting))
                self._wake.set()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(
                        pool.ready.wait(), min(TICK, max(0.0, deadline - time.monotonic()))
                    )
                pool.ready.clear()
        return _view(pool)

    async def nudge(self) -> int:
        """Run a round now (tests, the CLI); the number of rounds run so far."""
        await self._round()
        return self.rounds

    async def status(self, window: float = WINDOW) -> dict[str, Any]:
        """The pools' state and recent decisions, for ``computer status``; waits and runs/s over the last
        ``window`` seconds (at most :data:`WINDOW`)."""
        window = max(1e-3, min(window, WINDOW))
        span = min(window, max(1e-9, time.time() - self.started_at))
        pools = {backend: pool_status(pool, window, span) for backend, pool in self._pools.items()}
        return {"rounds": self.rounds, "window": window, "pools": pools}


def _count(pool: _Pool, report: LoadReport, now: float) -> None:
    """Add what ``report`` counted since the worker's previous report to ``pool``'s totals and windows.

    Every report a worker gives resets its counts (``Admission.report``), a drain's as a poll's: the
    drain's was kept as the worker's state only, so the runs it admitted, the waits (those of the runs
    the drain handed back too) and the moves since the last poll were lost from ``computer status``."""
    pool.moved += report.moved
    pool.stayed += report.stayed
    pool.waits.extend((now, x) for x in report.waits)
    if report.admitted:
        pool.admitted.append((now, report.admitted))


def _ready(pool: _Pool) -> bool:
    return any(w.state == "ready" for w in pool.workers.values())


def _view(pool: _Pool) -> PoolView:
    now = time.monotonic()
    workers = tuple(
        WorkerView(
            w.name,
            w.node_id or "",
            w.target,
            (w.report.running + w.report.queued) if w.report else 0,
            w.state == "draining" or (w.reported_at > 0 and now - w.reported_at > SILENT_AFTER),
        )
        for w in pool.workers.values()
        if w.state != "pending"
    )
    pending = sum(1 for w in pool.workers.values() if w.state == "pending")
    return PoolView(pool.backend, workers, pending, tuple(pool.retired))


def _choose_node(free: dict[str, float], per_node: dict[str, int], cpus: float) -> str | None:
    """The node with room for ``cpus`` that has the fewest of this pool's workers (then the most room)."""
    fits = [n for n, room in free.items() if room + 1e-9 >= cpus]
    if not fits:
        return None
    return min(fits, key=lambda n: (per_node.get(n, 0), -free[n], n))


async def _poll(handle: Any) -> LoadReport:
    report: LoadReport = await asyncio.wait_for(handle.load.remote(), POLL_TIMEOUT * 6)
    return report


async def _remove(pool: _Pool, name: str) -> None:
    """Forget worker ``name`` of ``pool`` (its polling too) and stop it: gracefully unless it never
    came up."""
    w = pool.workers.pop(name, None)
    if w is None:
        return
    if w.poll is not None:
        w.poll.cancel()
    pool.retired.append(name)
    await _stop(w.handle, graceful=w.state != "pending")


async def _stop(handle: Any, *, graceful: bool) -> None:
    """End a worker: gracefully (its scratch is released) when it runs, at once when still pending."""
    import ray

    if graceful:
        with contextlib.suppress(Exception):
            handle.__ray_terminate__.remote()
            return
    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


def _cluster_state() -> tuple[Settings, dict[str, tuple[float, float]]]:
    """The cluster's published settings, and every alive node's (total, available) CPUs (blocking, and
    unbounded but for the nodes' listing: the control loop bounds it whole, :func:`gcs_answer`)."""
    from ._init import cluster_settings
    from .raycompat import available_per_node

    config = cluster_settings()
    available = available_per_node()
    nodes: dict[str, tuple[float, float]] = {}
    for node in listed_nodes():
        if node.get("Alive"):
            node_id = str(node["NodeID"])
            total = float(node.get("Resources", {}).get("CPU", 0.0))
            nodes[node_id] = (total, float(available.get(node_id, {}).get("CPU", 0.0)))
    return config, nodes


_scaler_class: Any = None


def get_scaler() -> Any:
    """The cluster's pool control loop (an ``ActorHandle``), created when missing (blocking GCS calls,
    bounded: ``ClusterSilentError``)."""
    import ray

    global _scaler_class
    try:
        return named_actor(SCALER_NAME, NAMESPACE)
    except ValueError:
        pass
    if _scaler_class is None:
        _scaler_class = ray.remote(PoolScaler)
    remote = _scaler_class.options(
        name=SCALER_NAME,
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        max_concurrency=1000,
        num_cpus=0,
    ).remote
    return gcs_answer(remote, f"create its actor {SCALER_NAME!r}")  # Ray's own wait: 60 s
