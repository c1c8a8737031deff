"""The steps of a push (owner side, see ``LocalExecContext.sync_push``): what the mirror must make
of each changed path, in walk order, and which changed directories it keeps.

A changed directory is sent whole (``"tree"``: removed, then made again with all it holds) when the
workspace removed, replaced or renamed it (a rename the mirror does not follow) or the mirror dropped
it; one that was only made or chmod-ed is sent alone (``"dir"``) with the changes below it, so what
the mirror holds there stays (a file a followed rename moved in keeps its inode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from ..storage import TOUCH, ManifestEntry
from ..storage.paths import is_within
from ..storage.types import Change
from ._backend import SyncLimits

__all__ = [
    "Op",
    "below_tops",
    "link_sources",
    "op_key",
    "op_of",
    "ops_below",
    "over_limit",
    "replaced",
    "sent_whole",
    "walk_key",
]

# Change log entries after which a path holds another file than before (a write keeps the file).
_REPLACING = frozenset({"rm", "rename", "symlink", "link"})
# A directory only made, chmod-ed or given a time: it keeps what the mirror holds.
_IN_PLACE = frozenset({"mkdir", TOUCH})


@dataclasses.dataclass(frozen=True, slots=True)
class Op:
    """One step of a push, in walk order: a path and what the mirror must make of it."""

    path: str
    kind: str  # "file" | "dir" | "symlink" | "gone" (remove) | "tree" (remove, then make a directory)
    size: int = 0
    mode: int = 0o644
    mtime: int = 0
    ino: int = 0
    nlink: int = 1
    target: str | None = None


def op_of(row: ManifestEntry) -> Op:
    return Op(row.path, row.kind, row.size, row.mode, row.mtime, row.ino, row.nlink)


def walk_key(path: str) -> list[str]:
    """Walk order: a directory before what it holds, names compared component by component."""
    return path.split("/")


def op_key(op: Op) -> list[str]:
    return op.path.split("/")


def over_limit(op: Op, count: int, limits: SyncLimits) -> str | None:
    if limits.max_file_bytes is not None and op.size > limits.max_file_bytes:
        return f"not mirrored: {op.size} bytes is over the backend's max_file_bytes ({limits.max_file_bytes})"
    if limits.max_files is not None and count > limits.max_files:
        return f"not mirrored: beyond the backend's max_files ({limits.max_files})"
    return None


def sent_whole(changes: Iterable[Change], dropped: Iterable[str]) -> set[str]:
    """The changed paths a push sends whole (a directory among them removed first): any but one only
    made or chmod-ed (``"mkdir"``) or given a time (``"touch"``), and what the mirror ``dropped``."""
    return {c.path for c in changes if c.op not in _IN_PLACE}.union(dropped)


def replaced(changes: Iterable[Change]) -> set[str]:
    """The paths holding another file than before the ``changes`` (a write keeps the file: the
    mirror writes into it, ``MirrorFile.same``)."""
    return {c.path for c in changes if c.op in _REPLACING}


def link_sources(changes: Sequence[Change], refetch: Iterable[str]) -> dict[str, tuple[str, bool]]:
    """Names the workspace gave a file the mirror holds (``fs.link``): new path -> (the existing name,
    whether the new name was written after). The mirror links its file (so a later write through one
    name shows in every name there too) rather than making a copy. Only where nothing else changed
    at, above or below the existing name since the mirror's revision (the mirror holds it as synced),
    and the new name was not removed, renamed or linked again after."""
    found: dict[str, tuple[str, bool]] = {}
    touched: list[str] = list(refetch)
    for c in changes:
        if c.op == "link" and c.source is not None:
            found[c.path] = (c.source, False)
            continue
        if c.op == TOUCH:
            continue  # a directory's time: nothing changed below it
        touched.append(c.path)
        if c.path in found:
            if c.op in _REPLACING:
                del found[c.path]
            else:
                found[c.path] = (found[c.path][0], True)
    usable: dict[str, tuple[str, bool]] = {}
    for path, (source, written) in found.items():
        for _ in range(len(found)):  # a name linked from a name linked in the same push: its source
            if source not in found:
                break
            source = found[source][0]
        if source != path and not any(is_within(source, t) or is_within(t, source) for t in touched):
            usable[path] = (source, written)
    return usable


def below_tops(tops: Iterable[str], paths: Iterable[str]) -> dict[str, list[str]]:
    """``paths`` strictly below each of ``tops`` (outermost paths), found by each path's ancestors."""
    found: dict[str, list[str]] = {top: [] for top in tops}
    for path in paths:
        parent = path.rpartition("/")[0]
        while parent and parent not in found:
            parent = parent.rpartition("/")[0]
        if parent:
            found[parent].append(path)
    return found


def ops_below(listing: list[Op], top: str, paths: Iterable[str], whole: set[str]) -> list[Op]:
    """The ops of the changed ``paths`` strictly below the directory ``top`` (itself only made or
    chmod-ed), by the same rule, read from ``listing`` (every entry below ``top``, in walk order): a
    path the listing lacks is gone, a directory in ``whole`` is sent whole, any other only with its
    mode (what the mirror holds there stays: what a followed rename moved in)."""
    at = {op.path: i for i, op in enumerate(listing)}
    ops: list[Op] = []
    covered: list[str] = []  # paths sent whole (or gone): what lies below them is in already
    for path in sorted({p for p in paths if p.startswith(top + "/")}, key=walk_key):
        if covered and is_within(path, covered[-1]):
            continue  # walk order: a covering path comes right before what it covers
        i = at.get(path)
        if i is None:
            ops.append(Op(path, "gone"))
            covered.append(path)
            continue
        op = listing[i]
        if op.kind != "dir":
            ops.append(op)
            covered.append(path)
        elif path in whole:
            ops.append(dataclasses.replace(op, kind="tree"))
            end, prefix = i + 1, path + "/"
            while end < len(listing) and listing[end].path.startswith(prefix):
                end += 1  # walk order: what a directory holds comes right after it
            ops.extend(listing[i + 1 : end])
            covered.append(path)
        else:
            ops.append(op)
    return ops
