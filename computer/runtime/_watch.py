"""``TreeWatch``: inotify over a mirror directory, so a pull looks only at what a run touched.

A run's writes go through a bind mount of the mirror, which is the same inodes: the host's inotify sees
them. Watches are per directory (one per mirror directory, not per file). Anything the watch cannot
vouch for (queue overflow, a directory moved, no watches left, no inotify) makes :meth:`drain` return
``None`` and the caller walks the whole tree instead, so a missed event can cost time, never data.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import fcntl
import os
import struct
import termios
import weakref
from pathlib import Path

__all__ = ["TreeWatch"]

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

_MASK = (
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
_EVENT = struct.Struct("iIII")


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):  # not Linux, or no inotify in this libc
        return None
    return libc


_libc = _load_libc()


class TreeWatch:
    """Watches every directory below ``root``; :meth:`drain` says which relative paths were touched."""

    def __init__(self, root: Path) -> None:
        if _libc is None:
            raise OSError(errno.ENOSYS, "inotify is not available")
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        # A mirror dropped without close() (e.g. by a pool evicting it) must not leak the descriptor.
        self._close = weakref.finalize(self, _close_fd, fd)
        self.root = root
        self._root = os.fspath(root)
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory relative to root ("" is root)
        self._broken = False
        # Paths whose last event in the last drain removed them (no lstat needed to know they are gone).
        self.gone: set[str] = set()
        self._watch_tree("")

    def _watch(self, rel: str, path: str) -> bool:
        assert _libc is not None
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code in (errno.ENOENT, errno.ENOTDIR):
                return False  # gone already: its parent's events cover it
            self._broken = True  # e.g. ENOSPC: out of watches
            return False
        self._dirs[wd] = rel
        return True

    def _watch_tree(self, rel: str, touched: set[str] | None = None) -> None:
        """Watch ``rel`` and every directory below it; add every entry below it to ``touched``.

        Paths are plain strings (``pathlib`` cost 30 µs per directory of a 1,000-directory tree).
        """
        stack = [(rel, f"{self._root}/{rel}" if rel else self._root)]
        while stack:
            current, path = stack.pop()
            if not self._watch(current, path):
                continue
            try:
                with os.scandir(path) as it:
                    entries = list(it)
            except OSError:
                continue
            for entry in entries:
                child = f"{current}/{entry.name}" if current else entry.name
                if touched is not None:
                    touched.add(child)
                if entry.is_dir(follow_symlinks=False):
                    stack.append((child, entry.path))

    def drain(self) -> set[str] | None:
        """Relative paths touched since the last drain, or ``None`` when only a full walk can tell."""
        touched: set[str] = set()
        gone: set[str] = set()
        new_dirs: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                self._broken = True
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                raw = data[offset + _EVENT.size : offset + _EVENT.size + size]
                offset += _EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    self._broken = True
                    continue
                if mask & IN_IGNORED:
                    self._dirs.pop(wd, None)
                    continue
                if mask & IN_MOVE_SELF or (mask & (IN_MOVED_FROM | IN_MOVED_TO) and mask & IN_ISDIR):
                    self._broken = True  # watched paths below a moved directory are stale now
                    continue
                parent = self._dirs.get(wd)
                if parent is None:
                    continue
                name = os.fsdecode(raw.rstrip(b"\0"))
                if not name:
                    continue  # an event on the directory itself: its entries report their own changes
                rel = f"{parent}/{name}" if parent else name
                touched.add(rel)
                if mask & (IN_DELETE | IN_MOVED_FROM):
                    gone.add(rel)
                else:
                    gone.discard(rel)
                if mask & IN_CREATE and mask & IN_ISDIR:
                    new_dirs.append(rel)
        if self._broken:
            return None
        walked: set[str] = set()
        for rel in new_dirs:
            self._watch_tree(rel, walked)
        touched |= walked
        self.gone = gone - walked  # found in a new directory: there again (rm -r d; mkdir d; touch d/f)
        return None if self._broken else touched

    def pending(self) -> int:
        """Bytes of events waiting to be drained (-1 when the watch cannot tell)."""
        if self._broken:
            return -1
        size = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, termios.FIONREAD, size, True)
        except OSError:
            return -1
        return size[0]

    def close(self) -> None:
        self._close()


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
