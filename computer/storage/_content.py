"""File content: reading byte ranges and streams, writing files from bytes or pieces, chunk lists.

Every function takes the shared :class:`~._state.Store`. Content is a list of chunks (``_chunks``):
every chunk but the last is exactly ``CHUNK_SIZE`` bytes, so a byte range maps to chunk indexes by
arithmetic. A file of one chunk keeps it in ``inodes.chunk``; longer ones list theirs in
``file_chunks``.
"""

from __future__ import annotations

import errno
import io
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Set
from functools import partial
from typing import Any

from ._chunks import CHUNK_SIZE, decode_chunk
from ._parent_time import moved_parents
from ._pieces import Assembler, Piece
from ._resolve import resolve_read, write_target
from ._schema import DIR, FILE, check_mode, clean_mode
from ._state import Node, Store, now_ms
from ._stream import ChunkStream
from ._tree import add_entry, new_inode
from .errors import fs_error
from .paths import split

__all__ = [
    "after_unpin",
    "check_write_data",
    "chunks_of",
    "file_chunk_ids",
    "iter_file",
    "read_file",
    "set_content",
    "stream",
    "write_chunks",
    "write_file",
]


def file_chunk_ids(st: Store, ino: int) -> list[int]:
    """The chunk ids of a file of two chunks or more (one chunk lives in ``inodes.chunk``)."""
    return [cid for _, cid in chunks_of(st, ino, None)]


def chunks_of(
    st: Store, ino: int, one: int | None, first: int = 0, last: int | None = None
) -> list[tuple[int, int]]:
    """``(index, chunk id)`` of the file's chunks ``first`` to ``last`` (inclusive; None: to its end), in
    order: ``one``, its ``inodes.chunk`` (a file of one chunk), or its ``file_chunks`` rows. One query
    for every reader of a chunk list (a whole file by inode, a byte range by path)."""
    if one is not None:
        return [(0, int(one))] if first == 0 else []
    rows = st.db.execute(
        "SELECT idx, chunk FROM file_chunks WHERE inode = ? AND idx BETWEEN ? AND ? ORDER BY idx",
        (ino, first, (1 << 62) if last is None else last),
    )
    return [(int(i), int(c)) for i, c in rows]


def set_content(
    st: Store,
    path: str,
    pino: int,
    name: str,
    real: str,
    node: Node | None,
    ids: list[int],
    size: int,
    mode: int | None,
    mtime: int | None = None,
    *,
    detach: bool = False,
    sub_ns: int = 0,
) -> None:
    """Point ``real`` at the chunk list ``ids`` (already referenced), replacing an existing file.

    One chunk goes into the inode row itself; two or more into ``file_chunks``. ``mtime`` (ms) is
    kept exactly when given (a pull keeps the program's); otherwise now, and on an overwrite
    strictly later than the old one. ``detach``: a file of several names (hard links) gets a new
    node for this name instead of new content for all of them (the batch's rule: a pull sends the
    names that still share the file as ``links``). ``sub_ns``: the nanoseconds past ``mtime`` (a
    pull's; ``inodes.sub_ns``), 0 without an ``mtime``: an overwrite never keeps the old remainder.
    """
    if mtime is None:
        sub_ns = 0
    db = st.db
    if node is not None and node[1] == DIR:
        raise fs_error(errno.EISDIR, path)
    one = ids[0] if len(ids) == 1 else None
    old: tuple[int, int, int | None, int, int] | None = None
    if node is not None:  # one read of the replaced node: size, mtime, chunk, names, mode
        old = db.one("SELECT size, mtime, chunk, nlink, mode FROM inodes WHERE id = ?", (node[0],))
    if old is None or (detach and old[3] > 1):
        if node is not None and old is not None:  # leave the other names their file
            db.execute("UPDATE inodes SET nlink = nlink - 1 WHERE id = ?", (node[0],))
            mode = int(old[4]) if mode is None else mode
        ino = new_inode(
            st, FILE, 0o644 if mode is None else mode, size, chunk=one, mtime=mtime, sub_ns=sub_ns
        )
        if node is None:
            add_entry(st, pino, name, ino, real, FILE)
        else:
            db.execute("UPDATE dirents SET child = ? WHERE parent = ? AND name = ?", (ino, pino, name))
            st.remember(real, (ino, FILE))
        old_size = 0
        old_ids: list[int] = []
    else:
        assert node is not None
        ino = node[0]
        old_size, old_mtime, old_one = old[0], old[1], old[2]
        if mtime is None:
            # mtime strictly increases on overwrite, even twice in the same millisecond.
            mtime = max(now_ms(), int(old_mtime) + 1)
        if mode is None:
            db.execute(
                "UPDATE inodes SET size = ?, mtime = ?, sub_ns = ?, chunk = ? WHERE id = ?",
                (size, mtime, sub_ns, one, ino),
            )
        else:
            db.execute(
                "UPDATE inodes SET size = ?, mtime = ?, sub_ns = ?, chunk = ?, mode = ? WHERE id = ?",
                (size, mtime, sub_ns, one, clean_mode(mode), ino),
            )
        if old_one is not None:
            old_ids = [int(old_one)]
        elif old_size > CHUNK_SIZE:
            old_ids = file_chunk_ids(st, ino)
            db.execute("DELETE FROM file_chunks WHERE inode = ?", (ino,))
        else:
            old_ids = []
    st.check_quota(path, size - old_size)
    if len(ids) > 1:
        db.executemany(
            "INSERT INTO file_chunks (inode, idx, chunk) VALUES (?, ?, ?)",
            [(ino, i, cid) for i, cid in enumerate(ids)],
        )
    if old_ids:
        st.chunks.decref(old_ids)
    st.pending_logical += size - old_size


def _open_file(st: Store, path: str) -> tuple[int, int, int | None]:
    """``(inode, size, chunk of a one-chunk file)`` of the regular file at ``path`` (following links)."""
    ino, kind, _ = resolve_read(st, path)
    if kind == DIR:
        raise fs_error(errno.EISDIR, path)
    size, one = st.db.one("SELECT size, chunk FROM inodes WHERE id = ?", (ino,))
    return ino, int(size), one


_IN_BATCH = 500  # inodes per statement


def read_small_files(st: Store, inodes: Iterable[int]) -> dict[int, bytes]:
    """The whole content of each regular file among ``inodes`` held in at most one chunk (every file
    under 512 KiB), in one snapshot and a statement per 500; others (larger, gone, not files) are
    left out for the caller to read one by one. A mirror's push of 100,000 small files paid a path
    resolution and two statements per file (95 us) through ``read_file``."""
    wanted = sorted(set(inodes))
    out: dict[int, bytes] = {}
    with st.db.snapshot():
        for start in range(0, len(wanted), _IN_BATCH):
            batch = wanted[start : start + _IN_BATCH]
            marks = ", ".join("?" * len(batch))
            rows = st.db.execute(
                "SELECT i.id, i.size, coalesce(c.data, d.data), c.compressed, c.size FROM inodes i "
                "LEFT JOIN chunks c ON c.id = i.chunk LEFT JOIN chunk_data d ON d.id = c.id "
                f"WHERE i.id IN ({marks}) AND i.kind = ? AND (i.chunk IS NOT NULL OR i.size = 0)",
                (*batch, FILE),
            ).fetchall()
            for ino, size, stored, compressed, csize in rows:
                if int(size) == 0:
                    out[int(ino)] = b""
                elif stored is not None and int(csize) == int(size):
                    out[int(ino)] = decode_chunk(stored, compressed, csize)
    return out


def read_file(st: Store, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
    """The bytes of a file, or of ``[offset, offset + length)`` of it (clipped at the end)."""
    p = st.canon(path)
    check_range(p, offset, length)
    ino, size, one = _open_file(st, p)
    end = size if length is None else min(size, offset + length)
    if offset >= end:
        return b""
    first, last = offset // CHUNK_SIZE, (end - 1) // CHUNK_SIZE
    if first == last:
        # One chunk (every small file): one statement, the bytes with it.
        if one is not None:
            row = st.db.one(
                "SELECT coalesce(c.data, d.data), c.compressed, c.size FROM chunks c "
                "LEFT JOIN chunk_data d ON d.id = c.id WHERE c.id = ?",
                (one,),
            )
        else:
            row = st.db.one(
                "SELECT coalesce(c.data, d.data), c.compressed, c.size FROM file_chunks fc "
                "JOIN chunks c ON c.id = fc.chunk LEFT JOIN chunk_data d ON d.id = c.id "
                "WHERE fc.inode = ? AND fc.idx = ?",
                (ino, first),
            )
        if row is None:
            return b""
        st.chunks.count_read()
        piece = decode_chunk(row[0], row[1], row[2])
        lo, hi = offset - first * CHUNK_SIZE, end - first * CHUNK_SIZE
        return piece if lo == 0 and hi == len(piece) else piece[lo:hi]
    # Many chunks: each is copied once into one growing buffer whose bytes are the result
    # (``BytesIO.getvalue`` hands its buffer over without a copy), in one read snapshot, with the
    # file memory-mapped meanwhile (see ``Database.mapped``). Collecting the pieces and joining
    # them instead cost twice the memory and a second pass over it.
    out = io.BytesIO()
    with st.db.snapshot(), st.db.mapped():
        rows = st.db.execute(
            "SELECT fc.idx, c.id, c.data, c.compressed, c.size FROM file_chunks fc "
            "JOIN chunks c ON c.id = fc.chunk WHERE fc.inode = ? AND fc.idx BETWEEN ? AND ? "
            "ORDER BY fc.idx",
            (ino, first, last),
        ).fetchall()
        for idx, cid, inline, compressed, csize in rows:
            start = idx * CHUNK_SIZE
            lo, hi = max(offset - start, 0), min(end - start, csize)
            out.write(st.chunks.piece(cid, inline, compressed, csize, lo, hi))
    return out.getvalue()


def iter_file(st: Store, ino: int) -> Iterator[bytes]:
    """The chunks of a file, in order, from the version it had when the first chunk was asked for.

    Its chunk list is read whole and pinned until the iterator ends (or is closed), and no cursor
    stays open between chunks, so a caller may give the event loop away between two chunks (grep
    does): an overwrite or removal meanwhile changes nothing it yields."""
    row = st.db.one("SELECT chunk FROM inodes WHERE id = ?", (ino,))
    if row is None:
        return
    ids = [cid for _, cid in chunks_of(st, ino, row[0])]
    if not ids:
        return
    st.chunks.pin(ids)
    try:
        for cid in ids:
            yield st.chunks.read(cid)
    finally:
        st.chunks.unpin(ids)
        after_unpin(st)


def stream(st: Store, path: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
    """Yield the file's bytes one chunk at a time, from the version that existed at this call.

    Only chunks overlapping the range are read. Errors surface at the first iteration.
    """
    try:
        p = st.canon(path)
        check_range(p, offset, length)
        ino, size, one = _open_file(st, p)
    except OSError as exc:
        return ChunkStream(st.chunks, [], 0, 0, partial(after_unpin, st), exc)
    end = size if length is None else min(size, offset + length)
    chunks = chunks_of(st, ino, one, offset // CHUNK_SIZE, (end - 1) // CHUNK_SIZE) if offset < end else []
    return ChunkStream(st.chunks, chunks, offset, end, partial(after_unpin, st))


def after_unpin(st: Store) -> None:
    if st.closed or st.db.in_transaction or not st.chunks.has_sweepable():
        return
    with st.db.transaction():
        st.chunks.sweep()


def _old_size(st: Store, node: Node | None) -> int:
    return 0 if node is None else int(st.db.one("SELECT size FROM inodes WHERE id = ?", (node[0],))[0])


def _write_pieces(
    st: Store, p: str, pieces: Iterable[Any], mode: int | None, mtime: int | None, *, refs: bool = False
) -> None:
    """Write a file from pieces in one transaction. ``refs``: pieces may name existing chunks
    (``write_chunks``); otherwise every piece is content (``write_file``: str is UTF-8 text)."""
    with st.mutation(p) as m:
        pino, name, real, node = write_target(st, p)
        if node is not None and node[1] == DIR:
            raise fs_error(errno.EISDIR, p)
        parts = Assembler(st, p, _old_size(st, node), staged=False)
        if refs and isinstance(pieces, (list, tuple)):
            parts.prefetch(pieces)
        for piece in pieces:
            if refs:
                parts.feed(piece)
            else:
                parts.feed_bytes(_as_bytes(p, piece))
        ids = parts.finish()
        set_content(st, p, pino, name, real, node, ids, parts.total, mode, mtime)
        m.log(real, "write")
        if node is None:  # a new name: its directory's time moves (an overwrite changes no entry)
            moved_parents(st, m, [(pino, split(real)[0])])


async def _write_async(
    st: Store, p: str, source: AsyncIterable[Any], mode: int | None, mtime: int | None, *, refs: bool = False
) -> None:
    """Write a file from pieces arriving across awaits: chunks staged (pinned), linked in one final
    transaction."""
    # Fail fast on a bad target before consuming the source.
    _, _, _, node = write_target(st, p)
    if node is not None and node[1] == DIR:
        raise fs_error(errno.EISDIR, p)
    parts = Assembler(st, p, _old_size(st, node), staged=True)
    try:
        async for piece in source:
            if refs:
                parts.feed(piece)
            else:
                parts.feed_bytes(_as_bytes(p, piece))
        ids = parts.finish()
        with st.mutation(p) as m:
            pino, name, real, node = write_target(st, p)
            st.chunks.incref(ids)
            set_content(st, p, pino, name, real, node, ids, parts.total, mode, mtime)
            m.log(real, "write")
            if node is None:
                moved_parents(st, m, [(pino, split(real)[0])])
    finally:
        parts.release()


async def write_chunks(
    st: Store,
    path: str,
    pieces: Iterable[Piece] | AsyncIterable[Piece],
    *,
    mode: int | None = None,
    mtime: int | None = None,
) -> None:
    """Create or replace a file from pieces: new bytes, or existing chunks by :class:`ChunkRef` or
    hex hash (see ``_pieces``). Same rules as :func:`write_file`; an unknown chunk is EINVAL."""
    p = st.canon(path, refresh=False)
    if p == "/":
        raise fs_error(errno.EISDIR, p)
    if mode is not None:
        check_mode(p, mode)
    if isinstance(pieces, AsyncIterable):
        st.refresh()
        await _write_async(st, p, pieces, mode, mtime, refs=True)
    else:
        _write_pieces(st, p, pieces, mode, mtime, refs=True)


async def write_file(
    st: Store,
    path: str,
    data: bytes | str | AsyncIterable[bytes] | Iterable[bytes],
    *,
    mode: int | None = None,
    mtime: int | None = None,
) -> None:
    """Create or replace a file. The parent must exist; an existing file keeps its mode unless given.

    ``mtime`` (milliseconds since the epoch) is stored exactly when given; by default the write's
    time, strictly later than the replaced content's.

    ``data`` may be bytes, str (UTF-8) or a sync/async iterable of byte pieces of any size; an
    iterable is re-cut into chunks as it arrives (memory stays about one chunk) and the file
    appears at once when the last piece is committed.
    """
    p = st.canon(path, refresh=False)  # resolved inside the write transaction...
    if p == "/":
        raise fs_error(errno.EISDIR, p)
    if mode is not None:
        check_mode(p, mode)
    check_write_data(path, data)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        _write_pieces(st, p, (bytes(data),), mode, mtime)
    elif isinstance(data, AsyncIterable):
        st.refresh()  # ...except for a streamed write, which checks its target first
        await _write_async(st, p, data, mode, mtime)
    elif isinstance(data, Iterable):
        _write_pieces(st, p, data, mode, mtime)
    else:
        raise TypeError(
            f"write_file({path!r}): data must be bytes, str or an iterable of bytes, not {type(data).__name__}"
        )


def check_write_data(path: str, data: object) -> None:
    """A mapping or a set is iterable, but not a file's pieces: ``write_file(path, {"a": 1})`` wrote
    ``a`` (the keys, joined). TypeError, naming the type and, for a mapping, what to pass instead."""
    if isinstance(data, Mapping | Set):
        hint = " (for JSON, pass json.dumps(data))" if isinstance(data, Mapping) else ""
        raise TypeError(
            f"write_file({path!r}): data must be bytes, str or an iterable of bytes, "
            f"not {type(data).__name__}{hint}"
        )


def _as_bytes(path: str, piece: Any) -> bytes:
    if isinstance(piece, bytes):
        return piece
    if isinstance(piece, (bytearray, memoryview)):
        return bytes(piece)
    if isinstance(piece, str):
        return piece.encode("utf-8")
    raise fs_error(errno.EINVAL, path, f"write_file pieces must be bytes, not {type(piece).__name__}")


def check_range(path: str, offset: int, length: int | None) -> None:
    if offset < 0 or (length is not None and length < 0):
        raise fs_error(errno.EINVAL, path, "offset and length must not be negative")
