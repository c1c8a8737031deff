"""Chunk-level sync: a file as its list of chunk hashes, chunks by hash, files assembled from pieces.

The chunking rule (``_chunks``): content is cut at fixed offsets into 512 KiB chunks (``CHUNK_SIZE``),
every chunk but the last full, each addressed by the SHA-256 of its bytes and stored once. Offsets are
fixed, not content-defined: a change of a few bytes in place (a database page) changes one chunk's
hash and no other; an insertion shifts every later chunk (content-defined cutting would survive that,
but a byte range would then no longer map to chunk indexes by arithmetic).

So a mirror moves a large file's change as: ``file_chunks`` on both sides, compare hashes, send
only the differing chunks' bytes; the receiver assembles the file from pieces that are either
existing chunks (a :class:`ChunkRef` or its hex hash) or new bytes (:class:`Assembler`), holding at
most one partial chunk plus one chunk being read. ``missing_chunks`` tells a sender which hashes the
store lacks; ``read_chunks`` serves chunks by hash.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from typing import Any

from ._chunks import CHUNK_SIZE, Buffer, ChunkCutter
from ._resolve import resolve_read
from ._schema import DIR
from ._state import Store
from .errors import fs_error
from .types import ChunkRef

__all__ = ["Assembler", "Piece", "file_chunks", "missing_chunks", "read_chunks"]

_BATCH = 500  # hashes per statement

# A piece of content to assemble: new bytes, or an existing chunk named by a ChunkRef or hex hash.
Piece = bytes | bytearray | memoryview | ChunkRef | str


def file_chunks(st: Store, path: str) -> list[ChunkRef]:
    """The chunks of the file at ``path`` (following symlinks), in order; ``[]`` for an empty file."""
    p = st.canon(path)
    ino, kind, _ = resolve_read(st, p)
    if kind == DIR:
        raise fs_error(errno.EISDIR, p)
    rows = st.db.execute(
        "SELECT c.hash, c.size FROM inodes i JOIN chunks c ON c.id = i.chunk WHERE i.id = ?", (ino,)
    ).fetchall()
    if not rows:
        rows = st.db.execute(
            "SELECT c.hash, c.size FROM file_chunks f JOIN chunks c ON c.id = f.chunk "
            "WHERE f.inode = ? ORDER BY f.idx",
            (ino,),
        ).fetchall()
    return [ChunkRef(bytes(h).hex(), int(size)) for h, size in rows]


def _hashes(hashes: Iterable[ChunkRef | str]) -> list[bytes]:
    out: list[bytes] = []
    for h in hashes:
        text = h.hash if isinstance(h, ChunkRef) else h
        try:
            out.append(bytes.fromhex(text))
        except (TypeError, ValueError):
            raise fs_error(errno.EINVAL, None, f"not a chunk hash: {text!r}") from None
    return out


def _rows(st: Store, select: str, digests: list[bytes]) -> list[tuple[Any, ...]]:
    """``select`` (ending in FROM or WHERE …) restricted to the chunks of ``digests``, 500 at a time."""
    glue = " AND" if " WHERE " in select else " WHERE"
    out: list[tuple[Any, ...]] = []
    for i in range(0, len(digests), _BATCH):
        part = digests[i : i + _BATCH]
        sql = f"{select}{glue} hash IN ({', '.join('?' * len(part))})"
        out.extend(st.db.execute(sql, part).fetchall())
    return out


def read_chunks(st: Store, hashes: Iterable[ChunkRef | str]) -> dict[str, bytes]:
    """The bytes of each chunk named (hex hashes or :class:`ChunkRef`); chunks the store does not hold
    are left out. Ask for a few at a time: every chunk asked for is in the result at once."""
    st.canon("/")  # the closed-store check and a refresh
    out: dict[str, bytes] = {}
    with st.db.snapshot():
        for cid, digest in _rows(st, "SELECT id, hash FROM chunks", _hashes(hashes)):
            out[bytes(digest).hex()] = st.chunks.read(int(cid))
    return out


def missing_chunks(st: Store, hashes: Iterable[ChunkRef | str]) -> list[str]:
    """Which of the chunks named the store does not hold (in the order given, without repeats):
    the ones a sender must send as bytes."""
    st.canon("/")
    wanted = _hashes(hashes)
    held = {bytes(r[0]) for r in _rows(st, "SELECT hash FROM chunks WHERE refs > 0", wanted)}
    seen: set[bytes] = set()
    out: list[str] = []
    for h in wanted:
        if h not in held and h not in seen:
            seen.add(h)
            out.append(h.hex())
    return out


class Assembler:
    """Cuts a file's content from pieces into chunk ids, in bounded memory.

    New bytes are re-cut into 512 KiB chunks as they come. An existing chunk that starts on a chunk
    boundary is used as it is (no byte read or written) when it is full, or when it turns out to be
    the file's last piece; elsewhere its bytes are read and re-cut like new ones. ``staged`` (for a
    write whose pieces arrive across awaits): new chunks are stored unreferenced in small transactions
    of their own and every chunk used is pinned until :meth:`release`; the caller references them all
    in its final transaction (``chunks.incref(ids)``). The quota is checked as content grows past
    ``old_size`` (the replaced file's size; None: not here). Otherwise everything happens in the caller's
    transaction and each id returned already carries its reference.
    """

    def __init__(self, st: Store, path: str, old_size: int | None, *, staged: bool) -> None:
        self._st = st
        self._path = path
        self._old = old_size
        self._staged = staged
        self._cutter = ChunkCutter()
        self._held: tuple[int, int] | None = None  # an aligned short chunk: last piece, or re-cut
        self.ids: list[int] = []
        self._pinned: list[int] = []
        self._reused: list[int] = []  # existing chunks used, referenced together in finish()
        self._known: dict[bytes, tuple[int, int]] = {}

    def prefetch(self, pieces: Iterable[object]) -> None:
        """Look up every chunk named among ``pieces`` in a few statements (instead of one each)."""
        digests = _hashes(p for p in pieces if isinstance(p, (ChunkRef, str)))
        for cid, digest, size in _rows(self._st, "SELECT id, hash, size FROM chunks", digests):
            self._known[bytes(digest)] = (int(cid), int(size))

    @property
    def total(self) -> int:
        return self._cutter.total + (self._held[1] if self._held else 0)

    def feed_bytes(self, data: bytes) -> None:
        self._unhold()
        for chunk in self._cutter.feed(data):
            self._quota()
            self.ids.append(self._store(chunk))

    def feed_ref(self, ref: ChunkRef | str) -> None:
        self._unhold()
        cid, size = self._find(ref)
        if not self._cutter.aligned:
            self.feed_bytes(self._st.chunks.read(cid))
        elif size == CHUNK_SIZE:
            self._cutter.skip(size)
            self._quota()
            self._use(cid)
        elif size:
            self._held = (cid, size)

    def feed(self, piece: Piece) -> None:
        if isinstance(piece, (ChunkRef, str)):
            self.feed_ref(piece)
        elif isinstance(piece, (bytes, bytearray, memoryview)):
            self.feed_bytes(bytes(piece))
        else:
            raise fs_error(
                errno.EINVAL,
                self._path,
                f"pieces are bytes, ChunkRef or hex hashes, not {type(piece).__name__}",
            )

    def finish(self) -> list[int]:
        """The chunk ids of the whole content, in order (``total`` is its size)."""
        if self._held is not None:
            cid, size = self._held
            self._held = None
            self._cutter.skip(size)
            self._quota()
            self._use(cid)
        else:
            last = self._cutter.finish()
            if last is not None:
                self._quota()
                self.ids.append(self._store(last))
        if self._reused:
            self._st.chunks.incref(self._reused)
            self._reused = []
        return self.ids

    def release(self) -> None:
        """Staged: drop the pins and delete staged chunks nobody took (after the final transaction)."""
        st = self._st
        if not self._staged:
            return
        st.chunks.unpin(self._pinned)
        if not st.closed:
            with st.db.transaction():
                st.chunks.sweep(self._pinned)
        self._pinned = []

    def _unhold(self) -> None:
        # A chunk re-cut here is read before finish() references it: still in this transaction (or
        # pinned, staged), so nothing can delete it meanwhile.
        if self._held is not None:  # more follows: the short chunk is re-cut with it
            cid, _ = self._held
            self._held = None
            self.feed_bytes(self._st.chunks.read(cid))

    def _find(self, ref: ChunkRef | str) -> tuple[int, int]:
        (digest,) = _hashes([ref])
        row = self._known.get(digest) or self._st.db.one(
            "SELECT id, size FROM chunks WHERE hash = ?", (digest,)
        )
        if row is None:
            raise fs_error(errno.EINVAL, self._path, f"unknown chunk {digest.hex()} (send its bytes)")
        if isinstance(ref, ChunkRef) and ref.size != int(row[1]):
            raise fs_error(
                errno.EINVAL, self._path, f"chunk {digest.hex()} has {row[1]} bytes, not {ref.size}"
            )
        return int(row[0]), int(row[1])

    def _quota(self) -> None:
        if self._old is not None:  # None: the caller checks the quota once, at the end
            self._st.check_quota(self._path, self._cutter.total - self._old)

    def _store(self, chunk: Buffer) -> int:
        st = self._st
        if not self._staged:
            return st.chunks.put(chunk)
        with st.db.transaction():
            cid = st.chunks.put(chunk, refs=0)
        st.chunks.pin((cid,))
        self._pinned.append(cid)
        return cid

    def _use(self, cid: int) -> None:
        if self._staged:
            self._st.chunks.pin((cid,))
            self._pinned.append(cid)
        else:
            self._reused.append(cid)
        self.ids.append(cid)
