"""The layer under a mirror's push and pull (see ``_mirror``): the change-detection key of a path
(:class:`Entry`), what a run changed before any bytes are read (:class:`PullPlan`), and
:class:`MirrorBase`, the fields and path arithmetic both sides use."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ._backend import MirrorDir, MirrorFile, MirrorSymlink
from ._watch import TreeWatch

__all__ = ["NOT_UTF8", "SPECIAL", "Entry", "MirrorBase", "PullPlan", "entry_of", "is_below", "was_dir"]


class Entry(NamedTuple):
    """The change-detection key of one path of the mirror, from its ``lstat``: the program cannot
    forge ctime, so any write, chmod or touch is seen even when size and mtime come out the same."""

    kind: str  # "f" file, "d" directory, "l" symlink, "o" anything else (never synced)
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    mode: int  # permission bits (``stat.S_IMODE``)


class MirrorBase:
    """What the push and pull sides of :class:`~computer.runtime._mirror.Mirror` share: its fields
    (declared here for them, defined by the ``Mirror`` dataclass) and its path arithmetic."""

    directory: Path
    root: str
    rev: int | None
    protected: set[str]
    state: dict[str, Entry]
    watch: TreeWatch | None
    kept: set[str]
    reasons: dict[str, str]
    unfilled: list[tuple[MirrorFile, list[int] | None]]
    chunks: dict[str, list[str]]
    prints: dict[str, tuple[tuple[str, ...], list[int]]]
    owner: tuple[int, int] | None
    own_revs: list[int]
    refetch: set[str]

    def host(self, path: str) -> Path:
        return self.directory / self.rel(path)

    def rel(self, path: str) -> str:
        if self.root == "/":
            return path[1:]
        return path[len(self.root) + 1 :]

    def workspace_path(self, rel: str) -> str:
        if not rel:
            return self.root
        return f"/{rel}" if self.root == "/" else f"{self.root}/{rel}"

    def own_since(self, rev: int) -> list[int]:
        """The revisions after ``rev`` that this mirror's own pulls committed: what they changed is in
        the mirror already (a push leaves them out, a pull does not take them for workspace changes)."""
        return [r for r in self.own_revs if r > rev]

    def _own(self, host: Path) -> None:
        if self.owner is not None:
            os.lchown(host, *self.owner)

    def _forget(self, rel: str) -> None:
        prefix = rel + "/"
        for key in [k for k in self.state if k == rel or k.startswith(prefix)]:
            del self.state[key]
            self.chunks.pop(key, None)
            self.prints.pop(key, None)

    def unwatch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None


@dataclass
class PullPlan:
    """What a run changed, before any file's bytes are read (see :meth:`Mirror.pages`)."""

    files: list[tuple[str, Entry]] = field(default_factory=list)  # (relative path, entry)
    dirs: list[MirrorDir] = field(default_factory=list)
    symlinks: list[MirrorSymlink] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (relative path, first name's path)
    # Filled by ``Mirror.pages``: the chunk hashes of each large file it sent as chunks.
    chunk_lists: dict[str, list[str]] = field(default_factory=dict)
    # ... and the fast fingerprints of those chunks (``Mirror.prints``).
    chunk_prints: dict[str, list[int]] = field(default_factory=dict)
    # Paths left in the mirror only, with the reason (names the workspace cannot hold, FIFOs…).
    unsyncable: dict[str, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.files or self.dirs or self.symlinks or self.deleted or self.links)

    def size(self) -> int:
        return sum(entry.size for _, entry in self.files)


NOT_UTF8 = "the name is not UTF-8: the workspace cannot hold it (it stays in the sandbox only)"
SPECIAL = "not a regular file, directory or symlink (FIFO, socket or device): never synced"


# What ``Entry(...)`` does minus its Python-level ``__new__``: a full scan builds one per path (10,000
# paths: Entry(...) cost ~10% of the walk).
_new_entry = tuple.__new__
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
            entry = _DIR_ENTRIES[mode] = _new_entry(Entry, ("d", 0, 0, 0, 0, mode & 0o7777))
        return entry
    if kind == _IFREG:
        return _new_entry(Entry, ("f", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode & 0o7777))
    if kind == _IFLNK:
        return _new_entry(Entry, ("l", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode & 0o7777))
    return _new_entry(Entry, ("o", st.st_ino, 0, 0, 0, mode & 0o7777))  # fifos, sockets: never synced


def was_dir(state: dict[str, Entry], now: dict[str, Entry], rel: str) -> bool:
    old = state.get(rel) or now.get(rel)
    return old is not None and old.kind == "d"


def is_below(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")
