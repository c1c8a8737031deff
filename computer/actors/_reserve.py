"""Space held in reserve beside a workspace file, so that removing files works on a full disk.

SQLite needs room in its WAL even to delete: on a disk filled by something else, ``fs.rm`` would fail
with ENOSPC and space could never be freed through the API. Each owner keeps a small preallocated file
next to its workspace file; a removal that hits ENOSPC gives it back to the filesystem and runs again.
The reserve is made again (best effort) when space allows.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["RESERVE_BYTES", "DiskReserve"]

RESERVE_BYTES = 2 * 1024 * 1024  # enough WAL for removing thousands of entries at once


class DiskReserve:
    """A preallocated file of :data:`RESERVE_BYTES` at ``path``."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size

    def keep(self) -> bool:
        """Make the reserve if it is missing; False when the disk has no room for it now."""
        try:
            if self.path.stat().st_size >= self.size:
                return True
        except FileNotFoundError:
            pass
        except OSError:
            return False
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self.size)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            return False
        finally:
            os.close(fd)

    def release(self) -> bool:
        """Give the reserve back to the filesystem; False when there was none."""
        try:
            os.unlink(self.path)
            return True
        except OSError:
            return False
