"""The sync batch: what the exec mirror's bracket uses (``manifest``, ``changes_since``, ``commit_batch``).

Every function takes the shared :class:`~._state.Store`. A pull from a sandbox is one
``commit_batch``: one transaction, one revision, applied in a fixed order (removals deepest first,
then directories, then writes, then hard links, then modes and mtimes of existing paths) under one
conflict rule (see :func:`commit_batch`).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TypeVar

from ._batch_dirs import make_dirs
from ._content import set_content
from ._in_place import in_place_refused
from ._pieces import Assembler, Piece
from ._resolve import lookup, resolve, resolve_read
from ._resolve import target as target_of
from ._schema import DIR, KIND_NAMES, SYMLINK, clean_mode
from ._search import Row, walk_tree, walk_tree_after
from ._state import CREATE_OP, LINK_SOURCE, TOUCH, Mutation, Store
from ._tree import add_entry, add_name, ensure_dirs, new_inode, remove_leaves, remove_node
from .errors import fs_error
from .paths import is_within, join, parts, split, target_problem
from .types import BatchResult, Change, ChangeSet, ManifestEntry, ManifestRow

V = TypeVar("V")
W = TypeVar("W")

__all__ = ["changes_since", "commit_batch", "manifest"]

_NLINK = "SELECT nlink FROM inodes WHERE id = ?"


def manifest(
    st: Store, root: str, *, inodes: bool = False, after: str | None = None, limit: int | None = None
) -> list[ManifestRow] | list[ManifestEntry]:
    """Every node below ``root`` as a :class:`ManifestRow` ``(path, "file"|"dir"|"symlink", size,
    mode, mtime)``, in walk order.

    With ``inodes=True`` each is a :class:`ManifestEntry`, the same five fields then ``ino`` and
    ``nlink``: names sharing an ``ino`` are hard links of one file, and ``sub_ns`` (the nanoseconds
    past ``mtime``: ``inodes.sub_ns``). (The five fields stay the
    default so that callers unpacking five values keep working.)
    ``after``/``limit`` page it: at most ``limit`` entries strictly after the path ``after`` (in walk
    order, which is the order of paths compared segment by segment), read a page of children at a
    time, so a tree of millions of entries never sits in memory at once (``after`` need not exist
    any more). ENOENT when ``root`` is missing; ``[]`` when it is not a directory.
    """
    p = st.canon(root)
    if limit is not None and limit < 0:
        raise fs_error(errno.EINVAL, p, "limit must not be negative")
    ino, kind, _ = resolve_read(st, p)
    if kind != DIR:
        return []
    if after is None and limit is None:
        rows: Iterable[Row] = walk_tree(st.db, ino, p)
    else:
        start = st.canon(after) if after is not None else p
        if not is_within(start, p):
            raise fs_error(errno.EINVAL, start, f"not below the manifest root {p}")
        with st.db.snapshot():  # one consistent page
            rows = list(islice(walk_tree_after(st.db, ino, p, parts(start)[len(parts(p)) :]), limit))
    if inodes:
        return [
            ManifestEntry(path, KIND_NAMES[k], size, mode, mtime, node, nlink, sub_ns)  # type: ignore[arg-type]
            for path, k, size, mode, mtime, node, nlink, sub_ns in rows
        ]
    return [
        ManifestRow(path, KIND_NAMES[k], size, mode, mtime)  # type: ignore[arg-type]
        for path, k, size, mode, mtime, _, _, _ in rows
    ]


# Pairs of log entries of one revision: the second one's op -> the first one's (whose path is its source).
_PAIRS = {"rename": "rm", "link": LINK_SOURCE}
_FIRSTS = frozenset(_PAIRS.values())


def _log_rows(st: Store, rev: int, skip_revs: Sequence[int]) -> Iterator[tuple[int, int, str, str]]:
    """The change log's rows after ``rev`` but those of ``skip_revs``, in order: a range scan of each
    gap between skipped revisions. A pull in pages skips its own earlier pages; ``rev NOT IN (...)``
    still visited their rows, so page k of a pull read the k-1 pages before it (``rm -rf`` of 100,000
    files: ~60 ms a page by the last ones, 1.1 s in all)."""
    lo = rev
    for skipped in sorted({int(v) for v in skip_revs if v > rev}):
        if skipped > lo + 1:
            yield from st.db.execute(
                "SELECT rev, n, path, op FROM changes WHERE rev > ? AND rev < ? ORDER BY rev, n",
                (lo, skipped),
            )
        lo = skipped
    yield from st.db.execute("SELECT rev, n, path, op FROM changes WHERE rev > ? ORDER BY rev, n", (lo,))


def changes_since(st: Store, rev: int, root: str = "/", *, skip_revs: Sequence[int] = ()) -> ChangeSet:
    """Changes at or below ``root`` (or of an ancestor of it) after ``rev``, in order, leaving out
    the revisions ``skip_revs`` (a caller's own: never read, however many changes they hold).

    ``complete`` is False when the log was trimmed past ``rev``: resynchronise from :meth:`manifest`.
    """
    r = st.canon(root)
    floor = int(st.db.one("SELECT log_floor FROM state WHERE id = 1")[0])
    changes: list[Change] = []
    add = changes.append
    everything = r == "/"
    below = r + "/"  # ``is_within`` both ways, inline (100,000 rows: ~40 ms of calls)
    previous: tuple[int, int, str, str] | None = None  # the row before, when a pair's first one
    for rv, n, path, op in _log_rows(st, rev, skip_revs):
        source = None
        if previous is not None and previous[:2] == (rv, n - 1) and _PAIRS.get(op) == previous[3]:
            # The pair's first row (``_tree.rename``, ``_tree.link``), even outside ``root``.
            source = previous[2]
        previous = (rv, n, path, op) if op in _FIRSTS else None
        if op == LINK_SOURCE:
            continue  # the existing name of a link: not a change of it
        if everything or path.startswith(below) or path == r or path == "/" or below.startswith(path + "/"):
            add(Change(path, op, rv, source))
    return ChangeSet(rev=st.rev, changes=changes, complete=rev >= floor)


def commit_batch(
    st: Store,
    writes: Mapping[str, bytes | Sequence[Piece] | None],
    *,
    mkdirs: Sequence[str] = (),
    modes: Mapping[str, int] | None = None,
    base_rev: int | None = None,
    mtimes: Mapping[str, int] | None = None,
    links: Mapping[str, str] | None = None,
    symlinks: Mapping[str, str] | None = None,
    sub_ns: Mapping[str, int] | None = None,
    in_place: Mapping[str, int] | None = None,
    own_revs: Sequence[int] = (),
) -> BatchResult:
    """Apply many changes in one transaction and one revision (the shell backend's pull).

    ``bytes`` (or a list of pieces: bytes and existing chunks by :class:`ChunkRef` or hex hash, see
    ``_pieces``) writes a file (creating parents; a directory or a symlink at the path is replaced, never written through: the batch says what the path is now), ``None`` removes
    a path (recursively, missing is fine), ``mkdirs`` ensures directories, ``modes`` sets modes,
    ``mtimes`` sets mtimes in ms, kept exactly (of written files, ensured directories and existing
    paths alike: a pull keeps the program's mtime, not the sync time); ``sub_ns`` the nanoseconds
    past a path's ``mtimes`` entry (0 to 999,999; EINVAL beyond), 0 where it names none, and nothing
    without one: every time set here replaces the remainder too (``inodes.sub_ns``). A write to a name of a file
    with several names (hard links) gives that name a new file; ``links`` (new path -> existing
    path) then gives existing files more names, after the writes: a pull sends every name that
    still shares a file with a written one. A link replaces what is at its path; one whose
    existing path is missing or a directory, or would go with what the link replaces (inside the
    directory at its path, or a file its parents replace), is left out and listed in ``skipped``. ``symlinks``
    (path -> target, stored verbatim) makes symlinks after the writes and before the links,
    replacing what is there (the same link already there is no change); an empty target or one
    with NUL is skipped. The mtime of a path in ``symlinks`` is the link's own (``touch -h``); modes
    and mtimes of other existing paths follow symlinks.
    With ``base_rev``, a path changed after that revision (itself, an ancestor or a descendant) is
    left alone and listed in ``skipped``; if the change log no longer reaches ``base_rev`` every
    path is skipped (the workspace wins when we cannot tell).
    ``in_place`` (a written path -> the revision its writer last saw): that write goes through the
    node at the path, every name of it (a pull's file the program wrote through, not replaced: no
    name is re-sent as a link), unless the workspace wrote that node through another name after
    that revision (by one not in ``own_revs``: the writer's own): then the path is skipped, and the
    links to it with it (``_in_place.in_place_refused``).
    """
    modes = dict(modes or {})
    st.refresh()  # once for the whole batch, not per path
    canon_writes = dict(zip(st.canon_many(writes), writes.values(), strict=True))
    canon_dirs = _sorted_unique(st.canon_many(mkdirs))
    canon_modes = _canon_keys(st, modes, clean_mode)
    canon_mtimes = _canon_keys(st, mtimes or {}, int)
    canon_sub = _canon_keys(st, sub_ns, int) if sub_ns else {}
    if canon_sub and not (0 <= min(canon_sub.values()) and max(canon_sub.values()) < 1_000_000):
        bad = next(p for p, v in canon_sub.items() if not 0 <= v < 1_000_000)
        raise fs_error(errno.EINVAL, bad, "sub_ns is the nanoseconds past a millisecond: 0 to 999,999")
    canon_links = _canon_keys(st, links or {}, lambda old: st.canon(old, refresh=False))
    symlinks = symlinks or {}
    canon_symlinks = dict(zip(st.canon_many(symlinks), symlinks.values(), strict=True))
    groups = [
        g for g in (canon_writes, canon_dirs, canon_modes, canon_mtimes, canon_links, canon_symlinks) if g
    ]
    # Sorted once; a batch of one kind (a pull's ``mkdir -p``, its removals) has no union to make.
    every = sorted(groups[0]) if len(groups) == 1 else sorted(set().union(*groups))
    skipped: set[str] = set()
    if base_rev is not None:
        changed = changes_since(st, base_rev)
        if not changed.complete:
            skipped = set(every)
        else:
            touched = [c.path for c in changed.changes if c.op != TOUCH]
            if touched:  # else nothing conflicts (a pull with the workspace quiet: no call per path)

                def conflicts(p: str) -> bool:
                    return any(is_within(p, t) or is_within(t, p) for t in touched)

                skipped = {p for p in every if conflicts(p)}
                # A link to a path changed meanwhile would name the workspace's file, not the run's.
                skipped.update(new for new, old in canon_links.items() if conflicts(old))
    through: set[str] = set()  # writes made through the node (``in_place``)
    if in_place:
        asked = {p: int(rev) for p, rev in _canon_keys(st, in_place, int).items() if p in canon_writes}
        if asked:
            log = changes_since(st, min(asked.values()), skip_revs=own_revs)
            refused = in_place_refused(st, {p: r for p, r in asked.items() if p not in skipped}, log)
            skipped |= refused
            skipped.update(new for new, old in canon_links.items() if old in refused)
            through = asked.keys() - skipped
    applied: list[str] = []
    todo = [p for p in every if p not in skipped] if skipped else every
    if not todo:
        return BatchResult(rev=st.rev, applied=[], skipped=sorted(skipped))
    with st.mutation(todo[0]) as m:
        removed = [p for p in todo if p in canon_writes and canon_writes[p] is None] if canon_writes else []
        _remove(st, removed, m)
        applied += removed
        ensured = [p for p in canon_dirs if p not in skipped] if skipped else canon_dirs
        made = make_dirs(st, ensured, canon_modes, canon_mtimes, m, canon_sub)
        # With the parents it made that the batch gives a mode or mtime (a pull's ``mkdir -p a/b/c``
        # names all three: ``a`` and ``a/b`` were left out of ``applied``, so of the run's ``pulled``).
        parents = made.difference(ensured)
        applied += sorted(parents.union(ensured)) if parents else ensured
        for p in todo if len(removed) < len(canon_writes) else ():  # else no write to make
            data = canon_writes.get(p)
            if data is None:
                continue
            parent, name = split(p)
            pino = ensure_dirs(st, parent, 0o755, m, replace_files=True)
            node = lookup(st, pino, name)
            real = join(resolve(st, parent)[2], name)
            if node is not None and node[1] in (DIR, SYMLINK):
                # The batch says what the path is now (a sync's pull): a directory or a symlink there
                # is replaced, never written through (a link to ``/secret/x`` the program replaced by
                # a file wrote its bytes there, outside the mount root). Logged as removed first, so
                # another mirror replaces it too rather than writing into what it holds.
                remove_node(st, real, pino, name, node[0], node[1])
                m.log(real, "rm")
                node = None
            elif node is not None and p not in through and st.db.one(_NLINK, (node[0],))[0] > 1:
                # A file of several names the batch replaces (a program's ``os.replace`` over it): this
                # name gets a new file, the others keep theirs. Logged as removed first too: another
                # mirror wrote the new bytes into the file it holds, its other names with it (s64).
                m.log(real, "rm")
            parts = Assembler(st, p, None, staged=False)
            if isinstance(data, (bytes, bytearray, memoryview)):
                parts.feed_bytes(bytes(data))
            else:
                parts.prefetch(data)
                for piece in data:
                    parts.feed(piece)
            ids = parts.finish()
            set_content(
                st,
                p,
                pino,
                name,
                real,
                node,
                ids,
                parts.total,
                canon_modes.get(p),
                canon_mtimes.get(p),
                detach=p not in through,
                sub_ns=canon_sub.get(p, 0),
            )
            m.log(real, "write")
            applied.append(p)
        for p, target in sorted(canon_symlinks.items()):
            mtime = canon_mtimes.pop(p, None)
            if p not in skipped and not _batch_symlink(st, p, target, m, mtime, canon_sub.get(p, 0)):
                skipped.add(p)
            elif p not in skipped:
                applied.append(p)
        for p, old in sorted(canon_links.items()):
            if p not in skipped and not _batch_link(st, p, old, m):
                skipped.add(p)
            elif p not in skipped:
                applied.append(p)
        settled = made - canon_symlinks.keys() - canon_links.keys()
        # Written files and new directories got their mode and mtime when made (a pull's ``mkdir -p``
        # of 1,110 with their times: set arithmetic, no loop over them).
        for p in sorted((canon_modes.keys() | canon_mtimes.keys()) - settled - skipped):
            if canon_writes.get(p) is not None:
                continue
            if _set_meta(st, p, canon_modes.get(p), canon_mtimes.get(p), m, canon_sub.get(p, 0)):
                applied.append(p)
    return BatchResult(rev=st.rev, applied=_sorted_unique(applied), skipped=sorted(skipped))


def _set_meta(st: Store, p: str, mode: int | None, mtime: int | None, m: Mutation, sub_ns: int = 0) -> bool:
    """Give the existing ``p`` (links followed) ``mode`` and ``mtime`` (with ``sub_ns``, 0 by
    default: a new time never keeps the old remainder) where given; False when it is not there or
    has them already. A directory's time alone is logged :data:`TOUCH`."""
    try:
        ino, kind, real = resolve(st, p)
    except OSError:
        return False
    old = st.db.one("SELECT mode, mtime, sub_ns FROM inodes WHERE id = ?", (ino,))
    old_mode = old[0]
    new = (old_mode if mode is None else mode, *(old[1:] if mtime is None else (mtime, sub_ns)))
    if new == tuple(old):
        return False
    mode = new[0]
    st.db.execute("UPDATE inodes SET mode = ?, mtime = ?, sub_ns = ? WHERE id = ?", (*new, ino))
    m.log(real, TOUCH if kind == DIR and mode == old_mode else CREATE_OP[kind])
    return True


def _canon_keys(st: Store, given: Mapping[str, V], value: Callable[[V], W]) -> dict[str, W]:
    """``given`` with canonical keys (refused as by ``Store.canon``) and each value through ``value``.
    Keys canonical already, as a batch's nearly always are, are checked at once (``Store.plain``:
    1,000 paths ~0.05 ms, one at a time ~0.6); otherwise key then value, item by item."""
    if st.plain(list(given)):
        return dict(zip(given, map(value, given.values()), strict=True))
    return {st.canon(k, refresh=False): value(v) for k, v in given.items()}


def _sorted_unique(paths: list[str]) -> list[str]:
    """``sorted(set(paths))``, cheaper for paths that come sorted or in a few sorted runs (a pull's,
    this module's lists): Timsort merges the runs in about a comparison a path (1,000 paths ~0.03 ms,
    through a set's scrambled order ~0.1)."""
    out = sorted(paths)
    return out if len(set(out)) == len(out) else sorted(set(out))


def _remove(st: Store, paths: Sequence[str], m: Mutation) -> None:
    """Remove ``paths`` (canonical, distinct; missing is fine, ``/`` is never removed), links not followed.

    Set-wise, by parent: each parent is resolved once (links followed, as any path's parents are);
    its listed names are taken from the resolution cache, and those it lacks found in one query
    (1,000 names ~3 ms of SQLite: the cache first), so a pull of 1,000 removals in one directory
    costs one resolution and at most one query, not two resolutions per path (a cold cache: a
    query or more per path). Files and links are removed together (:func:`remove_leaves`), a
    directory with its tree at once; parents are taken deepest first (reverse order: a path sorts
    after its ancestors), and the files held so far are removed before each directory, since they
    may lie below it.
    """
    names: dict[str, list[str]] = {}
    for p in paths:
        parent, _, name = p.rpartition("/")  # ``split``, inline
        if name:  # not ``/``
            held = names.get(parent or "/")
            if held is None:
                names[parent or "/"] = held = []
            held.append(name)
    many = len(names) > 1  # only paths of different parents can name one entry (through symlinks)
    leaves: list[tuple[str, int, str, int, int]] = []  # files and links, removed together
    doomed: set[str] = set()
    cache = st.cache  # emptied in place when a directory goes (``Store.forget``)
    for parent in sorted(names, reverse=True):
        try:
            pino, pkind, preal = resolve(st, parent)
        except OSError:
            continue  # its parent is missing (or not a directory): nothing to remove
        if pkind != DIR:
            continue
        found: list[tuple[str, int, int]] = []
        unknown: list[str] = []
        prefix = preal if preal == "/" else preal + "/"
        for name in names[parent]:
            node = cache.get(prefix + name)
            if node is None:
                unknown.append(name)
            else:
                found.append((name, node[0], node[1]))
        if len(unknown) == 1:
            node = lookup(st, pino, unknown[0])
            if node is not None:
                found.append((unknown[0], *node))
        elif unknown:
            found += st.db.execute(
                "SELECT d.name, d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child "
                "WHERE d.parent = ? AND d.name IN (SELECT value FROM json_each(?))",
                (pino, json.dumps(unknown, ensure_ascii=False)),
            ).fetchall()
        found.sort(reverse=True)
        for name, ino, kind in found:
            real = prefix + name  # ``join``
            if kind == DIR:
                remove_leaves(st, leaves, m)  # in order: they may lie below this directory
                remove_node(st, real, pino, name, ino, kind)
                m.log(real, "rm")
            elif not many:
                leaves.append((real, pino, name, ino, kind))
            elif real not in doomed:  # two paths through symlinks may name one entry
                doomed.add(real)
                leaves.append((real, pino, name, ino, kind))
    remove_leaves(st, leaves, m)


def _batch_symlink(
    st: Store, p: str, target: str, m: Mutation, mtime: int | None = None, sub_ns: int = 0
) -> bool:
    """Make ``p`` a symlink to ``target`` (verbatim) with its own ``mtime`` (and ``sub_ns`` past it;
    None: now), replacing what
    is there; False for a target ``symlink`` refuses (``target_problem``: empty, NUL, not UTF-8, too
    long) or ``/``. The same link already there only takes ``mtime`` (logged when it changes)."""
    if p == "/" or target_problem(target) is not None:
        return False
    parent, name = split(p)
    pino = ensure_dirs(st, parent, 0o755, m, replace_files=True)
    real = join(resolve(st, parent)[2], name)
    node = lookup(st, pino, name)
    if node is not None and node[1] == SYMLINK and target_of(st, node[0]) == target:
        if (
            mtime is not None
            and st.db.execute(
                "UPDATE inodes SET mtime = ?1, sub_ns = ?2 WHERE id = ?3 AND (mtime != ?1 OR sub_ns != ?2)",
                (mtime, sub_ns, node[0]),
            ).rowcount
        ):
            m.log(real, "symlink")
        return True  # already that link
    if node is not None:
        remove_node(st, real, pino, name, node[0], node[1])
    ino = new_inode(st, SYMLINK, 0o777, len(target.encode("utf-8")), target, mtime=mtime, sub_ns=sub_ns)
    add_entry(st, pino, name, ino, real, SYMLINK)
    m.log(real, "symlink")
    return True


def _batch_link(st: Store, p: str, old: str, m: Mutation) -> bool:
    """Name the node at ``old`` also ``p`` (replacing what is there); False when ``old`` is not a
    file or symlink, or lies inside the directory at ``p`` (kept then) or on the way to ``p`` (a
    file that making ``p``'s parents replaced): naming a deleted node left an entry to nothing."""
    try:
        ino, kind, old_real = resolve(st, old, follow=False)
    except OSError:
        return False
    if kind == DIR or p == "/":
        return False
    parent, name = split(p)
    pino = ensure_dirs(st, parent, 0o755, m, replace_files=True)
    real = join(resolve(st, parent)[2], name)
    node = lookup(st, pino, name)
    if node is not None and node[0] == ino:
        return True  # already a name of that file
    if node is not None and node[1] == DIR and is_within(old_real, real):
        return False
    if node is not None:
        remove_node(st, real, pino, name, node[0], node[1])
    if st.db.one("SELECT kind FROM inodes WHERE id = ?", (ino,)) != (kind,):
        return (
            False  # ``ensure_dirs`` replaced it (its id may be a new directory's: SQLite reuses the top id)
        )
    add_name(st, pino, name, ino, real, kind)
    m.log(old_real, LINK_SOURCE)  # see ``_tree.link``
    m.log(real, "link")
    return True
