"""``WorkspaceFileStore``: a workspace surface (owner or client) seen as a ``FileStore``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable

from ..runtime import SYSTEM_DIR, refuse_protected_change
from ..runtime import system_refused as refused_by_system_dir
from ..storage.paths import canonical, real_path, split
from ..surface import LocksSurface, WorkspaceSurface
from .file_store import FileStoreStat

__all__ = ["SYSTEM_DIR", "WorkspaceFileStore", "system_refused"]


def system_refused(path: str) -> PermissionError:
    """What a tool's change under :data:`SYSTEM_DIR` (the workspace's own bookkeeping: SPEC section 1)
    gets (the tools answer it as ``{"error": ...}``)."""
    return refused_by_system_dir(path, "the tools")


_SYSTEM = {SYSTEM_DIR: system_refused}


class WorkspaceFileStore:
    """Adapts ``workspace.fs`` to the ``FileStore`` protocol and locks in the owner's lock table.

    ``lock_identity`` derives from ``workspace.id``, so every store over one workspace, in any process,
    has the same identity. ``read_chunks`` is one ranged ``fs.stream`` call: a continuation never
    transfers the bytes before it.

    Decision: ``write`` and ``remove`` refuse a change under ``/.computer`` (or of ``/``), checked where
    the path really leads (symlinks followed, as the change would follow them; ``runtime._protected``).
    It holds the runtime's journal (the records ``get_exec`` trusts after a restart: a ``write`` there
    rewrote a run's outcome), the saved output logs the exec tool points to, pull staging and an
    agent's state; the SPEC names it the exec output's place, never the user's. Reads stay allowed (an
    exec result says ``Full output: /.computer/output/...``: ``read`` and ``grep`` open it). Only the
    tools: ``workspace.fs`` is the owner's API, through which the runtime writes there, and a python
    run's ``workspace`` module is already refused the journal (``runtime._context``).
    """

    def __init__(self, workspace: WorkspaceSurface) -> None:
        self.workspace = workspace
        self._fs = workspace.fs

    @property
    def lock_identity(self) -> Hashable:
        return ("computer.workspace", self.workspace.id)

    @property
    def locks(self) -> LocksSurface:
        return self.workspace.locks

    async def stat(self, path: str) -> FileStoreStat | None:
        try:
            st = await self._fs.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return FileStoreStat(size=st.size, mtime=st.mtime, mode=st.mode, is_directory=st.is_directory)

    async def read_all(self, path: str) -> bytes | None:
        try:
            return await self._fs.read_file(path)
        except FileNotFoundError:
            return None

    def read_chunks(
        self, path: str, byte_offset: int = 0, byte_length: int | None = None
    ) -> AsyncIterator[bytes]:
        return self._fs.stream(path, offset=byte_offset, length=byte_length)

    async def write(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write ``data``; missing parent directories are created (only when the first attempt needs them)."""
        await refuse_protected_change(self._fs, "write_file", {"path": path}, _SYSTEM)
        try:
            await self._fs.write_file(path, data, mode=mode)
        except FileNotFoundError:
            parent, _ = split(canonical(path))
            await self._fs.mkdir(parent, recursive=True)
            await self._fs.write_file(path, data, mode=mode)

    async def readlink(self, path: str) -> str:
        """The target of the symlink at ``path`` (EINVAL when it is not one): the path locks resolve links with it."""
        return await self._fs.readlink(path)

    async def realpath(self, path: str, *, follow: bool = True) -> str:
        """``path`` with its symlinks resolved (``fs.realpath``: one owner call through a client)."""
        return await real_path(self._fs, path, follow=follow)

    async def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        await refuse_protected_change(self._fs, "rm", {"path": path}, _SYSTEM)
        await self._fs.rm(path, recursive=recursive, force=force)

    def __repr__(self) -> str:
        return f"WorkspaceFileStore({self.workspace.id!r})"
