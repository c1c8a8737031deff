"""Result types of the filesystem surface (SPEC section 4). Frozen, snake_case, picklable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

__all__ = [
    "BatchResult",
    "Change",
    "ChangeSet",
    "ChunkRef",
    "DirEntry",
    "FileStat",
    "FindEntry",
    "GrepContextLine",
    "GrepMatch",
    "ManifestEntry",
    "ManifestRow",
]


@dataclass(frozen=True, slots=True)
class DirEntry:
    name: str
    parent_path: str
    size: int
    mtime: int  # milliseconds since the epoch
    is_file: bool
    is_directory: bool
    is_symlink: bool


@dataclass(frozen=True, slots=True)
class FileStat:
    name: str
    mode: int
    mtime: int  # milliseconds since the epoch
    size: int
    is_file: bool
    is_directory: bool
    ino: int = 0  # the node's id in this store: names with the same ino are hard links of one file
    nlink: int = 1  # how many names the node has
    # The nanoseconds past ``mtime`` (0 to 999,999): a time an exec pull kept finer than the ms
    # (``inodes.sub_ns``); the exact time is ``mtime * 1_000_000 + sub_ns``. Optional: 0 elsewhere.
    sub_ns: int = 0


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One chunk of a file's content (:meth:`FileSystem.file_chunks`): ``hash`` is the hex SHA-256 of
    its bytes, ``size`` their length. Every chunk of a file but the last is 512 KiB, cut at fixed
    offsets, so an in-place change of a few bytes changes the hash of one chunk only."""

    hash: str
    size: int


class ManifestRow(NamedTuple):
    """One node of :meth:`FileSystem.manifest` (the default, without ``inodes``)."""

    path: str
    kind: Literal["file", "dir", "symlink"]
    size: int
    mode: int
    mtime: int  # milliseconds since the epoch


class ManifestEntry(NamedTuple):
    """One node of :meth:`FileSystem.manifest`. ``ino`` identifies the node (equal for every name of
    one file: hard links), ``nlink`` counts its names in the whole store (not only below the root)."""

    path: str
    kind: Literal["file", "dir", "symlink"]
    size: int
    mode: int
    mtime: int  # milliseconds since the epoch
    ino: int
    nlink: int
    sub_ns: int = 0  # the nanoseconds past ``mtime`` (``FileStat.sub_ns``)


@dataclass(frozen=True, slots=True)
class FindEntry:
    path: str
    type: Literal["file", "dir"]


@dataclass(frozen=True, slots=True)
class GrepContextLine:
    line: int
    text: str
    is_match: bool


@dataclass(frozen=True, slots=True)
class GrepMatch:
    path: str
    line: int
    text: str
    context: list[GrepContextLine] | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change log: ``op`` is ``"write"``, ``"mkdir"``, ``"rm"``, ``"rename"``, ``"symlink"``…

    ``"touch"`` is a directory whose time alone changed (a run's pull keeps the program's, or a name a
    workspace call made, removed or renamed in it: logged after that call's entries): a change of
    that directory, not of anything below it (no conflict rule counts it for the paths below).

    A rename is two entries of one revision: ``"rm"`` of the old path, then ``"rename"`` of the new
    one, whose ``source`` is the old path (a mirror moves what it holds rather than making it again).
    A hard link's new name is ``"link"`` with the existing name as its ``source`` (a mirror holding
    that file links it rather than copying it).
    """

    path: str
    op: str
    rev: int
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """What changed below ``root`` after a revision.

    ``complete`` is False when the log no longer reaches back that far; the caller must then
    resynchronise from a full listing.
    """

    rev: int
    changes: list[Change] = field(default_factory=list)
    complete: bool = True


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Outcome of :meth:`FileSystem.commit_batch`: the new revision and the paths it left alone."""

    rev: int
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
