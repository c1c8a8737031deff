"""A pool worker's admission: at most ``target`` runs at once, the rest wait in line (elastic pools).

The line is where a run's *wait* is measured: from its arrival at the worker to the moment it gets a
slot. The worker reports the waits, its queue and its idle time to the pool's control loop
(:mod:`~computer.actors._pool_scaler`) in a :class:`LoadReport`; the loop grows the pool when runs
wait and shrinks it when workers stay idle.

A run that waits in line has not started: a worker being drained, or told to *shed* its line because
capacity appeared elsewhere, hands it back to the dispatcher with :class:`Requeue` (nothing ran), and
the dispatcher sends it to another worker. A run pinned here (its workspace's live sandbox lives on
this worker) waits in line like any other but is never handed back: it could run nowhere else. (A
pinned run that finds this worker full while its sandbox holds no process, behind a line longer than
a move costs, is not pinned for long: the worker ends that sandbox and hands the run back,
``Requeue(reason="moved")``, before it enters the line; see ``PoolWorker.run`` and ``_pool_moves``.)
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

__all__ = ["WAITS_REPORTED", "Admission", "LoadReport", "Requeue", "target_runs"]

# Waits a report carries at most (the newest ones): a report stays small under any load.
WAITS_REPORTED = 2048


def target_runs(cpus: float, runs_per_cpu: float) -> int:
    """Concurrent runs of a worker holding ``cpus`` CPUs (at least one; a 0-CPU worker counts as one CPU)."""
    return max(1, round((cpus if cpus > 0 else 1.0) * runs_per_cpu))


@dataclass(frozen=True, slots=True)
class Requeue:
    """The only item of a run a worker hands back before starting it (draining, or shedding its line):
    nothing ran; send it to another worker. ``note`` and ``unreported``: what the worker kept for the
    workspace's next run (a live sandbox lost while no run was in progress; what an ended sandbox's
    syncs refused), for the run wherever it goes (before, they stayed on this worker and were lost)."""

    worker: str
    reason: str
    note: str | None = None
    unreported: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """A worker's load as its pool's control loop sees it (one report per poll)."""

    name: str
    node_id: str
    cpus: float
    target: int
    running: int
    queued: int
    waits: list[float]  # seconds each run admitted since the previous report waited in line
    admitted: int  # runs admitted since the previous report (``waits`` keeps the newest of them)
    idle_for: float  # seconds since the worker last had a run running or waiting (0.0 while it has one)
    draining: bool
    # Of ``queued``, runs pinned here (their live sandbox is here): more workers would not help them.
    pinned_queued: int = 0
    movable_wait: float = 0.0  # the longest wait of an admitted run that was not pinned
    # The longest wait of an admitted pinned run: demand too (the control loop grows a pool with no
    # free slot anywhere for it; the next runs of idle sandboxes then move to the new worker).
    pinned_wait: float = 0.0
    live_sandboxes: int = 0  # live sandboxes this worker holds: it is drained, never killed, while > 0
    mirrors_in_use: int = 0  # warm mirrors a running run is using
    # Runs since the previous report whose idle live sandbox this worker ended to send them elsewhere
    # (it was full): their pin no longer held them here.
    moved: int = 0
    # Runs since the previous report sent movable to this full worker that waited here instead: their
    # expected wait was shorter than a move (``_pool_moves``).
    stayed: int = 0
    slot_time: float = 0.0  # seconds between two slots coming free here (measured, ``MoveCost``)
    move_cost: float = 0.0  # seconds a move costs a run of an empty workspace (measured, ``MoveCost``)
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def holds(self) -> int:
        """What keeps this worker from being removed now: runs, waiting runs, live sandboxes."""
        return self.running + self.queued + self.live_sandboxes


class Admission:
    """``target`` slots and a FIFO line in front of them (one per worker, on its event loop)."""

    def __init__(self, target: int) -> None:
        self.target = max(1, target)
        self.running = 0
        self.draining = False
        self._line: deque[tuple[asyncio.Future[bool], bool]] = deque()  # (slot, pinned) in arrival order
        self._waits: deque[float] = deque(maxlen=WAITS_REPORTED)
        self._admitted = 0
        self._movable_wait = 0.0
        self._pinned_wait = 0.0
        self._idle_since: float | None = time.monotonic()

    @property
    def queued(self) -> int:
        return sum(1 for f, _ in self._line if not f.done())

    @property
    def full(self) -> bool:
        """Whether a run arriving now would wait in line (every slot taken, or others wait already)."""
        return self.running >= self.target or self.queued > 0

    async def enter(self, *, pinned: bool = False) -> bool:
        """Wait for a slot; True once the run holds one (it must then :meth:`leave`), False when the run
        is handed back untouched (the worker drains, or shed its line; never a ``pinned`` run)."""
        arrived = time.monotonic()
        self._idle_since = None
        if self.draining and not pinned:
            self._settle_idle()
            return False
        if self.running < self.target and not self._line:
            self._grant(arrived)
            return True
        slot: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (slot, pinned)
        self._line.append(entry)
        try:
            granted = await slot
        except BaseException:
            if slot.done() and not slot.cancelled() and slot.result():
                self.leave()  # granted just as it was cancelled: give the slot back
            else:
                self._drop(entry)
            raise
        if granted:
            self._record(arrived, pinned)
        else:  # handed back: the time it waited here is a wait all the same (not an admission)
            self._waits.append(time.monotonic() - arrived)
            if not pinned:
                self._movable_wait = max(self._movable_wait, time.monotonic() - arrived)
            self._settle_idle()
        return granted

    def leave(self) -> None:
        """A run that held a slot is over: the next in line gets it."""
        self.running -= 1
        self._next()
        self._settle_idle()

    def drain(self) -> int:
        """Admit nothing new (but pinned runs); hand back every run waiting in line. Returns how many."""
        self.draining = True
        return self.shed()

    def undrain(self) -> None:
        self.draining = False

    def shed(self) -> int:
        """Hand back every run waiting in line but the pinned ones (capacity appeared elsewhere); how many."""
        kept: deque[tuple[asyncio.Future[bool], bool]] = deque()
        shed = 0
        while self._line:
            slot, pinned = self._line.popleft()
            if slot.done():
                continue
            if pinned:
                kept.append((slot, pinned))
            else:
                slot.set_result(False)  # its wait so far is counted by ``enter``
                shed += 1
        self._line = kept
        return shed

    def report(self, name: str, node_id: str, cpus: float, **extra: int) -> LoadReport:
        """The load since the previous report (the waits and admissions counted are reset)."""
        waits = list(self._waits)
        admitted, self._admitted = self._admitted, 0
        movable_wait, self._movable_wait = self._movable_wait, 0.0
        pinned_wait, self._pinned_wait = self._pinned_wait, 0.0
        self._waits.clear()
        idle_since = self._idle_since
        live = extra.pop("live_sandboxes", 0)
        mirrors = extra.pop("mirrors_in_use", 0)
        moved = extra.pop("moved", 0)
        return LoadReport(
            name=name,
            node_id=node_id,
            cpus=cpus,
            target=self.target,
            running=self.running,
            queued=self.queued,
            waits=waits,
            admitted=admitted,
            idle_for=0.0 if idle_since is None else time.monotonic() - idle_since,
            draining=self.draining,
            pinned_queued=sum(1 for f, pinned in self._line if pinned and not f.done()),
            movable_wait=movable_wait,
            pinned_wait=pinned_wait,
            live_sandboxes=live,
            mirrors_in_use=mirrors,
            moved=moved,
            extra=extra,
        )

    def _grant(self, arrived: float) -> None:
        self.running += 1
        self._record(arrived, False)

    def _record(self, arrived: float, pinned: bool) -> None:
        self._admitted += 1
        waited = time.monotonic() - arrived
        self._waits.append(waited)
        if pinned:
            self._pinned_wait = max(self._pinned_wait, waited)
        else:
            self._movable_wait = max(self._movable_wait, waited)

    def _next(self) -> None:
        while self._line and self.running < self.target:
            slot, _ = self._line.popleft()
            if not slot.done():
                self.running += 1
                slot.set_result(True)

    def _drop(self, entry: tuple[asyncio.Future[bool], bool]) -> None:
        try:
            self._line.remove(entry)
        except ValueError:
            pass
        self._settle_idle()

    def _settle_idle(self) -> None:
        if self.running == 0 and self.queued == 0 and self._idle_since is None:
            self._idle_since = time.monotonic()
