"""``PerCallRuns``: the runs in a sandbox of their own now in progress, so that one whose event loop
ended can be ended from another (``end``: killed, what it wrote pulled).

A run in a sandbox per call (``live=False``) is a sync bracket driven by a task of the loop that
started it: its output is read there, and its pull comes after the program ends, there. When that
loop has ended (closed, or stopped, under the run: one ``asyncio.run`` or ``run_until_complete`` per
call) nothing of it runs again, and the run stayed in progress for good. ``end`` does from the
calling loop what a kill does: the process tree SIGKILLed, then the bracket's pull from the mirror,
the same pull with the same rules (a path the workspace changed meanwhile keeps the workspace's
version and is listed as skipped). The mirror is dropped afterwards (the next run pushes a fresh one
in full): the ended loop's task may still hold it, and should that loop run again its bracket goes
on over the mirror; ``Mirror.taken_by`` makes that bracket's pull and release do nothing there.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._backend import ExecContext
from ._mirror import Mirror
from ._process import SandboxProcess

if TYPE_CHECKING:
    from ._sync import MirrorSync, RunSaves, Synced

__all__ = ["PerCallRuns"]

# Runs ended from another loop whose changes are remembered (a second kill of one gets them).
_ENDED_KEPT = 1000


@dataclass
class _Bracket:
    """What ending one run from another loop needs: its sandbox's process, its mirror and the pull's
    base, the context its bracket was given, the loop that drives it."""

    workspace_id: str
    ctx: ExecContext
    mirror: Mirror
    base_rev: int
    process: SandboxProcess
    saves: RunSaves | None
    loop: asyncio.AbstractEventLoop


class PerCallRuns:
    """The runs of one backend's sandboxes per call in progress (``MirrorSync.calls``)."""

    def __init__(self, sync: MirrorSync) -> None:
        self.sync = sync
        self._runs: dict[str, _Bracket] = {}
        self._ended: OrderedDict[str, Synced] = OrderedDict()

    def hold(
        self,
        exec_id: str,
        workspace_id: str,
        ctx: ExecContext,
        mirror: Mirror,
        base_rev: int,
        process: SandboxProcess,
        saves: RunSaves | None = None,
    ) -> None:
        """The run ``exec_id``'s program started in ``process`` over ``mirror`` (pushed at
        ``base_rev``): reachable by :meth:`end` until :meth:`let_go`."""
        loop = asyncio.get_running_loop()
        self._runs[exec_id] = _Bracket(workspace_id, ctx, mirror, base_rev, process, saves, loop)

    def let_go(self, exec_id: str, mirror: Mirror) -> None:
        """The run's bracket is over (its own loop's end of it: only when it still holds ``mirror``)."""
        held = self._runs.get(exec_id)
        if held is not None and held.mirror is mirror:
            del self._runs[exec_id]

    async def end(self, workspace_id: str, exec_id: str) -> Synced | None:
        """End the run ``exec_id`` of ``workspace_id`` whose event loop has ended, from this one: its
        process tree killed, what it wrote pulled (``MirrorSync.pull``, not deferred), the mirror
        dropped. What the pull took and left out; the same for a run ended so already; None when no
        such run is in progress here, or its loop still runs (it is that loop's to end). A pull that
        fails raises, the run kept here: a later call tries it again (its program is dead by then)."""
        held = self._runs.get(exec_id)
        if held is None or held.workspace_id != workspace_id:
            return self._ended.get(exec_id)
        here = asyncio.get_running_loop()
        if held.loop is here or held.loop.is_running():
            return None
        held.mirror.taken_by = here  # that loop's bracket, should it run again, leaves it alone
        await held.process.discard()
        synced = await self.sync.pull(held.mirror, held.ctx, held.base_rev, exec_id, held.saves, defer=False)
        del self._runs[exec_id]
        await self.sync.release(workspace_id, held.mirror, clean=False)
        self._ended[exec_id] = synced
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        return synced
