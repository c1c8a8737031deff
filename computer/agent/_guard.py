"""The agent's own state is read-only for the model's tools.

``/.computer/agent`` (``state.json``, ``mcp.json``, extensions, execution records) is written by the
agent alone. The model's workspace tools (write, edit, delete, ...) get a workspace whose ``fs``
refuses any change there, and the sandbox's ``workspace`` module goes through the same check (see
``AgentExecContext``): a refused change is a ``PermissionError`` naming the path, which the tools
return as their normal ``{"error": ...}``. Reads stay allowed.

A path is checked where it really leads (symlinks followed, as the write would follow them), and a
change to an ancestor of the state directory (removing or replacing ``/.computer``, ``/``) is refused
too. ``mkdir`` of an ancestor is harmless and allowed.
"""

from __future__ import annotations

import errno
from typing import Any

from ..runtime import reaches_protected, refuse_protected_change
from ._store import STATE_DIR

__all__ = ["GuardedFs", "GuardedWorkspace", "check_change", "refused", "touches_state"]


def refused(path: str) -> PermissionError:
    return PermissionError(
        errno.EACCES,
        f"Permission denied: the agent's own state ({STATE_DIR}) cannot be changed by its tools",
        path,
    )


def touches_state(real: str, *, ancestors: bool) -> bool:
    """True when a change at canonical ``real`` reaches the state directory."""
    return reaches_protected(real, STATE_DIR, ancestors=ancestors)


async def check_change(fs: Any, op: str, args: dict[str, Any]) -> None:
    """Raise ``PermissionError`` when fs operation ``op`` with ``args`` would change the agent's state."""
    await refuse_protected_change(fs, op, args, {STATE_DIR: refused})


class GuardedFs:
    """``fs`` for the model's tools: reads pass through, changes to the agent's state are refused."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    async def write_file(self, path: str, data: Any, *, mode: int | None = None) -> None:
        await check_change(self._fs, "write_file", {"path": path})
        await self._fs.write_file(path, data, mode=mode)

    async def mkdir(self, path: str, *, recursive: bool = False, mode: int = 0o755) -> None:
        await check_change(self._fs, "mkdir", {"path": path})
        await self._fs.mkdir(path, recursive=recursive, mode=mode)

    async def rm(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        await check_change(self._fs, "rm", {"path": path})
        await self._fs.rm(path, recursive=recursive, force=force)

    async def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        await check_change(self._fs, "rename", {"src": src, "dst": dst})
        await self._fs.rename(src, dst, overwrite=overwrite)

    async def copy(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        await check_change(self._fs, "copy", {"dst": dst})
        await self._fs.copy(src, dst, overwrite=overwrite)

    async def symlink(self, target: str, path: str) -> None:
        await check_change(self._fs, "symlink", {"path": path})
        await self._fs.symlink(target, path)

    async def link(self, existing: str, new: str) -> None:
        await check_change(self._fs, "link", {"new": new})
        await self._fs.link(existing, new)


class GuardedWorkspace:
    """The agent's workspace as its tools see it: the same, with a :class:`GuardedFs`."""

    def __init__(self, workspace: Any) -> None:
        self._workspace = workspace
        self.fs = GuardedFs(workspace.fs)

    @property
    def id(self) -> str:
        return str(self._workspace.id)

    @property
    def locks(self) -> Any:
        return self._workspace.locks

    @property
    def runtime(self) -> Any:
        return self._workspace.runtime

    @property
    def assets(self) -> Any:
        return getattr(self._workspace, "assets", None)

    @property
    def audit(self) -> Any:
        return getattr(self._workspace, "audit", None)

    async def close(self) -> None:
        raise PermissionError("the agent's tools cannot close its workspace")
