"""The store the file tools (read, write, edit, delete) work over.

A ``FileStore`` is deliberately small so a custom store (a plain directory, an object store) gets the
same tools. ``WorkspaceFileStore`` adapts a workspace surface to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["FileStore", "FileStoreStat"]


@dataclass(frozen=True, slots=True)
class FileStoreStat:
    """What the tools need to know about a path: ``mtime`` in ms; ``mode`` when the store has modes."""

    size: int
    mtime: int
    mode: int | None = None
    is_directory: bool = False


@runtime_checkable
class FileStore(Protocol):
    """Files addressed by absolute POSIX paths.

    ``read_chunks`` streams without loading the whole file: it yields exactly
    ``min(byte_length or size - byte_offset, size - byte_offset)`` bytes, nothing at or past the end,
    and raises ``FileNotFoundError`` for a missing path. ``read_all`` is the explicit whole-file read,
    used only under the caller's own size bound. ``write`` creates missing parent directories and keeps
    an existing file's mode when ``mode`` is ``None``. ``lock_identity`` is equal for every store that
    reaches the same files: the tools serialise mutations per (identity, path). A store may also offer
    a ``locks`` attribute (a ``LocksSurface``) shared beyond one process; the tools then use it, and an
    ``async readlink(path)`` (EINVAL for a non-link): the tools then lock each path as the file its
    symlinks lead to as well, so a link and its target are never edited at the same time.
    """

    @property
    def lock_identity(self) -> Hashable: ...

    async def stat(self, path: str) -> FileStoreStat | None: ...

    async def read_all(self, path: str) -> bytes | None: ...

    def read_chunks(
        self, path: str, byte_offset: int = 0, byte_length: int | None = None
    ) -> AsyncIterator[bytes]: ...

    async def write(self, path: str, data: bytes, mode: int | None = None) -> None: ...

    async def remove(self, path: str, recursive: bool = False, force: bool = False) -> None: ...
