"""The inotify ABI ``_watch`` speaks (``<sys/inotify.h>``): event bits, the mask a mirror's watch asks
for, the event header, and the event groups ``drain`` tells apart."""

from __future__ import annotations

import contextlib
import ctypes
import struct
from pathlib import Path

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
EVENT = struct.Struct("iIII")
NEW_DIR = IN_CREATE | IN_ISDIR
GONE = IN_DELETE | IN_MOVED_FROM
BORN = IN_CREATE | IN_MOVED_TO
RARE = IN_IGNORED | IN_MOVE_SELF | IN_MOVED_FROM | IN_MOVED_TO  # looked at closer in ``drain``


def inotify_limit(name: str, default: int) -> int:
    """The host's ``/proc/sys/fs/inotify/<name>`` (``default`` when it cannot be read)."""
    with contextlib.suppress(OSError, ValueError):
        return int(Path(f"/proc/sys/fs/inotify/{name}").read_text())
    return default


def load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        # No argtypes for inotify_add_watch (once per new directory): their conversion cost ~1 µs of
        # its ~4.5; an int fd, bytes and the mask (it fits a C int) pass as they are.
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not Linux, or no inotify in this libc
        return None
    return libc
