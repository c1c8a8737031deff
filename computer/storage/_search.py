"""Tree walks: the full walk behind ``ls``/``manifest`` and the paged, pruning walk behind find/grep.

The paged walk is depth-first, a directory before its children, children in byte order of their
names, read from SQLite in pages of :data:`PAGE_SIZE`. An excluded path is skipped with its whole
subtree, and ``X/**`` excludes prune below ``X`` without reading it, so the cost of a walk is bounded
by what it returns plus one page per visited directory. Symlinks are listed but never followed.

``find`` and ``grep`` check their arguments at once and return an iterator of results and *ticks*
(``None``): one after each page of a directory read and each chunk of a file scanned. Nothing of the
walk stays open across a tick (pages are read whole, a file's chunks are pinned), so the caller
(``FileSystem``) gives the event loop away there, in slices: a grep through 3 million matches held
the owner's loop for 12 s, every other call of the workspace waiting. A walk that spans slices sees
each directory's entries as of when their page was read and each file as of when its scan began.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ._content import iter_file
from ._db import Database
from ._glob import MAX_GLOBS, Glob, GlobError, GlobSet
from ._grep import LineMatcher, grep_file
from ._resolve import kind_of, resolve_read
from ._schema import DIR, FILE, SYMLINK
from ._state import Store
from .errors import fs_error
from .paths import join
from .types import FindEntry, GrepMatch

__all__ = ["PAGE_SIZE", "find", "grep", "walk", "walk_tree", "walk_tree_after"]

_T = TypeVar("_T")

PAGE_SIZE = 256


def children_page(st: Store, ino: int, after: str | None, size: int) -> list[tuple[str, int, int]]:
    """Up to ``size`` children ``(name, inode, kind)`` of a directory after ``after``, in name order."""
    if after is None:
        sql = (
            "SELECT d.name, d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child "
            "WHERE d.parent = ? ORDER BY d.name LIMIT ?"
        )
        return st.db.execute(sql, (ino, size)).fetchall()
    sql = (
        "SELECT d.name, d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child "
        "WHERE d.parent = ? AND d.name > ? ORDER BY d.name LIMIT ?"
    )
    return st.db.execute(sql, (ino, after, size)).fetchall()


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
) -> Iterator[tuple[str, str, int, int] | None]:
    """Paged depth-first walk below a directory: ``(path, relative path, kind, inode)``, and a tick
    (``None``) after each page read.

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
            yield None
            continue
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
) -> Iterator[FindEntry | None]:
    """Files and directories below ``directory`` whose relative path matches the glob (SPEC 4), with
    ticks (see the module docstring); the arguments are checked before this returns.

    A symlink is listed with the type of what it leads to (``dir`` for a link to a directory, which
    the walk still does not enter); a link whose target is a file, is missing (dangling) or cannot
    be resolved (a loop, more than 40 hops) is ``file``: of the two pinned types, the one that is not
    a directory to search below (reading it gives that link's ENOENT or ELOOP; delete removes the
    link alone)."""
    path = st.canon(directory)
    _check_paging(path, offset, limit)
    ino, kind, _ = resolve_read(st, path)
    if kind != DIR:
        raise fs_error(errno.ENOTDIR, path)
    if limit == 0:
        return iter(())
    if pattern and pattern.startswith("./"):
        pattern = pattern[2:]  # "./x" means x relative to the directory
    excludes = _as_list(exclude)
    _check_count(path, excludes, 1 if pattern else 0)
    glob = _compiled(path, Glob, pattern) if pattern else None
    depth = None if glob is None else _max_depth([glob])
    entries = walk(st, ino, path, _compiled(path, GlobSet, excludes), depth)

    def found() -> Iterator[FindEntry | None]:
        skip, count = offset, 0
        for entry in entries:
            if entry is None:
                yield None
                continue
            cpath, rel, kind, _ = entry
            if glob is not None and not glob.match(rel):
                yield None  # an entry looked at is a step, returned or not
                continue
            if skip:
                skip -= 1
                yield None
                continue
            if kind == SYMLINK:
                kind = DIR if kind_of(st, cpath) == DIR else FILE
            yield FindEntry(path=cpath, type="dir" if kind == DIR else "file")
            count += 1
            if limit is not None and count >= limit:
                return

    return found()


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
) -> Iterator[GrepMatch | None]:
    """Matching lines of a file, or of the files below a directory (SPEC 4), with ticks (see the
    module docstring); the arguments are checked before this returns."""
    path = st.canon(where)
    _check_paging(path, offset, limit)
    if not 0 <= context <= 10:
        raise fs_error(errno.EINVAL, path, "context must be between 0 and 10")
    ino, kind, _ = resolve_read(st, path)
    matcher = LineMatcher(pattern, regex=regex, ignore_case=ignore_case, path=path)
    if limit == 0:
        return iter(())
    skip = [offset]  # spent by the scan itself: a match before the page is never built (``_grep``)
    if kind != DIR:
        return _paged(grep_file(path, iter_file(st, ino), matcher, context, skip), limit)
    included, excluded = ([] if include is None else _as_list(include)), _as_list(exclude)
    _check_count(path, excluded, len(included))
    includes = _compiled(path, GlobSet, included)
    excludes = _compiled(path, GlobSet, excluded)
    depth = _max_depth(includes.globs) if includes else None

    def matches() -> Iterator[GrepMatch | None]:
        for entry in walk(st, ino, path, excludes, depth):
            if entry is None:
                yield None
                continue
            cpath, rel, k, child = entry
            if k != FILE or (includes and not includes.match(rel)):
                yield None
                continue
            yield from grep_file(cpath, iter_file(st, child), matcher, context, skip)

    return _paged(matches(), limit)


def _paged(found: Iterator[_T | None], limit: int | None) -> Iterator[_T | None]:
    """``found``'s results (the offset already spent by the scan, each match skipped a tick: skipping
    3 million matches is work like any other), at most ``limit`` of them; ticks pass through."""
    count = 0
    for item in found:
        if item is None:
            yield None
            continue
        yield item
        count += 1
        if limit is not None and count >= limit:
            return


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
