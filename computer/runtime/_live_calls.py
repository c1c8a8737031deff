"""``LiveCalls``: the ``LiveBackend`` methods (SPEC section 10, "Live sandboxes") of a backend whose
live sandboxes are a :class:`~computer.runtime._live_set.LiveSandboxes` (both built-in backends)."""

from __future__ import annotations

import contextlib

from ._live_parts import RunChanges
from ._live_set import LiveSandboxes
from ._sync import Synced
from ._warm import Ready, WarmSandboxes
from .types import ProcessInfo

__all__ = ["LiveCalls"]


class LiveCalls:
    """The ``LiveBackend`` methods of a backend whose live sandboxes are ``self._lives`` and whose warm
    sandboxes are ``self._warm`` (both built-in backends)."""

    _lives: LiveSandboxes
    _warm: WarmSandboxes[Ready]

    def live_sandboxes(self, workspace_id: str | None = None) -> int:
        """How many live sandboxes this backend holds (of ``workspace_id``, or all): a pool drains such
        a worker instead of removing it."""
        return self._lives.count(workspace_id)

    async def processes(self, workspace_id: str) -> list[ProcessInfo]:
        """The processes of the workspace's live sandbox (none when it has no live sandbox)."""
        return await self._lives.processes(workspace_id)

    async def kill_process(self, workspace_id: str, pid: int) -> None:
        """SIGKILL one process of the workspace's live sandbox; ``ProcessLookupError`` when none has ``pid``."""
        await self._lives.kill_process(workspace_id, pid)

    async def end_sandbox(self, workspace_id: str) -> bool:
        """Kill everything in the workspace's live sandbox, pull what it wrote and drop it; False when
        there was none."""
        return await self._lives.end_sandbox(workspace_id)

    async def end_stranded_run(self, workspace_id: str, exec_id: str) -> RunChanges | Synced | None:
        """End a run whose event loop has ended, from this one (``Runtime.kill_exec``): its live
        sandbox ended with it, what they wrote kept, or its sandbox of its own killed and its pull
        made (``PerCallRuns.end``); what its syncs pulled and refused while it ran, None when no
        sandbox of this backend held it."""
        ended = await self._lives.end_stranded_run(workspace_id, exec_id)
        if ended is None:  # not a live sandbox's: a sandbox per call
            return await self._lives.sync.calls.end(workspace_id, exec_id)
        return ended

    def take_notices(self, workspace_id: str) -> tuple[str | None, dict[str, str]]:
        """What this backend kept for the workspace's next run, taken (``LiveSandboxes.take_notices``)."""
        return self._lives.take_notices(workspace_id)

    async def close_workspace(self, workspace_id: str) -> None:
        """The workspace closed (hibernation): end its live sandbox (what it wrote is pulled) and what
        was started ahead for its idle mirrors and for its runs without one (the mirrors stay warm),
        so a process that closes its workspaces leaves no idle sandbox or interpreter."""
        with contextlib.suppress(Exception):
            await self.end_sandbox(workspace_id)
        await self._warm.close(self._lives.sync.mirrors.idle_mirrors(workspace_id))
