"""The client's filesystem: every ``FileSystemSurface`` method as one owner call (or one stream)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import Any

from ..actors import OutcomeUnknownError, UploadLostError, WorkspaceUnavailableError
from ..actors.wire import STREAM_CHUNK
from ..storage import check_write_data
from ..storage.types import DirEntry, FileStat, FindEntry, GrepMatch
from ..surface import WriteData
from ._connection import Connection
from ._locks import fences_for

__all__ = ["ClientFileSystem"]

# Data up to this size travels as one argument; larger or iterable data is a chunked upload.
DIRECT_WRITE_MAX = 4 * 1024 * 1024
# An upload of bytes whose owner restarted between two pieces starts again, at most this many times.
UPLOAD_ATTEMPTS = 3


class ClientFileSystem:
    """Same methods, results and error classes as the owner's ``workspace.fs``."""

    def __init__(self, connection: Connection) -> None:
        self._conn = connection

    async def _read(self, op: str, *args: Any, **kwargs: Any) -> Any:
        return await self._conn.request("call", op, args, kwargs, retry_safe=True)

    async def _write(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """A mutation: presents the task's lock fences, and a fresh idempotency key (see Connection)."""
        key = uuid.uuid4().hex
        fences = fences_for(self._conn)
        return await self._conn.request("call", op, args, kwargs, fences, key, keyed=True)

    async def read_file(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        data: bytes = await self._read("read_file", path, offset=offset, length=length)
        return data

    async def read_text(self, path: str) -> str:
        text: str = await self._read("read_text", path)
        return text

    def stream(self, path: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        """Pieces of at most 512 KiB; breaking out of the loop cancels the owner's side."""
        return self._conn.stream("stream", path, offset, length)

    async def write_file(self, path: str, data: WriteData, *, mode: int | None = None) -> None:
        check_write_data(path, data)
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, bytes | bytearray | memoryview):
            if len(data) <= DIRECT_WRITE_MAX:
                await self._write("write_file", path, bytes(data), mode=mode)
                return
            view = memoryview(data)

            def pieces() -> Iterable[memoryview]:
                return (view[i : i + STREAM_CHUNK] for i in range(0, len(view), STREAM_CHUNK))

            # Bytes can be sent again: an upload lost with a restarted owner starts over.
            for attempt in range(UPLOAD_ATTEMPTS):
                try:
                    await self._upload(path, pieces(), mode)
                    return
                except UploadLostError:
                    if attempt + 1 == UPLOAD_ATTEMPTS:
                        raise
            return
        await self._upload(path, data, mode)

    async def _upload(
        self,
        path: str,
        pieces: AsyncIterable[bytes] | Iterable[bytes] | Iterable[memoryview],
        mode: int | None,
    ) -> None:
        """Send pieces re-cut to at most 512 KiB, one call each; the owner commits them in one write.

        An owner that restarted between two pieces has forgotten the upload (nothing was written):
        :class:`UploadLostError` (a ``WorkspaceUnavailableError``), which the caller may restart when
        it can replay its data; an iterator cannot be replayed, so its writer gets the error.
        """
        fences = fences_for(self._conn)
        upload_id = await self._conn.request("upload_begin", path, mode, fences)
        try:
            buffer = bytearray()
            async for piece in _aiter(pieces):
                buffer += piece
                while len(buffer) >= STREAM_CHUNK:
                    await self._conn.request("upload_put", upload_id, bytes(buffer[:STREAM_CHUNK]))
                    del buffer[:STREAM_CHUNK]
            if buffer:
                await self._conn.request("upload_put", upload_id, bytes(buffer))
        except WorkspaceUnavailableError as exc:
            # The owner forgot the upload (restarted between two pieces) or died during one: nothing
            # of it was committed, whatever the owner that answers next says.
            await self._abort(upload_id)
            raise UploadLostError(exc.filename or path, f"upload of {path} lost: {exc.strerror}") from exc
        except BaseException:
            await self._abort(upload_id)
            raise
        try:
            await self._conn.request("upload_commit", upload_id)
        except OutcomeUnknownError:
            raise  # the owner died while committing: applied or not, nobody can tell
        except WorkspaceUnavailableError as exc:  # the owner that answered never had the upload
            raise UploadLostError(exc.filename or path, f"upload of {path} lost: {exc.strerror}") from exc

    async def _abort(self, upload_id: str) -> None:
        try:
            await self._conn.request("upload_abort", upload_id)
        except Exception:  # the owner is gone or already dropped it: nothing was committed
            pass

    async def mkdir(self, path: str, *, recursive: bool = False, mode: int = 0o755) -> None:
        await self._write("mkdir", path, recursive=recursive, mode=mode)

    async def rm(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        await self._write("rm", path, recursive=recursive, force=force)

    async def readdir(self, path: str, *, limit: int | None = None, offset: int = 0) -> list[DirEntry]:
        entries: list[DirEntry] = await self._read("readdir", path, limit=limit, offset=offset)
        return entries

    async def stat(self, path: str) -> FileStat:
        stat: FileStat = await self._read("stat", path)
        return stat

    async def exists(self, path: str) -> bool:
        return bool(await self._read("exists", path))

    async def find(
        self,
        directory: str,
        pattern: str | None = None,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[FindEntry]:
        entries: list[FindEntry] = await self._read(
            "find", directory, pattern, exclude=list(exclude), limit=limit, offset=offset
        )
        return entries

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
    ) -> list[GrepMatch]:
        matches: list[GrepMatch] = await self._read(
            "grep",
            pattern,
            path,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            include=include if include is None or isinstance(include, str) else list(include),
            exclude=list(exclude),
            limit=limit,
            offset=offset,
        )
        return matches

    async def ls(self, prefix: str) -> list[str]:
        paths: list[str] = await self._read("ls", prefix)
        return paths

    async def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        await self._write("rename", src, dst, overwrite=overwrite)

    async def copy(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        await self._write("copy", src, dst, overwrite=overwrite)

    async def symlink(self, target: str, path: str) -> None:
        await self._write("symlink", target, path)

    async def link(self, existing: str, new: str) -> None:
        """A hard link: ``new`` names the file at ``existing`` (see ``FileSystem.link``)."""
        await self._write("link", existing, new)

    async def readlink(self, path: str) -> str:
        target: str = await self._read("readlink", path)
        return target

    async def realpath(self, path: str, *, follow: bool = True) -> str:
        """``path`` with its symlinks resolved, in one owner call (see ``FileSystem.realpath``)."""
        real: str = await self._read("realpath", path, follow=follow)
        return real


async def _aiter(pieces: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[bytes]:
    if isinstance(pieces, AsyncIterable):
        async for piece in pieces:
            yield bytes(piece)
    else:
        for piece in pieces:
            yield bytes(piece)
