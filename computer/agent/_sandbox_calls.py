"""``AgentExecContext``: the runtime's exec context plus one operation, ``agent_tool``.

Sandboxed Python (the ``execute`` tool, extension tools) calls back to the agent over the python
backend's existing channel: the guest's ``workspace`` module sends msgpack frames ``{op, args}`` that
the runtime answers, outside the sandbox, with ``ctx.fs_call``. This context answers ``op == "agent_tool"`` by running one of
the agent's tools, but only for a token the agent issued to that one execution; every other op goes
to the workspace as before. No new socket, no new process.

Sandboxed code must not change the agent's own state (``/.computer/agent``): a changing op there is
refused with ``PermissionError`` (see ``_guard.py``), and so is a sandbox pull (``bash``, a mirror)
that would write or delete there.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from ..runtime import LocalExecContext, PullResult, SyncLimits, SyncPull, SyncPush
from ..storage.paths import canonical
from ..surface import WorkspaceSurface
from ._guard import refused, touches_state
from ._store import STATE_DIR

__all__ = ["TOOL_OP", "AgentExecContext", "ToolDispatch"]

TOOL_OP = "agent_tool"

# (tool name, arguments) -> JSON-able result; raises to make the call fail inside the sandbox.
ToolDispatch = Callable[[str, dict[str, Any]], Awaitable[Any]]


class AgentExecContext:
    """An ``ExecContext`` over the agent's workspace that also routes tool calls of sandboxed code."""

    def __init__(self, workspace: WorkspaceSurface) -> None:
        self._local = LocalExecContext(workspace)
        self._local.protected[STATE_DIR] = refused  # with the journal, in one pass per call
        self._sessions: dict[str, ToolDispatch] = {}

    @property
    def workspace_id(self) -> str:
        return self._local.workspace_id

    @contextlib.contextmanager
    def session(self, dispatch: ToolDispatch) -> Iterator[str]:
        """A token that lets one execution call ``dispatch`` while the block runs."""
        token = secrets.token_hex(16)
        self._sessions[token] = dispatch
        try:
            yield token
        finally:
            del self._sessions[token]

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        if op != TOOL_OP:
            return await self._local.fs_call(op, args)
        dispatch = self._sessions.get(str(args.get("token")))
        if dispatch is None:
            raise RuntimeError("this execution may not call agent tools")
        arguments = args.get("args") or {}
        if not isinstance(arguments, dict):
            raise TypeError("tool arguments must be keyword arguments")
        return await dispatch(str(args.get("name")), dict(arguments))

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        return await self._local.sync_push(mirror_rev, root, limits)

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> PullResult:
        changed = [
            *(f.path for f in pull.files),
            *(d.path for d in pull.dirs),
            *(s.path for s in pull.symlinks),
            *pull.deleted,
            *(path for pair in pull.renames for path in pair),  # (a program's directory renames)
        ]
        for path in changed:
            if touches_state(canonical(path), ancestors=True):
                raise refused(canonical(path))
        return await self._local.sync_pull(pull, base_rev)

    async def share(self, path: str, expires_after: float) -> str:
        return await self._local.share(path, expires_after)
