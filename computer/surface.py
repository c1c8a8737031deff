"""The workspace surface: what the owner (`Workspace`) and a client (`get_workspace`) both offer.

Tools, adapters and the CLI are written against these protocols only, so they work the same
in-process and across Ray. Result and error types come from ``computer.storage`` and
``computer.runtime.types``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from .runtime.types import BackendInfo, ExecResult, ExecSnapshot
from .storage.types import DirEntry, FileStat, FindEntry, GrepMatch

__all__ = [
    "AssetsSurface",
    "ExecHandleSurface",
    "FileSystemSurface",
    "LocksSurface",
    "RuntimeSurface",
    "WorkspaceSurface",
]

WriteData = bytes | str | AsyncIterable[bytes] | Iterable[bytes]


@runtime_checkable
class FileSystemSurface(Protocol):
    async def read_file(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes: ...
    async def read_text(self, path: str) -> str: ...
    def stream(self, path: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]: ...
    async def write_file(self, path: str, data: WriteData, *, mode: int | None = None) -> None: ...
    async def mkdir(self, path: str, *, recursive: bool = False, mode: int = 0o755) -> None: ...
    async def rm(self, path: str, *, recursive: bool = False, force: bool = False) -> None: ...
    async def readdir(self, path: str, *, limit: int | None = None, offset: int = 0) -> list[DirEntry]: ...
    async def stat(self, path: str) -> FileStat: ...
    async def exists(self, path: str) -> bool: ...
    async def find(
        self,
        directory: str,
        pattern: str | None = None,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[FindEntry]: ...
    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        regex: bool = False,
        ignore_case: bool = False,
        context: int = 0,
        include: str | Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[GrepMatch]: ...
    async def ls(self, prefix: str) -> list[str]: ...
    async def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None: ...
    async def copy(self, src: str, dst: str, *, overwrite: bool = False) -> None: ...
    async def symlink(self, target: str, path: str) -> None: ...
    async def readlink(self, path: str) -> str: ...


@runtime_checkable
class LocksSurface(Protocol):
    """The owner's lock table. ``hold`` waits for conflicting holds, then holds until the block exits.

    A path conflicts with the same canonical path; a ``subtree`` hold also conflicts with every
    ancestor and descendant hold. Several paths are taken all at once (no partial holds, no deadlock).
    """

    def hold(self, paths: Sequence[str], *, subtree: bool = False) -> AbstractAsyncContextManager[None]: ...


@runtime_checkable
class ExecHandleSurface(Protocol):
    id: str
    backend: str

    def __aiter__(self) -> AsyncIterator[ExecSnapshot]: ...
    async def result(self) -> ExecResult: ...
    async def kill(self) -> None: ...


@runtime_checkable
class RuntimeSurface(Protocol):
    def backends(self) -> list[BackendInfo]: ...
    async def exec(
        self,
        source: str,
        *,
        backend: str | None = None,
        id: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: Any = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (pinned by SPEC section 6)
        output: Any = None,
    ) -> ExecHandleSurface: ...
    async def get_exec(self, id: str) -> ExecHandleSurface: ...
    async def kill_exec(self, id: str) -> None: ...
    async def dispose_exec(self, id: str) -> None: ...


@runtime_checkable
class AssetsSurface(Protocol):
    async def share(
        self,
        path: str,
        *,
        expires_after: float = 3600.0,
        prefix: str | None = None,
        content_type: str | None = None,
        filename: str | None = None,
        disposition: str = "inline",
    ) -> str: ...


@runtime_checkable
class WorkspaceSurface(Protocol):
    """``id`` is stable for one workspace in every process (it is the tools' lock identity).

    The members are read-only here (properties), so a class whose ``fs`` is a :class:`FileSystem`
    (the owner's ``Workspace``) or a client's proxy both satisfy the protocol.
    """

    @property
    def id(self) -> str: ...
    @property
    def fs(self) -> FileSystemSurface: ...
    @property
    def locks(self) -> LocksSurface: ...
    @property
    def runtime(self) -> RuntimeSurface: ...
    @property
    def assets(self) -> AssetsSurface | None: ...

    async def close(self) -> None: ...
