"""The chunk table: content-addressed, reference-counted blobs, with pins for open readers.

A chunk whose count drops to zero is deleted at once unless a reader pinned it (an open stream, a
streamed write staging its chunks); then it is remembered and deleted by the next :meth:`sweep` after
the last pin goes. Small (inline) chunks are freed in batches; large ones at once. Leftover zero-count
rows from a crash or a batch not yet freed are removed when the store is opened.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from ._chunks import Buffer, chunk_hash, decode_chunk, encode_chunk
from ._db import Database
from ._schema import INLINE_MAX

__all__ = ["LAZY_BATCH", "MAP_MIN", "ChunkStore"]

# Small unreferenced chunks are deleted in batches of this many (or when stats/close ask).
LAZY_BATCH = 256
# Small garbage held for a later flush at most (past it, the next decref frees it in its transaction).
LAZY_MAX = 64 * LAZY_BATCH

# Reference count changes of more chunks than this go in one statement.
_ONE_BY_ONE = 8

# A read of at least this many bytes memory-maps the file while it runs (see ``Database.mapped``).
MAP_MIN = 128 * 1024


class ChunkStore:
    """Chunk rows of one database; all methods run inside the caller's transaction."""

    def __init__(
        self, db: Database, may_delete: Callable[[], bool], later: Callable[[], bool] | None = None
    ) -> None:
        self._db = db
        # ``later()``: take a ready batch of small garbage off the caller's transaction (True when it
        # will call :meth:`flush` itself soon; False: flush now, inside the transaction).
        self._later = later
        # Fencing: deleting a zero-count row is only safe for the current owner (a newer owner may be
        # staging that very chunk).
        self._may_delete = may_delete
        self._pins: Counter[int] = Counter()
        self._deferred: set[int] = set()
        self._lazy: set[int] = set()
        self.reads = 0

    def put(self, data: Buffer, refs: int = 1) -> int:
        """Store ``data`` (or find it), add ``refs`` references, return the chunk id."""
        db = self._db
        digest = chunk_hash(data)
        if len(data) < INLINE_MAX:
            # Small: compress up front and upsert in one statement, bytes inline.
            stored, compressed = encode_chunk(data)
            row = db.one(
                "INSERT INTO chunks (hash, refs, compressed, size, stored, data) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (hash) DO UPDATE SET refs = refs + excluded.refs RETURNING id",
                (digest, refs, int(compressed), len(data), len(stored), stored),
            )
            return int(row[0])
        row = db.one("SELECT id FROM chunks WHERE hash = ?", (digest,))
        if row is not None:
            if refs:
                db.execute("UPDATE chunks SET refs = refs + ? WHERE id = ?", (refs, row[0]))
            return int(row[0])
        stored, compressed = encode_chunk(data)
        inline = len(stored) < INLINE_MAX
        cur = db.execute(
            "INSERT INTO chunks (hash, refs, compressed, size, stored, data) VALUES (?, ?, ?, ?, ?, ?)",
            (digest, refs, int(compressed), len(data), len(stored), stored if inline else None),
        )
        cid = int(cur.lastrowid or 0)
        if not inline:
            db.execute("INSERT INTO chunk_data (id, data) VALUES (?, ?)", (cid, stored))
        return cid

    def incref(self, ids: Sequence[int]) -> None:
        counts = Counter(ids)
        self._db.executemany(
            "UPDATE chunks SET refs = refs + ? WHERE id = ?", [(n, cid) for cid, n in counts.items()]
        )

    def decref(self, ids: Iterable[int]) -> None:
        """Drop one reference per id occurrence; free chunks left with none (unless pinned)."""
        self.decref_counts(Counter(ids).items())

    def decref_counts(self, counts: Iterable[tuple[int, int]]) -> None:
        """Drop ``count`` references of each ``(id, count)``; free chunks left with none (unless
        pinned).

        Many counts go in one statement per distinct count (nearly always one: each chunk once), with
        the ids as a plain JSON array (a pull removing 1,000 files made 1,000 updates: 3 ms; pairs
        through json_extract 1.5 ms; this way 0.9). A freed small chunk joins the lazy batch; only
        the rows at zero are looked at. Counts of an id given twice are added up first (callers count
        already: re-counting 1,000 distinct chunks in a Counter, then converting each returned row,
        cost ~0.9 ms of a 5 ms pull of 1,000 removals; a set of the ids tells in ~0.03).
        """
        db = self._db
        zero: list[tuple[int, int]] = []  # (id, 1 when its data is in a file of its own)
        pairs = counts if isinstance(counts, list) else list(counts)
        if len(pairs) > _ONE_BY_ONE:
            if len({cid for cid, _ in pairs}) < len(pairs):  # an id given twice: add its counts up
                total: dict[int, int] = {}
                for cid, n in pairs:
                    total[cid] = total.get(cid, 0) + n  # one row per chunk: UPDATE … FROM applies one
                pairs = list(total.items())
            by_count: dict[int, list[int]] = {}
            for cid, n in pairs:
                same = by_count.get(n)
                if same is None:
                    by_count[n] = [cid]
                else:
                    same.append(cid)
            for n, ids in by_count.items():
                rows = db.execute(
                    "UPDATE chunks SET refs = refs - ? FROM json_each(?) AS j WHERE chunks.id = j.value "
                    "RETURNING chunks.refs <= 0, chunks.id, chunks.data IS NULL",
                    (n, json.dumps(ids)),
                ).fetchall()
                zero += [(cid, external) for freed, cid, external in rows if freed]
        else:
            for cid, n in pairs:
                row = db.one(
                    "UPDATE chunks SET refs = refs - ? WHERE id = ? RETURNING refs, data IS NULL", (n, cid)
                )
                if row is not None and row[0] <= 0:
                    zero.append((cid, row[1]))
        if not zero:
            return
        pins = self._pins
        if not pins and not any(external for _, external in zero):
            # The common case: small rows, nothing pinned (no call a chunk).
            self._lazy.update([cid for cid, _ in zero])
        else:
            may_delete: bool | None = None
            for cid, external in zero:
                if pins and pins.get(cid, 0) > 0:  # ``get``: a Counter's missing key is a Python call
                    self._deferred.add(cid)
                elif not external:
                    # A small inline row costs little to keep for a while: free them in batches.
                    self._lazy.add(cid)
                else:
                    if may_delete is None:
                        may_delete = self._may_delete()
                    if may_delete:
                        db.execute("DELETE FROM chunk_data WHERE id = ?", (cid,))
                        db.execute("DELETE FROM chunks WHERE id = ?", (cid,))
        if len(self._lazy) >= LAZY_BATCH and (
            len(self._lazy) >= LAZY_MAX or self._later is None or not self._later()
        ):
            self.flush()

    def flush(self) -> None:
        """Free the small unreferenced chunks kept for batching (inside the caller's transaction)."""
        ready = [cid for cid in self._lazy if self._pins.get(cid, 0) <= 0]
        self._lazy.clear()
        if ready and self._may_delete():
            self._db.execute(
                "DELETE FROM chunks WHERE id IN (SELECT value FROM json_each(?)) AND refs <= 0",
                (json.dumps(ready),),
            )

    @property
    def pending(self) -> int:
        """How many freed small chunks wait for a batch delete."""
        return len(self._lazy)

    def pin(self, ids: Iterable[int]) -> None:
        for cid in ids:
            self._pins[cid] += 1

    def unpin(self, ids: Iterable[int]) -> None:
        """Release pins; chunks freed meanwhile become sweepable (the caller runs :meth:`sweep`)."""
        for cid in ids:
            left = self._pins[cid] - 1
            if left <= 0:
                del self._pins[cid]
            else:
                self._pins[cid] = left

    def has_sweepable(self) -> bool:
        return any(self._pins[cid] <= 0 for cid in self._deferred)

    def sweep(self, extra: Iterable[int] = ()) -> None:
        """Delete deferred (and ``extra``) chunks that are unreferenced and no longer pinned."""
        ready = [cid for cid in self._deferred if self._pins.get(cid, 0) <= 0]
        ready.extend(cid for cid in extra if self._pins.get(cid, 0) <= 0)
        self._deferred.difference_update(ready)
        if ready and self._may_delete():
            self._delete_unreferenced([(c,) for c in ready])

    def collect_orphans(self) -> int:
        """Delete every unreferenced, unpinned chunk (crash leftovers). Returns how many went."""
        if not self._may_delete():
            return 0
        rows = self._db.execute("SELECT id FROM chunks WHERE refs <= 0").fetchall()
        doomed = [(r[0],) for r in rows if self._pins.get(r[0], 0) <= 0]
        if doomed:
            self._delete_unreferenced(doomed)
        return len(doomed)

    def _delete_unreferenced(self, ids: list[tuple[int]]) -> None:
        # The data row goes first, while ``refs <= 0`` can still be checked on its chunk row.
        self._db.executemany(
            "DELETE FROM chunk_data WHERE id = ? AND id IN (SELECT id FROM chunks WHERE id = chunk_data.id AND refs <= 0)",
            ids,
        )
        self._db.executemany("DELETE FROM chunks WHERE id = ? AND refs <= 0", ids)

    def read(self, cid: int, lo: int = 0, hi: int | None = None) -> bytes:
        """Bytes ``[lo, hi)`` of one chunk (``hi=None``: to its end)."""
        row = self._db.one("SELECT data, compressed, size FROM chunks WHERE id = ?", (cid,))
        if row is None:
            raise LookupError(cid)
        size = int(row[2])
        end = size if hi is None else min(hi, size)
        if end - lo >= MAP_MIN:
            with self._db.mapped():
                piece = self.piece(cid, row[0], row[1], size, lo, end)
        else:
            piece = self.piece(cid, row[0], row[1], size, lo, end)
        return piece if isinstance(piece, bytes) else bytes(piece)

    def piece(self, cid: int, inline: bytes | None, compressed: int, size: int, lo: int, hi: int) -> Buffer:
        """Bytes ``[lo, hi)`` of chunk ``cid`` whose row holds ``inline``, ``compressed``, ``size``.

        An uncompressed external chunk is read straight from SQLite, only the range; otherwise the whole
        chunk is decoded and a view of the range returned (no copy).
        """
        self.reads += 1
        if inline is None:
            if not compressed:
                return self._db.blob(cid, lo, hi)
            inline = self._db.blob(cid)
        data = decode_chunk(inline, compressed, size)
        return data if lo == 0 and hi == size else memoryview(data)[lo:hi]

    def count_read(self, n: int = 1) -> None:
        self.reads += n
