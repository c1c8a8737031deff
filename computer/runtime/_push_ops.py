"""The steps of a push (owner side, see ``LocalExecContext.sync_push``): what the mirror must make
of each changed path, in walk order, and which changed directories it keeps.

A changed directory is sent whole (``"tree"``: removed, then made again with all it holds) when the
workspace removed, replaced or renamed it (a rename the mirror does not follow) or the mirror dropped
it; one that was only made or chmod-ed is sent alone (``"dir"``) with the changes below it, so what
the mirror holds there stays (a file a followed rename moved in keeps its inode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TypeVar

from ..storage import TOUCH, ManifestEntry
from ..storage.paths import is_within
from ..storage.types import Change
from ._backend import SyncLimits
from ._moves import Move, carried
from ._pull_rules import outermost
from ._tasks import offload

__all__ = [
    "OFFLOAD",
    "Op",
    "Plan",
    "below_tops",
    "lacking_names",
    "link_sources",
    "op_key",
    "op_of",
    "ops_below",
    "over_limit",
    "plan_changes",
    "pure",
    "replaced",
    "sent_whole",
    "sorted_ops",
    "walk_key",
    "with_names",
]

# A push over more paths than this does its pure work (what it makes of the change log, the ops
# below a changed directory, their order) in a worker thread, where the interpreter hands the event
# loop its turn every few milliseconds: 100,000 files written in the workspace held the owner's loop
# (every workspace of the process) ~0.4 s at once before a push's first page.
OFFLOAD = 5_000

_T = TypeVar("_T")

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
    sub_ns: int = 0  # the nanoseconds past ``mtime`` (``FileStat.sub_ns``)


def op_of(row: ManifestEntry) -> Op:
    return Op(row.path, row.kind, row.size, row.mode, row.mtime, row.ino, row.nlink, None, row.sub_ns)


def walk_key(path: str) -> str:
    """Walk order: a directory before what it holds, names compared component by component. The
    separator becomes NUL, which sorts before every character a name can hold (a name never holds
    NUL), so one string comparison orders paths as comparing their components one by one did
    (sorting 100,000 paths: ~15 ms, was ~75 ms with ``split``)."""
    return path.replace("/", "\x00")


def op_key(op: Op) -> str:
    return op.path.replace("/", "\x00")


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


def link_sources(
    changes: Sequence[Change],
    refetch: Iterable[str],
    moves: Iterable[Move] = (),
    followed: Collection[int] = (),
) -> dict[str, tuple[str, bool]]:
    """Names the workspace gave a file the mirror holds (``fs.link``): new path -> (the name the
    mirror holds the file at once it followed ``moves``, whether the new name was written after). The
    mirror links its file (so a later write through one name shows in every name there too) rather
    than making a copy. ``changes``: the whole log since the mirror's revision (in order), ``moves``
    the renames among them the mirror follows (before it links anything), ``followed`` the indexes
    of the entries those account for (:func:`~._moves.followable`): a source a followed rename
    took elsewhere after the link is linked from its new name (before: from the old one, gone by
    then, so the new name came as a copy and later writes reached one name only), one a followed
    rename replaced is not used. Only where nothing else the push sends is at, above (sent whole) or
    below the source's final name (the mirror holds it as synced; else the push sends every name and
    links them itself), and the new name was not removed, renamed or linked again after."""
    moving = {(m.src, m.dst, m.rev) for m in moves}
    found: dict[str, tuple[str, bool, bool]] = {}  # new name -> (source's name now, written, held)
    sent: list[tuple[str, bool]] = [(path, True) for path in refetch]  # (path, sent whole)
    for i, c in enumerate(changes):
        if c.op == "rename" and c.source is not None and (c.source, c.path, c.rev) in moving:
            src, dst = c.source, c.path
            for path, (source, written, held) in list(found.items()):
                if is_within(path, dst):
                    del found[path]  # the rename replaced the new name itself
                elif is_within(source, src):
                    found[path] = (dst + source[len(src) :], written, held)
                elif is_within(source, dst):
                    found[path] = (source, written, False)  # the rename replaced the file there
            continue
        if c.op == "link" and c.source is not None:  # (one a later rename replaced: dropped there)
            origin = found.get(c.source)  # a name linked in the same push: its source
            found[c.path] = (c.source, False, True) if origin is None else (origin[0], False, origin[2])
            continue
        if c.op == TOUCH or i in followed:
            continue  # a directory's time (nothing changed below it), or what a followed rename replaced
        sent.append((c.path, c.op not in _IN_PLACE))
        entry = found.get(c.path)
        if entry is not None:
            if c.op in _REPLACING:
                del found[c.path]
            else:
                found[c.path] = (entry[0], True, entry[2])
    usable: dict[str, tuple[str, bool]] = {}
    for path, (source, written, held) in found.items():
        if held and source != path:
            if not any(is_within(t, source) or (whole and is_within(source, t)) for t, whole in sent):
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
    mode (what the mirror holds there stays: what a followed rename moved in). In walk order.

    Driven by the listing (already in walk order) with the changed paths as a set, so nothing is
    sorted but the gone paths: 100,000 files written below one new directory took ~320 ms of the
    owner's loop sorting them and testing each against the path before it, ~40 ms now."""
    prefix = top + "/"
    wanted = {p for p in paths if p.startswith(prefix)}
    if not wanted:
        return []
    ops: list[Op] = []
    seen: set[str] = set()  # wanted paths the listing holds
    covering: set[str] = set()  # sent whole or not a directory: nothing below them is gone
    append, see, cover = ops.append, seen.add, covering.add
    tree: str | None = None  # below a directory sent whole: its entries go with it
    for op in listing:
        path = op.path
        if tree is not None:
            if path.startswith(tree):
                append(op)  # walk order: what a directory holds comes right after it
                continue
            tree = None
        if path not in wanted:
            continue
        see(path)
        if op.kind != "dir":
            cover(path)
        elif path in whole:
            append(dataclasses.replace(op, kind="tree"))
            cover(path)
            tree = path + "/"
            continue
        append(op)
    missing = wanted.difference(seen)
    if missing:
        covering |= missing  # a gone path below another gone one is covered by it
        gone = []
        for path in missing:
            parent = path.rpartition("/")[0]
            while len(parent) > len(top) and parent not in covering:
                parent = parent.rpartition("/")[0]
            if len(parent) <= len(top):
                gone.append(Op(path, "gone"))
        ops.extend(gone)
        ops.sort(key=op_key)  # two runs in walk order, merged
    return ops


async def pure(size: int, fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` (pure: nothing shared is changed) on the loop, or in a worker thread when
    ``size`` is over :data:`OFFLOAD`."""
    if size <= OFFLOAD:
        return fn(*args)
    return await offload(None, fn, *args)


@dataclasses.dataclass(slots=True)
class Plan:
    """What an incremental push makes of the change log, before it looks at the workspace's tree."""

    moves: list[Move]  # renames the mirror follows
    tops: list[str]  # the outermost changed paths
    below: dict[str, list[str]]  # the changed paths strictly below each top
    whole: set[str]  # changed paths sent whole (see :func:`sent_whole`)
    replaced: set[str]  # paths holding another file than before (see :func:`replaced`)
    linked: dict[str, tuple[str, bool]]  # names linked to files the mirror holds (:func:`link_sources`)
    # Tops whose time alone changed (``"touch"``: a name the workspace made or removed in them, or a
    # pull's time), outside every other changed path: sent as their own op alone, nothing walked.
    timed: frozenset[str] = frozenset()


def plan_changes(changes: Sequence[Change], root: str, refetch: list[str]) -> Plan | None:
    """The plan of an incremental push below ``root`` from ``changes`` (in log order) and the paths
    the mirror fetches again; None when a change at or above the root (the root renamed or
    removed) needs the whole tree again."""
    moves, followed, changes = carried(changes, root, refetch)  # (earlier changes at their new names)
    # The time of the root or above it alone (a pull's), or the root's own mode (``"mkdir"``: another
    # mirror's ``chmod 700 .``), is no change to the tree (a mirror keeps its root's own: ``SyncPush``
    # carries them): not the whole tree again (before, a root's mode sent every mirror a full push).
    rest = [
        c
        for i, c in enumerate(changes)
        if i not in followed
        and not (c.op == TOUCH and is_within(root, c.path))
        and not (c.op == "mkdir" and c.path == root)
    ]
    timed = {c.path for c in rest if c.op == TOUCH}
    paths = [c.path for c in rest if c.op != TOUCH] + refetch
    if any(is_within(root, p) for p in paths):
        return None
    tops = outermost(paths)
    # A directory's time alone is no top over what changed below it (a workspace write's parent: its
    # whole subtree was walked for one file); one inside another top goes with that top's ops.
    inside = set(tops).union(*below_tops(tops, timed).values()) if timed else set()
    alone = timed - inside
    tops += sorted(alone)
    return Plan(
        moves,
        tops,
        below_tops(tops, paths + list(timed)),
        sent_whole(rest, refetch),
        replaced(rest),
        link_sources(changes, refetch, moves, followed),
        frozenset(alone),
    )


def sorted_ops(ops: list[Op]) -> list[Op]:
    ops.sort(key=op_key)
    return ops


def lacking_names(ops: Sequence[Op], plan: Plan, refetch: Collection[str]) -> set[int]:
    """Hard-linked files (inodes) the push makes anew in the mirror (a name the workspace replaced and
    did not link to a file the mirror holds, one the mirror fetches again, one below a directory sent
    whole) while some of their names are not on it (``ops``: in walk order). Before, those names
    kept the mirror's old file: a directory the workspace renamed where the mirror could not follow
    came back with new files, two files where the workspace had one (s50/h7)."""
    count: dict[int, int] = {}
    anew: dict[int, int] = {}  # inode -> its link count
    tree: str | None = None  # below a directory sent whole
    for op in ops:
        if tree is not None and not op.path.startswith(tree):
            tree = None
        if op.kind == "tree":
            tree = op.path + "/"
        if op.kind != "file" or op.nlink < 2:
            continue
        count[op.ino] = count.get(op.ino, 0) + 1
        if (
            tree is not None
            or op.path in refetch
            or (op.path in plan.replaced and op.path not in plan.linked)
        ):
            anew[op.ino] = op.nlink
    return {ino for ino, nlink in anew.items() if count[ino] < nlink}


def with_names(ops: list[Op], listing: Iterable[Op], inodes: set[int]) -> list[Op]:
    """``ops`` with every name of ``inodes`` in ``listing`` (the tree below the root) they lack, in
    walk order: the push sends them all, as links of one (see :func:`lacking_names`)."""
    have = {op.path for op in ops}
    extra = [op for op in listing if op.kind == "file" and op.ino in inodes and op.path not in have]
    return sorted_ops(ops + extra) if extra else ops
