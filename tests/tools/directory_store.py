"""A custom ``FileStore`` over a plain host directory: the tools must work over it unchanged.

Workspace paths (``/a/b``) map below ``root``; ``..`` cannot escape it because paths are canonical.
File I/O is plain blocking calls: the files are small and local, and it keeps the store obvious.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from computer.storage.errors import fs_error
from computer.storage.paths import canonical
from computer.tools import FileStoreStat

READ_PIECE = 64 * 1024


class DirectoryFileStore:
    """Files under ``root``; ``lock_identity`` is the resolved root, so two stores over it share locks."""

    def __init__(self, root: Path, *, piece: int = READ_PIECE) -> None:
        self.root = root.resolve()
        self.piece = piece  # size of the pieces read_chunks yields (small values stress boundaries)
        self.bytes_read = 0  # every byte handed out, so tests can prove bounded reads

    @property
    def lock_identity(self) -> object:
        return ("directory", str(self.root))

    def host(self, path: str) -> Path:
        return self.root / canonical(path).lstrip("/")

    async def stat(self, path: str) -> FileStoreStat | None:
        try:
            st = self.host(path).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return FileStoreStat(
            size=st.st_size,
            mtime=st.st_mtime_ns // 1_000_000,
            mode=st.st_mode & 0o7777,
            is_directory=st.st_mode & 0o170000 == 0o040000,
        )

    async def read_all(self, path: str) -> bytes | None:
        try:
            data = self.host(path).read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError as exc:
            raise fs_error(errno.EISDIR, canonical(path)) from exc
        self.bytes_read += len(data)
        return data

    async def read_chunks(
        self, path: str, byte_offset: int = 0, byte_length: int | None = None
    ) -> AsyncIterator[bytes]:
        host = self.host(path)
        if host.is_dir():
            raise fs_error(errno.EISDIR, canonical(path))
        if not host.exists():
            raise fs_error(errno.ENOENT, canonical(path))
        with open(host, "rb") as f:  # noqa: ASYNC230 (local test files: blocking I/O is brief)
            f.seek(byte_offset)
            remaining = byte_length
            while remaining is None or remaining > 0:
                piece = f.read(self.piece if remaining is None else min(self.piece, remaining))
                if not piece:
                    return
                if remaining is not None:
                    remaining -= len(piece)
                self.bytes_read += len(piece)
                yield piece

    async def write(self, path: str, data: bytes, mode: int | None = None) -> None:
        host = self.host(path)
        try:
            host.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise fs_error(errno.ENOTDIR, canonical(path)) from exc
        if host.is_dir():
            raise fs_error(errno.EISDIR, canonical(path))
        keep = host.stat().st_mode & 0o7777 if host.exists() else 0o644
        tmp = host.with_name(host.name + ".~tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, mode if mode is not None else keep)
        os.replace(tmp, host)

    async def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        canon = canonical(path)
        if canon == "/":
            raise fs_error(errno.EPERM, canon)
        host = self.host(canon)
        if not host.exists() and not host.is_symlink():
            if force:
                return
            raise fs_error(errno.ENOENT, canon)
        if host.is_dir() and not host.is_symlink():
            if recursive:
                shutil.rmtree(host)
            else:
                try:
                    host.rmdir()
                except OSError as exc:
                    raise fs_error(errno.ENOTEMPTY, canon) from exc
        else:
            host.unlink()
