"""The change-detection key of one path of a mirror (:data:`Entry`), from its ``lstat``: the program
cannot forge ctime, so any write, chmod or touch is seen even when size and mtime come out the same.

An entry is an exact tuple of a ``str`` and ints, read by the index constants below
(``entry[KIND]``): the garbage collector untracks such a tuple the first time it looks at it, while
it tracks an instance of a tuple subclass (a ``NamedTuple``) for good. A mirror holds one entry per
path (``Mirror.state``): as a ``NamedTuple``, a sandbox of 300,000 files kept 300,000 more objects
for every full collection to walk (263-590 ms each, stalling the event loop through the GIL)."""

from __future__ import annotations

import os
import stat
from typing import Final

__all__ = ["CTIME_NS", "INO", "KIND", "MODE", "MTIME_NS", "SIZE", "Entry", "entry_of", "is_dir"]

# (kind, inode, size, mtime_ns, ctime_ns, mode). kind: "f" file, "d" directory, "l" symlink, "o"
# anything else (never synced); mode: the permission bits (``stat.S_IMODE``).
Entry = tuple[str, int, int, int, int, int]
KIND: Final = 0
INO: Final = 1
SIZE: Final = 2
MTIME_NS: Final = 3
CTIME_NS: Final = 4
MODE: Final = 5

# The entry of a directory depends on its mode alone: one shared tuple per mode.
_DIR_ENTRIES: dict[int, Entry] = {}
_IFMT, _IFDIR, _IFREG, _IFLNK = 0o170000, stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK


def entry_of(st: os.stat_result) -> Entry:
    """The change-detection key of one ``lstat`` result.

    The file type is compared on ``st_mode`` directly (``stat.S_ISDIR`` and ``S_IMODE`` are calls:
    a directory's entry took 0.32 µs, 0.12 now; the 1,111 of a ``mkdir -p`` each need one)."""
    mode = st.st_mode
    kind = mode & _IFMT
    if kind == _IFDIR:
        entry = _DIR_ENTRIES.get(mode)
        if entry is None:
            entry = _DIR_ENTRIES[mode] = ("d", 0, 0, 0, 0, mode & 0o7777)
        return entry
    if kind == _IFREG:
        return ("f", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode & 0o7777)
    if kind == _IFLNK:
        return ("l", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode & 0o7777)
    return ("o", st.st_ino, 0, 0, 0, mode & 0o7777)  # fifos, sockets: never synced


def is_dir(entry: Entry | None) -> bool:
    """Whether ``entry`` (None: no entry) is a directory's."""
    return entry is not None and entry[KIND] == "d"
