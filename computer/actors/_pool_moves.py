"""When a run pinned to its live sandbox moves off a full worker: the worker's measured slot time and
move cost, and the rule (issue 23).

A run pinned here that finds this worker full, sent ``movable`` (its dispatcher sees a free slot on
another worker), may move: this worker ends its idle sandbox and hands the run back (see
``PoolWorker.run``). A move is not free: the run starts a fresh live sandbox elsewhere and the mirror
there is pushed, cold, from the owner (each a process start and the whole tree on the wire; on the
shared 2-core machine of pool_bench, CPU per run went from 19-25 ms to 39-50 ms when moves were
many). Waiting is not free either. :class:`MoveCost` compares the two, from what this worker measured:

- the expected wait here: the runs ahead of it in the line, plus one (it takes the next free slot),
  times the worker's recent *slot time*: how long a run holds a slot (an average of the runs that
  ended here, or the median age of the runs holding the slots now when that is longer: a worker full
  of long runs is known before they end) divided by the slots;
- the cost of a move: the start of a fresh sandbox (measured: the first run of a workspace on this
  worker, which started its sandbox, less the next run of the same workspace here, which found it
  started; less the time that first run spent on its push, counted apart), plus the push of the
  workspace's mirror at the destination, assumed cold: the mirror's size here (the bytes pushed to
  it: its last full push and the incremental ones since) divided by the push rate measured here
  (pushes of at least :data:`PUSH_MEASURED_MIN` bytes: the owner call's time per byte).

The run moves only when the wait is longer than the move. Until a value is measured it is a prior
(:data:`START_PRIOR`, :data:`PUSH_RATE_PRIOR`). A worker briefly full with a short line keeps the
run (a slot frees sooner than a move would start it elsewhere); a long line, or slots held by long
runs, moves it.

The worker decides, not the dispatcher: it knows its line when the run arrives; a dispatcher's view
is up to a second old (at 60 runs/s the line changes completely in that time). The values go to the
control loop in each :class:`~computer.actors._pool_admission.LoadReport` (``slot_time``,
``move_cost``, ``stayed``) and from there to ``computer status``.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PUSH_RATE_PRIOR", "START_PRIOR", "MoveCost", "RunMeasure"]

# Until measured: the start of a fresh live sandbox (seconds; a sandbox started ahead is taken in
# about 1 ms, one started on demand in tens of ms on a loaded machine) and the push rate (bytes/s).
START_PRIOR = 0.05
PUSH_RATE_PRIOR = 8.0 * 2**20
PUSH_MEASURED_MIN = 64 * 1024  # a push smaller than this is mostly a call's fixed cost: not a rate
HOLD_WEIGHT = 0.2  # weight of a new sample in the average slot hold
SAMPLE_WEIGHT = 0.25  # the same for the (rarer) start and push rate samples
SIZES_KEPT = 256  # workspaces whose mirror size a worker remembers (least recent go first)


def _average(old: float | None, sample: float, weight: float) -> float:
    return sample if old is None else old + weight * (sample - old)


@dataclass(frozen=True, slots=True)
class RunMeasure:
    """What one run measured on a worker (see :meth:`MoveCost.ran`)."""

    workspace_id: str
    held: float  # seconds it held a slot
    fresh: bool = False  # it started the workspace's live sandbox here
    warm: bool = False  # it ran in the live sandbox it found here
    push_seconds: float = 0.0  # spent in push calls to the owner
    push_bytes: int = 0  # bytes pushed to the mirror (prefetched or asked for)
    full_push: bool = False  # the mirror was pushed whole (cold)


class MoveCost:
    """One worker's slot time and move cost, measured from its runs, and the rule (module docstring)."""

    def __init__(self) -> None:
        self.hold: float | None = None  # average seconds a run holds a slot
        self.start: float | None = None  # average seconds a fresh sandbox costs a run
        self.push_rate: float | None = None  # bytes per second of a push from the owner
        self._sizes: OrderedDict[str, float] = OrderedDict()  # workspace -> bytes of its mirror here
        # workspace -> (hold less push time) of its run that started the sandbox, until its next run
        self._fresh: OrderedDict[str, float] = OrderedDict()

    def ran(self, run: RunMeasure) -> None:
        """Learn from a run that ended (it held a slot)."""
        ws = run.workspace_id
        self.hold = _average(self.hold, run.held, HOLD_WEIGHT)
        if run.full_push or run.push_bytes:
            size = run.push_bytes if run.full_push else self._sizes.get(ws, 0.0) + run.push_bytes
            self._remember(self._sizes, ws, size)
        if run.push_bytes >= PUSH_MEASURED_MIN and run.push_seconds > 0:
            self.push_rate = _average(self.push_rate, run.push_bytes / run.push_seconds, SAMPLE_WEIGHT)
        first = self._fresh.pop(ws, None)
        if run.fresh:
            self._remember(self._fresh, ws, max(0.0, run.held - run.push_seconds))
        elif run.warm and first is not None:
            self.start = _average(
                self.start, max(0.0, first - max(0.0, run.held - run.push_seconds)), SAMPLE_WEIGHT
            )

    def slot_time(self, target: int, ages: Sequence[float] = ()) -> float:
        """Seconds between two slots coming free: the hold (or the median age of the runs holding
        the slots, when longer) over the slots."""
        held = max(self.hold or 0.0, statistics.median(ages) if ages else 0.0)
        return held / max(1, target)

    def wait(self, ahead: int, target: int, ages: Sequence[float] = ()) -> float:
        """The expected wait of a run arriving behind ``ahead`` runs in line."""
        return (ahead + 1) * self.slot_time(target, ages)

    def cost(self, workspace_id: str | None = None) -> float:
        """Seconds a move of ``workspace_id`` costs: a fresh sandbox and its mirror pushed cold."""
        start = START_PRIOR if self.start is None else self.start
        size = self._sizes.get(workspace_id, 0.0) if workspace_id is not None else 0.0
        return start + size / (self.push_rate or PUSH_RATE_PRIOR)

    def worth_moving(self, workspace_id: str, ahead: int, target: int, ages: Sequence[float] = ()) -> bool:
        """Whether a run of ``workspace_id`` arriving behind ``ahead`` runs waits longer than a move."""
        return self.wait(ahead, target, ages) > self.cost(workspace_id)

    @staticmethod
    def _remember(table: OrderedDict[str, float], key: str, value: float) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > SIZES_KEPT:
            table.popitem(last=False)
