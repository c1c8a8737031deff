"""``ExecHandle``: a caller's view of one execution (running, or retained in the journal)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ._tasks import on_loop
from .types import ExecResult, ExecSnapshot

__all__ = ["LOOP_ENDED", "STRANDED", "ExecHandle", "ExecRun"]

LOOP_ENDED = (
    "the event loop that started this run ended before the run did (an asyncio.run returned), which "
    "ends the run: start a run and await its result in one event loop (one asyncio.run)"
)
STRANDED = (
    "the event loop that started this run has ended (an asyncio.run returned) and its backend cannot "
    "reach the run from another one, so it was not killed and runs on until it ends by itself: start "
    "a run, and kill it, in one event loop (one asyncio.run)"
)


class ExecRun:
    """The live state of one running execution: its latest snapshot and its eventual result."""

    def __init__(self, exec_id: str, backend: str) -> None:
        self.id = exec_id
        self.backend = backend
        self.snapshot = ExecSnapshot(exec_id, backend, "running", None, "", "")
        self.killed = False
        self.dirty = False
        self.task: asyncio.Task[None] | None = None
        self.consumer: asyncio.Task[None] | None = None
        # What its settling needs, set as it is driven (``Runtime._drive``): its request, the
        # monotonic time it started, its streams' captures.
        self.request: Any = None
        self.started: float | None = None
        self.captures: dict[str, Any] = {}
        # Its result when settled from another event loop than its own (``finish_stranded``).
        self.settled: ExecResult | None = None
        self._changed = asyncio.Event()
        self._result: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()

    @property
    def done(self) -> bool:
        return self.settled is not None or self._result.done()

    @property
    def stranded(self) -> bool:
        """Whether the event loop that started the run has ended (or stopped) while this one runs:
        nothing of the run's runs there again (its tasks; a cancel of one raised "Event loop is
        closed" where that loop was closed)."""
        loop = self._result.get_loop()
        return loop is not asyncio.get_running_loop() and not loop.is_running()

    async def end_stranded(self, backend: object, workspace_id: str) -> Any:
        """Kill the :attr:`stranded` run from this event loop through its backend, which ends the live
        sandbox it runs in or the sandbox of its own (``LiveCalls.end_stranded_run``: what it wrote is
        kept, as a kill keeps it), or say that it cannot (``STRANDED``, at once: a backend without
        ``end_stranded_run``, a pool's among them; a run in a sandbox of its own whose program had not
        started yet). Returns what the backend knows of what its syncs pulled and refused (a
        ``RunChanges`` or a ``Synced``). No future of that loop is touched here: the caller settles it
        (``finish_stranded``)."""
        end = getattr(backend, "end_stranded_run", None)
        changes = None if end is None else await end(workspace_id, self.id)
        if changes is None:
            raise RuntimeError(f"exec {self.id}: {STRANDED}")
        return changes

    def publish(self, snapshot: ExecSnapshot) -> None:
        """Make ``snapshot`` the latest and wake every waiting iterator."""
        self.snapshot = snapshot
        self.dirty = False
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def finish_stranded(self, result: ExecResult, snapshot: ExecSnapshot) -> None:
        """Settle the :attr:`stranded` run from this event loop: ``result`` is what :meth:`result`
        gives from now on, from any loop. Nothing of its own loop is touched (a result or a wake-up
        there raises "Event loop is closed"); should that loop run again, its settling gives its
        awaiting callers this result (``Settling._settle``)."""
        self.settled = result
        self.snapshot = snapshot
        self.dirty = False

    def finish(self, result: ExecResult, snapshot: ExecSnapshot) -> None:
        if not self._result.done():
            self._result.set_result(result)
        self.publish(snapshot)

    async def result(self) -> ExecResult:
        if self.settled is not None:  # settled from another loop (``finish_stranded``)
            return self.settled
        if self._result.done():  # also from another event loop (one asyncio.run per call)
            return self._result.result()
        return await on_loop(  # a loop running in another thread started it: waited there
            self._result.get_loop(),
            lambda: asyncio.shield(self._result),
            lambda: RuntimeError(f"exec {self.id}: {LOOP_ENDED}"),
        )

    async def snapshots(self) -> AsyncIterator[ExecSnapshot]:
        """The latest snapshot, then each newer one (coalesced), ending with the final one."""
        last = -1
        while True:
            snapshot = self.snapshot
            if snapshot.seq != last:
                last = snapshot.seq
                yield snapshot
                if snapshot.done:
                    return
                continue
            await self._changed.wait()


class ExecHandle:
    """``id``, ``backend``; ``async for snapshot in handle``; ``await result()``; ``await kill()``."""

    def __init__(
        self,
        exec_id: str,
        backend: str,
        *,
        run: ExecRun | None = None,
        result: ExecResult | None = None,
        kill: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if (run is None) == (result is None):
            raise ValueError("an ExecHandle needs either a running execution or a retained result")
        self.id = exec_id
        self.backend = backend
        self._run = run
        self._retained = result
        self._kill = kill

    def __aiter__(self) -> AsyncIterator[ExecSnapshot]:
        if self._run is not None:
            return self._run.snapshots()
        return self._retained_snapshots()

    async def _retained_snapshots(self) -> AsyncIterator[ExecSnapshot]:
        r = self._retained
        assert r is not None
        yield ExecSnapshot(
            self.id, self.backend, r.status, r.exit_code, r.stdout, r.stderr, r.truncated, True
        )

    async def result(self) -> ExecResult:
        """Wait for the end of the run and return its result."""
        if self._run is not None:
            return await self._run.result()
        assert self._retained is not None
        return self._retained

    async def kill(self) -> None:
        """End the run and its whole process tree; returns once the result is settled."""
        if self._kill is not None:
            await self._kill()

    def __repr__(self) -> str:
        return f"ExecHandle(id={self.id!r}, backend={self.backend!r})"
