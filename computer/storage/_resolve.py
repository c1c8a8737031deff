"""Path resolution: from a canonical path to ``(inode, kind, real path)``, following symlinks.

Every function takes the shared :class:`~._state.Store`. Resolutions are cached by real path (no
symlink before the last segment), so replacing a link only invalidates its own key; removing or moving
a directory clears the cache (``Store.forget``).
"""

from __future__ import annotations

import errno
import unicodedata
from collections.abc import Sequence

from ._schema import DIR, ROOT_INODE, SYMLINK
from ._state import Node, Store
from .errors import fs_error, spelled_otherwise
from .paths import join, parts, split

__all__ = [
    "MAX_SYMLINK_HOPS",
    "as_asked",
    "kind_of",
    "link_path",
    "lookup",
    "missing",
    "resolve",
    "resolve_parent",
    "resolve_read",
    "target",
    "write_target",
]

MAX_SYMLINK_HOPS = 40


def lookup(st: Store, parent: int, name: str) -> Node | None:
    row = st.db.one(
        "SELECT d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child WHERE d.parent = ? AND d.name = ?",
        (parent, name),
    )
    return None if row is None else (int(row[0]), int(row[1]))


def target(st: Store, ino: int) -> str:
    return str(st.db.one("SELECT target FROM inodes WHERE id = ?", (ino,))[0])


def resolve(st: Store, path: str, *, follow: bool = True) -> tuple[int, int, str]:
    """``(inode, kind, real path)`` of canonical ``path``, following symlinks on the way.

    The last segment is followed only when ``follow``. Raises ENOENT (missing), ENOTDIR (a parent
    segment is not a directory) or ELOOP (more than 40 links), naming ``path`` (:func:`as_asked`).
    Cached entries are keyed by real paths (no symlink before the last segment), so replacing a link
    only invalidates its own key.
    """
    try:
        return _resolve(st, path, follow)
    except OSError as exc:
        raise as_asked(exc, path) from None


def as_asked(exc: OSError, asked: str) -> OSError:
    """``exc`` naming ``asked``, the path the caller gave, when it names where a symlink led instead.

    The walk goes on from a link's target, so its errors name that target: reading a dangling
    ``/w/link`` said ``No such file or directory: /w/nowhere/target.txt``, a path the caller never
    gave (an agent then looked for that file). As ``open()`` does, the error names the path asked
    for; its message says where the link led.
    """
    if exc.filename is None or exc.filename == asked:
        return exc
    return fs_error(
        exc.errno or errno.EIO, asked, f"{exc.strerror} (a symbolic link on the way leads to {exc.filename})"
    )


def _resolve(st: Store, path: str, follow: bool) -> tuple[int, int, str]:
    cache = st.cache
    hops = 0
    while True:
        hit = cache.get(path)
        if hit is not None and (hit[1] != SYMLINK or not follow):
            return hit[0], hit[1], path
        segs = parts(path)
        ino, kind, cur, i = ROOT_INODE, DIR, "/", 0
        if hit is None and len(segs) > 1:
            parent, _ = split(path)
            phit = cache.get(parent)
            if phit is not None and phit[1] == DIR:
                ino, kind, cur, i = phit[0], DIR, parent, len(segs) - 1
        restarted = False
        while i < len(segs):
            if kind != DIR:
                raise fs_error(errno.ENOTDIR, path, "a parent segment is not a directory")
            name = segs[i]
            nxt = join(cur, name)
            node = cache.get(nxt)
            if node is None:
                node = lookup(st, ino, name)
                if node is None:
                    raise missing(st, ino, cur, name, path)
                st.remember(nxt, node)
            ino, kind = node
            cur = nxt
            i += 1
            if kind == SYMLINK and (i < len(segs) or follow):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise fs_error(errno.ELOOP, path, "too many levels of symbolic links")
                path = link_path(cur, target(st, ino), segs[i:])
                restarted = True
                break
        if not restarted:
            return ino, kind, cur


def missing(st: Store, parent: int, parent_path: str, name: str, path: str) -> OSError:
    """ENOENT for ``path``, whose segment ``name`` is not in directory ``parent`` (at ``parent_path``).

    Names are compared as bytes (SPEC section 1), so ``café`` typed in NFD (``e`` + U+0301, as macOS
    and some keyboards send it) misses the NFC ``café`` a program wrote, and a bare "No such file"
    for a name that looks exactly like the one listed sent agents round in circles. Only here, on the
    error's path, and only for a name that is not ASCII (ASCII is the same in every normal form), the
    directory is asked for the name's other normal forms: the message names the one that exists.
    """
    if not name.isascii():
        for form in ("NFC", "NFD"):
            other = unicodedata.normalize(form, name)
            if other != name and lookup(st, parent, other) is not None:
                hint = spelled_otherwise(join(parent_path, other), form, other, name)
                return fs_error(errno.ENOENT, path, f"No such file or directory; {hint}")
    return fs_error(errno.ENOENT, path)


def resolve_read(st: Store, path: str, *, follow: bool = True) -> tuple[int, int, str]:
    """Like :func:`resolve`, but a file in a parent position is ENOENT (SPEC: stat/read)."""
    try:
        return resolve(st, path, follow=follow)
    except NotADirectoryError:
        raise fs_error(errno.ENOENT, path) from None


def resolve_parent(st: Store, path: str) -> tuple[int, str, str]:
    """``(parent inode, name, real parent path)`` for creating ``path``: ENOENT / ENOTDIR otherwise."""
    parent, name = split(path)
    ino, kind, real = resolve(st, parent)
    if kind != DIR:
        raise fs_error(errno.ENOTDIR, path, "parent is not a directory")
    return ino, name, real


def write_target(st: Store, path: str) -> tuple[int, str, str, Node | None]:
    """Where writing ``path`` lands: ``(parent inode, name, real path, existing node)``.

    A symlink at the target is followed (like ``open(O_TRUNC)``); a dangling one creates its target.
    An error met past such a link names ``path`` (:func:`as_asked`); one before it names what it did
    (a missing parent names the parent).
    """
    asked, hops = path, 0
    while True:
        try:
            pino, name, real_parent = resolve_parent(st, path)
        except OSError as exc:
            raise (exc if hops == 0 else as_asked(exc, asked)) from None
        real = join(real_parent, name)
        node = st.cache.get(real) or lookup(st, pino, name)
        if node is None or node[1] != SYMLINK:
            return pino, name, real, node
        hops += 1
        if hops > MAX_SYMLINK_HOPS:
            raise fs_error(errno.ELOOP, asked, "too many levels of symbolic links")
        path = link_path(real, target(st, node[0]), ())


def kind_of(st: Store, path: str) -> int | None:
    """The kind a path resolves to (following links), or None."""
    try:
        return resolve(st, path)[1]
    except OSError:
        return None


def link_path(link_path: str, target: str, rest: Sequence[str]) -> str:
    """Where a symlink at ``link_path`` points, with ``rest`` appended (``..`` clamps at ``/``)."""
    base = [] if target.startswith("/") else parts(split(link_path)[0])
    out = list(base)
    for seg in [*target.split("/"), *rest]:
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    return "/" + "/".join(out)
