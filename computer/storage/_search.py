"""Tree walks: the full walk behind ``ls``/``manifest`` and the paged, pruning walk behind find/grep.

The paged walk is depth-first, a directory before its children, children in byte order of their
names, read from SQLite in pages of :data:`PAGE_SIZE`. An excluded path is skipped with its whole
subtree, and ``X/**`` excludes prune below ``X`` without reading it, so the cost of a walk is bounded
by what it returns plus one page per visited directory. Symlinks are listed but never followed.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

from ._content import iter_file
from ._db import Database
from ._glob import MAX_GLOBS, Glob, GlobError, GlobSet
from ._grep import LineMatcher, grep_file
from ._resolve import kind_of, resolve_read
from ._schema import DIR, FILE, SYMLINK
from ._state import Store
from ._tree import children_page
from .errors import fs_error
from .paths import join
from .types import FindEntry, GrepMatch

__all__ = ["PAGE_SIZE", "find", "grep", "walk", "walk_tree", "walk_tree_after"]

_T = TypeVar("_T")

PAGE_SIZE = 256


_CHILDREN_SQL = (
    "SELECT d.name, d.child, i.kind, i.size, i.mode, i.mtime, i.nlink, i.sub_ns FROM dirents d JOIN inodes i "
    "ON i.id = d.child WHERE d.parent = ? ORDER BY d.name"
)

Row = tuple[str, int, int, int, int, int, int, int]  # (path, kind, size, mode, mtime, inode, nlink, sub_ns)


def walk_tree(db: Database, ino: int, path: str) -> Iterator[Row]:
    """Every node below a directory: ``(path, kind, size, mode, mtime, inode, nlink, sub_ns)``,
    depth-first in
    name order. One query per directory; a directory comes right before its subtree.
    """
    work: list[Iterator[tuple[str, int, int, int, int, int, int, int]]] = [
        iter(db.execute(_CHILDREN_SQL, (ino,)).fetchall())
    ]
    paths = [path]
    while work:
        row = next(work[-1], None)
        if row is None:
            work.pop()
            paths.pop()
            continue
        name, child, kind, size, mode, mtime, nlink, sub_ns = row
        cpath = join(paths[-1], name)
        yield cpath, kind, size, mode, mtime, child, nlink, sub_ns
        if kind == DIR:
            work.append(iter(db.execute(_CHILDREN_SQL, (child,)).fetchall()))
            paths.append(cpath)


_PAGE_SQL = (
    "SELECT d.name, d.child, i.kind, i.size, i.mode, i.mtime, i.nlink, i.sub_ns FROM dirents d JOIN inodes i "
    "ON i.id = d.child WHERE d.parent = ? AND d.name > ? ORDER BY d.name LIMIT ?"
)


def walk_tree_after(db: Database, ino: int, path: str, after: list[str]) -> Iterator[Row]:
    """:func:`walk_tree` from just after the node at relative segments ``after`` (``[]``: from the
    start), reading children in pages of :data:`PAGE_SIZE`: memory stays one page per level, so a
    caller can page through a tree of millions of entries. Segments that no longer exist still
    place the walk (names compare as in the walk: UTF-8 byte order).
    """
    # Frames (directory inode, its path, last name read, rows read but not yet walked); the walk
    # resumes inside every ancestor of ``after``, after the segment it came down through.
    stack: list[tuple[int, str, str, deque[tuple[str, int, int, int, int, int, int, int]]]] = []
    cur_ino, cur_path = ino, path
    for i, seg in enumerate(after):
        stack.append((cur_ino, cur_path, seg, deque()))
        row = db.one(
            "SELECT d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child WHERE d.parent = ? AND d.name = ?",
            (cur_ino, seg),
        )
        if row is None or int(row[1]) != DIR:
            break
        cur_ino, cur_path = int(row[0]), join(cur_path, seg)
        if i == len(after) - 1:  # ``after`` is a directory: its children come next
            stack.append((cur_ino, cur_path, "", deque()))
    else:
        if not after:
            stack.append((ino, path, "", deque()))
    while stack:
        d_ino, d_path, last, page = stack[-1]
        if not page:
            rows = db.execute(_PAGE_SQL, (d_ino, last, PAGE_SIZE)).fetchall()
            if not rows:
                stack.pop()
                continue
            page.extend(rows)
        name, child, kind, size, mode, mtime, nlink, sub_ns = page.popleft()
        stack[-1] = (d_ino, d_path, name, page)
        cpath = join(d_path, name)
        yield cpath, kind, size, mode, mtime, child, nlink, sub_ns
        if kind == DIR:
            stack.append((child, cpath, "", deque()))


class _Frame:
    __slots__ = ("after", "done", "ino", "page", "path", "rel")

    def __init__(self, ino: int, path: str, rel: str) -> None:
        self.ino = ino
        self.path = path
        self.rel = rel
        self.after: str | None = None
        self.page: deque[tuple[str, int, int]] = deque()
        self.done = False


def walk(
    st: Store, ino: int, path: str, exclude: GlobSet, max_depth: int | None = None
) -> Iterator[tuple[str, str, int, int]]:
    """Paged depth-first walk below a directory: ``(path, relative path, kind, inode)``.

    Excluded entries are skipped with their subtree; ``max_depth`` stops descending (a relative path
    of depth > max_depth is never read).
    """
    stack = [_Frame(ino, path, "")]
    while stack:
        frame = stack[-1]
        if not frame.page:
            if frame.done:
                stack.pop()
                continue
            rows = children_page(st, frame.ino, frame.after, PAGE_SIZE)
            if len(rows) < PAGE_SIZE:
                frame.done = True
            if not rows:
                stack.pop()
                continue
            frame.page.extend(rows)
            frame.after = rows[-1][0]
        name, child, kind = frame.page.popleft()
        rel = name if not frame.rel else frame.rel + "/" + name
        if exclude and exclude.match(rel):
            continue
        cpath = join(frame.path, name)
        yield cpath, rel, kind, child
        if kind == DIR and (max_depth is None or rel.count("/") + 1 < max_depth):
            if not (exclude and exclude.covers_children(rel)):
                stack.append(_Frame(child, cpath, rel))


def _max_depth(patterns: list[Glob]) -> int | None:
    """How deep a match can be (segments), or None when a pattern has ``**``."""
    depth = 0
    for g in patterns:
        if "**" in g.pattern:
            return None
        depth = max(depth, g.pattern.count("/") + 1)
    return depth


def find(
    st: Store,
    directory: str,
    pattern: str | None,
    *,
    exclude: Sequence[str],
    limit: int | None,
    offset: int,
) -> list[FindEntry]:
    """Files and directories below ``directory`` whose relative path matches the glob (SPEC 4)."""
    path = st.canon(directory)
    _check_paging(path, offset, limit)
    ino, kind, _ = resolve_read(st, path)
    if kind != DIR:
        raise fs_error(errno.ENOTDIR, path)
    if limit == 0:
        return []
    if pattern and pattern.startswith("./"):
        pattern = pattern[2:]  # "./x" means x relative to the directory
    excludes = _as_list(exclude)
    _check_count(path, excludes, 1 if pattern else 0)
    glob = _compiled(path, Glob, pattern) if pattern else None
    depth = None if glob is None else _max_depth([glob])
    out: list[FindEntry] = []
    skip = offset
    for cpath, rel, kind, _ in walk(st, ino, path, _compiled(path, GlobSet, excludes), depth):
        if glob is not None and not glob.match(rel):
            continue
        if skip:
            skip -= 1
            continue
        if kind == SYMLINK:
            kind = DIR if kind_of(st, cpath) == DIR else FILE
        out.append(FindEntry(path=cpath, type="dir" if kind == DIR else "file"))
        if limit is not None and len(out) >= limit:
            break
    return out


def grep(
    st: Store,
    pattern: str,
    where: str,
    *,
    regex: bool,
    ignore_case: bool,
    context: int,
    include: str | Sequence[str] | None,
    exclude: Sequence[str],
    limit: int | None,
    offset: int,
) -> list[GrepMatch]:
    """Matching lines of a file, or of the files below a directory (SPEC 4)."""
    path = st.canon(where)
    _check_paging(path, offset, limit)
    if not 0 <= context <= 10:
        raise fs_error(errno.EINVAL, path, "context must be between 0 and 10")
    ino, kind, _ = resolve_read(st, path)
    matcher = LineMatcher(pattern, regex=regex, ignore_case=ignore_case, path=path)
    if limit == 0:
        return []
    stop = None if limit is None else offset + limit
    if kind != DIR:
        found = grep_file(path, iter_file(st, ino), matcher, context)
        return list(islice(found, offset, stop))
    included, excluded = ([] if include is None else _as_list(include)), _as_list(exclude)
    _check_count(path, excluded, len(included))
    includes = _compiled(path, GlobSet, included)
    excludes = _compiled(path, GlobSet, excluded)
    depth = _max_depth(includes.globs) if includes else None

    def matches() -> Iterator[GrepMatch]:
        for cpath, rel, k, child in walk(st, ino, path, excludes, depth):
            if k != FILE or (includes and not includes.match(rel)):
                continue
            yield from grep_file(cpath, iter_file(st, child), matcher, context)

    return list(islice(matches(), offset, stop))


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _check_count(path: str, globs: list[str], more: int) -> None:
    if len(globs) + more > MAX_GLOBS:
        raise fs_error(
            errno.EINVAL, path, f"{len(globs) + more} globs, over the {MAX_GLOBS} one search takes: use fewer"
        )


def _compiled(path: str, make: Callable[[Any], _T], patterns: Any) -> _T:
    """``make(patterns)`` (a :class:`Glob` or :class:`GlobSet`), EINVAL naming ``path`` when a glob
    cannot be compiled."""
    try:
        return make(patterns)
    except GlobError as exc:
        raise fs_error(errno.EINVAL, path, str(exc)) from None


def _check_paging(path: str, offset: int, limit: int | None) -> None:
    if offset < 0 or (limit is not None and limit < 0):
        raise fs_error(errno.EINVAL, path, "offset and limit must not be negative")
