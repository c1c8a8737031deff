"""What a pool worker answers about the live sandboxes it holds (issue 18, SPEC section 10).

The owner's :class:`~computer.actors.pools.PoolBackend` pins a workspace to the worker whose run
reported a live sandbox (``ExitEvent.live``) and asks that worker for its processes, to kill one, or to
end the sandbox; these are those calls (a mixin of :class:`~computer.actors._pool_worker.PoolWorker`).
"""

from __future__ import annotations

from ..runtime import Backend, LiveBackend, ProcessInfo

__all__ = ["LiveSandboxCalls"]


class LiveSandboxCalls:
    """Actor methods over ``self.backend`` when it keeps live sandboxes (the shell backend)."""

    backend: Backend
    name: str

    def _live_backend(self) -> LiveBackend | None:
        return self.backend if isinstance(self.backend, LiveBackend) else None

    def live_count(self, workspace_id: str | None = None) -> int:
        """Live sandboxes held (of ``workspace_id``, or all)."""
        count = getattr(self.backend, "live_sandboxes", None)
        return int(count(workspace_id)) if callable(count) else 0

    def live_notices(self, workspace_id: str) -> tuple[str | None, dict[str, str]]:
        """What the backend kept for the workspace's next run (a note for its stderr, refused paths ->
        reasons), taken: handed back with a run that goes to another worker (``Requeue``)."""
        take = getattr(self.backend, "take_notices", None)
        return take(workspace_id) if callable(take) else (None, {})

    async def live_processes(self, workspace_id: str) -> list[ProcessInfo]:
        backend = self._live_backend()
        return await backend.processes(workspace_id) if backend is not None else []

    async def live_kill(self, workspace_id: str, pid: int) -> None:
        backend = self._live_backend()
        if backend is None:
            raise ProcessLookupError(f"no process {pid}: worker {self.name} keeps no live sandboxes")
        await backend.kill_process(workspace_id, pid)

    async def live_end(self, workspace_id: str) -> bool:
        backend = self._live_backend()
        return await backend.end_sandbox(workspace_id) if backend is not None else False
