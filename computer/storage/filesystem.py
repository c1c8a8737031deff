"""``FileSystem``: the async filesystem of one workspace over one SQLite file (SPEC sections 3 and 4).

Execution model: every SQLite statement runs inline on the calling thread (the event loop). The owner
is single-threaded and each operation is a handful of indexed statements, so a thread pool would cost
more than it saves. The two searches are the exception in length: ``find`` and ``grep`` run in
slices (:data:`SLICE_STEPS` steps or :data:`SLICE_SECONDS`, whichever comes first) and give the loop
away between them, so other calls of the workspace go on while a large one runs (``_search``). No transaction ever spans an ``await``: a streamed write stages its chunks in small
transactions (pinned, unreferenced) and links them in one final transaction, so other operations
interleave freely and a crash never leaves a half-written file visible.

Durability: the file is in WAL mode with ``synchronous=NORMAL``: every committed transaction survives a
process kill; an OS crash or power loss may lose the last commits but never corrupts the file.

Rooms: this class is the public surface and the lifecycle (open, close, garbage collection); the work
is done by functions over one shared :class:`~._state.Store`, by concern: ``_resolve`` (paths to
nodes), ``_reads`` (metadata reads), ``_content`` (file bytes), ``_tree`` (nodes and names),
``_batch`` (the exec mirror's sync bracket), ``_search`` (walks, find, grep), ``_garbage`` (when
freed chunks are deleted); ``_state`` holds the store and the transaction of one mutating call.
Imports go one way, towards ``_state``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Literal, TypeVar, overload

from . import _batch, _content, _pieces, _reads, _search, _tree
from ._audit import AuditLog
from ._db import Database, stored_epoch
from ._garbage import GARBAGE_DELAY, GarbageTimer, flush_garbage, hold
from ._lineage import Lineage, open_lineage, read_lineage
from ._pieces import Piece
from ._schema import check_mode
from ._state import Store
from .locks import LockTable
from .paths import resolve_links
from .types import (
    BatchResult,
    ChangeSet,
    ChunkRef,
    DirEntry,
    FileStat,
    FindEntry,
    GrepMatch,
    ManifestEntry,
    ManifestRow,
)

__all__ = ["GARBAGE_DELAY", "SLICE_SECONDS", "SLICE_STEPS", "FileSystem"]

_T = TypeVar("_T")

SLICE_STEPS = 1024
"""A search gives the event loop away after this many steps (a directory page read, a file chunk
scanned, a match found or skipped) ..."""
SLICE_SECONDS = 0.02
"""... or once it has run this long since it last did, whichever comes first."""


async def _sliced(steps: Iterator[_T | None]) -> list[_T]:
    """The results of a search (``_search``: results and ``None`` ticks), yielding the event loop
    between slices of its work."""
    out: list[_T] = []
    count, since = 0, time.monotonic()
    for item in steps:
        if item is not None:
            out.append(item)
        count += 1
        if count >= SLICE_STEPS or time.monotonic() - since >= SLICE_SECONDS:
            await asyncio.sleep(0)
            count, since = 0, time.monotonic()
    return out


class FileSystem:
    """The filesystem of one workspace (see the module docstring for the execution model).

    ``id`` is a stable uuid kept in the file (random for an in-memory store); ``rev`` the current
    revision; ``locks`` the owner's :class:`LockTable`; ``chunks`` the chunk table.
    """

    def __init__(
        self,
        db: Database,
        *,
        max_bytes: int | None,
        fence: int | None,
        garbage_timer: bool = True,
        on_garbage: Callable[[], bool] | None = None,
    ) -> None:
        self._timer = GarbageTimer()
        later = self._timer.later if garbage_timer else on_garbage or hold
        self._store = st = Store(db, max_bytes=max_bytes, fence=fence, later=later)
        self.chunks = st.chunks
        self.locks = LockTable()
        # The audit log shares the file and the fence (a fenced-out owner records nothing).
        self.audit = AuditLog(db, writable=not db.readonly, is_owner=st.is_current_owner)
        self.readonly = db.readonly
        row = db.one("SELECT value FROM meta WHERE key = 'id'")
        if db.readonly:  # a reader beside the owner: nothing to name, fence or collect
            self.id: str = "" if row is None else str(row[0])
            self._lineage: Lineage = read_lineage(db, self.id)
            st.reload()
            db.changed_elsewhere()
            return
        if row is None:  # a new file; another opener may be naming it at the same moment: one wins
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('id', ?)", (uuid.uuid4().hex,))
            row = db.one("SELECT value FROM meta WHERE key = 'id'")
        self.id = str(row[0])
        self._timer.bind(st, self.id)
        with db.transaction():
            if fence is not None:
                db.execute("UPDATE state SET epoch = max(epoch, ?) WHERE id = 1", (fence,))
            st.chunks.collect_orphans()
            st.reload()  # the revision this session starts at
            self._lineage = open_lineage(db, self.id, db.path, st.rev)
        st.reload()
        db.changed_elsewhere()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        path: str | None,
        *,
        max_bytes: int | None = None,
        fence: int | None = None,
        garbage_timer: bool = True,
        on_garbage: Callable[[], bool] | None = None,
        readonly: bool = False,
    ) -> FileSystem:
        """Open (creating when missing) the store at ``path``; ``None`` is a private in-memory store.

        ``max_bytes`` caps the logical bytes of all files (ENOSPC beyond). ``fence`` is this owner's
        epoch: the stored epoch becomes ``max(stored, fence)`` and every later write checks it is still
        ours (EROFS once a newer owner raised it). ``garbage_timer=False``: the store never touches an
        event loop; freed small chunks wait for :meth:`collect_garbage` (called by the owner when
        :attr:`garbage_pending`), or for a mutation past 16,384 of them, ``stats()`` or ``close()``.
        ``on_garbage()`` then tells the owner, inside the mutation, that a batch is ready: True when the
        owner collects it soon (``Workspace``: ``GARBAGE_DELAY`` later), False to free it in the mutation.
        ``readonly=True`` reads an existing file beside its owner (the dashboard, ``computer log``):
        nothing is created, migrated or written (a write fails with EIO), the audit log only reads.
        """
        db = Database(path, readonly=readonly)
        return cls(db, max_bytes=max_bytes, fence=fence, garbage_timer=garbage_timer, on_garbage=on_garbage)

    @staticmethod
    def stored_epoch(path: str) -> int:
        """The highest owner epoch the store at ``path`` has seen (0 when it does not exist yet)."""
        return stored_epoch(path)

    def close(self) -> None:
        """Free batched garbage and close the SQLite connection. Idempotent."""
        self._timer.cancel()
        st = self._store
        if not st.closed:
            self.audit.close()
            try:
                flush_garbage(st)
            except sqlite3.Error:
                pass  # the next open collects it
            finally:
                st.closed = True
                st.db.close()

    @property
    def fenced(self) -> bool:
        """True once a newer owner raised the stored epoch above this store's fence (every write is
        refused with EROFS from then on); False without a fence, or on a closed store."""
        st = self._store
        return not st.closed and not st.is_current_owner()

    @property
    def garbage_pending(self) -> bool:
        """True when freed small chunks wait to be deleted (see :meth:`collect_garbage`)."""
        return bool(self._store.chunks.pending)

    def collect_garbage(self) -> None:
        """Delete the freed small chunks held for batching now, in a transaction of their own.

        With the default timer the store does this itself 0.1 s after the mutation that filled a batch
        (``GARBAGE_DELAY``); an owner that opened with ``garbage_timer=False`` calls it instead (e.g.
        off its own loop after a burst of mutations, whenever :attr:`garbage_pending`). A no-op when
        nothing waits, on a closed store, or inside a transaction.
        """
        if not self._store.closed:
            flush_garbage(self._store)

    @property
    def rev(self) -> int:
        """The current revision (bumped once per mutating call)."""
        self._store.refresh()
        return self._store.rev

    @property
    def instance(self) -> str:
        """What exec backends key this store by: its id and a token that tells it from copies of its
        file (``_lineage``); stable across reopens of one file."""
        return self._lineage.instance

    @property
    def session(self) -> str:
        """This open's token: a mirror's push records it (see :meth:`continues`)."""
        return self._lineage.session

    def continues(self, session: str | None, rev: int) -> bool:
        """Whether a mirror at revision ``rev`` of session ``session`` reflects this store's history
        (else it is pushed in full: the store was restored from an earlier copy, or is another)."""
        return self._lineage.continues(session, rev, self.rev)

    @property
    def queries(self) -> int:
        """SQL statements executed so far."""
        return self._store.db.queries

    @property
    def max_bytes(self) -> int | None:
        """The cap on the logical bytes of all files (None: no cap)."""
        return self._store.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int | None) -> None:
        self._store.max_bytes = value

    @property
    def change_log_limit(self) -> int:
        """About how many change-log entries are kept (older ones are trimmed, whole revisions)."""
        return self._store.change_log_limit

    @change_log_limit.setter
    def change_log_limit(self, value: int) -> None:
        self._store.change_log_limit = value

    def hold_log(self, rev: int, seconds: float) -> None:
        """Keep the change log after ``rev`` for ``seconds`` past ``change_log_limit`` (0: let it go).

        A sync's pull cut into pages checks each page against the revision its run started from; its
        own pages' entries filled the log, and a trim past that revision between pages made every
        later page look conflicting: a ``mv`` of 60,000 files lost 17,000 of them in the workspace
        and in the sandbox. The pull holds its revision while its pages go."""
        self._store.hold_log(rev, seconds)

    # ------------------------------------------------------------------ reads

    async def read_file(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of a file, or of ``[offset, offset + length)`` of it (clipped at the end)."""
        return _content.read_file(self._store, path, offset=offset, length=length)

    def read_small_files(self, inodes: Iterable[int]) -> dict[int, bytes]:
        """Content by inode (``manifest(inodes=True)``) of the regular files among ``inodes`` held in
        one chunk (under 512 KiB), read in bulk; the others are left out (read them by path)."""
        self._store.refresh()
        return _content.read_small_files(self._store, inodes)

    async def read_text(self, path: str) -> str:
        """The file decoded as UTF-8 (strict: invalid bytes raise ``UnicodeDecodeError``)."""
        return (await self.read_file(path)).decode("utf-8")

    def stream(self, path: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        """Yield the file's bytes one chunk at a time, from the version that existed at this call.

        Only chunks overlapping the range are read. Errors surface at the first iteration.
        """
        return _content.stream(self._store, path, offset=offset, length=length)

    async def stat(self, path: str) -> FileStat:
        """Metadata of ``path``, following symlinks; ``name`` is the last segment (``""`` for ``/``).
        ``ino`` and ``nlink`` identify the node and count its names (hard links)."""
        return _reads.stat(self._store, path)

    async def exists(self, path: str) -> bool:
        """True when ``path`` resolves (a dangling symlink does not)."""
        return _reads.exists(self._store, path)

    async def readlink(self, path: str) -> str:
        """The target of the symlink at ``path``, exactly as stored (EINVAL when it is not a symlink)."""
        return _reads.readlink(self._store, path)

    async def realpath(self, path: str, *, follow: bool = True) -> str:
        """``path`` with every symlink on the way resolved (the last segment only when ``follow``), like
        ``os.path.realpath(strict=False)``: below a missing segment, a file in a parent position or a
        link loop, the rest is kept as spelled. Never raises an fs error. One call: through a client,
        one owner round trip where a ``readlink`` per segment took one each."""
        return await resolve_links(self.readlink, path, follow=follow)

    async def readdir(self, path: str, *, limit: int | None = None, offset: int = 0) -> list[DirEntry]:
        """Children of a directory in byte order of their names, paged by ``offset``/``limit``."""
        return _reads.readdir(self._store, path, limit=limit, offset=offset)

    async def ls(self, prefix: str) -> list[str]:
        """Every regular file at or under ``prefix`` (segment-aware), in walk order; ``[]`` when missing."""
        return _reads.ls(self._store, prefix)

    async def find(
        self,
        directory: str,
        pattern: str | None = None,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[FindEntry]:
        """Files and directories below ``directory`` whose relative path matches the glob (see SPEC 4)."""
        return await _sliced(
            _search.find(self._store, directory, pattern, exclude=exclude, limit=limit, offset=offset)
        )

    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        regex: bool = False,
        ignore_case: bool = False,
        context: int = 0,
        include: str | Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[GrepMatch]:
        """Matching lines of a file, or of the files below a directory (see SPEC 4 and ``_search``)."""
        found = _search.grep(
            self._store,
            pattern,
            path,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            include=include,
            exclude=exclude,
            limit=limit,
            offset=offset,
        )
        return await _sliced(found)

    # ------------------------------------------------------------------ writes

    async def write_file(
        self,
        path: str,
        data: bytes | str | AsyncIterable[bytes] | Iterable[bytes],
        *,
        mode: int | None = None,
        mtime: int | None = None,
    ) -> None:
        """Create or replace a file. The parent must exist; an existing file keeps its mode unless given.

        ``data`` may be bytes, str (UTF-8) or a sync/async iterable of byte pieces of any size; an
        iterable is re-cut into chunks as it arrives (memory stays about one chunk) and the file
        appears at once when the last piece is committed. ``mtime`` (milliseconds since the epoch) is
        stored exactly when given; by default the write's time, strictly later than the replaced
        content's. A file of several names (hard links) gets the new content under all of them.
        """
        await _content.write_file(self._store, path, data, mode=mode, mtime=mtime)

    async def mkdir(self, path: str, *, recursive: bool = False, mode: int = 0o755) -> None:
        """Create a directory; ``recursive`` creates missing parents and accepts an existing directory."""
        check_mode(path, mode)
        _tree.mkdir(self._store, path, recursive=recursive, mode=mode)

    async def rm(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        """Remove a file, symlink (the link only) or directory (``recursive`` when not empty).
        A file of several names (hard links) stays under its other names."""
        _tree.rm(self._store, path, recursive=recursive, force=force)

    async def symlink(self, target: str, path: str) -> None:
        """Create a symlink at ``path`` pointing to ``target``: any non-empty string without NUL, stored
        verbatim (absolute, relative, dangling; never resolved on the machine)."""
        _tree.symlink(self._store, target, path)

    async def link(self, existing: str, new: str) -> None:
        """Give the file (or symlink) at ``existing`` a second name ``new``: a hard link (see ``_tree.link``).

        Both names share content, mode and mtime; removing one keeps the other; ``copy`` makes an
        independent file; ``rename`` keeps the link. A directory is EPERM, an existing ``new`` EEXIST.
        """
        _tree.link(self._store, existing, new)

    async def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Move ``src`` to ``dst`` in O(1) (one directory entry changes, whatever the subtree size)."""
        _tree.rename(self._store, src, dst, overwrite=overwrite)

    async def copy(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Copy a file (sharing its chunks: O(metadata)), a symlink, or a directory tree."""
        _tree.copy(self._store, src, dst, overwrite=overwrite)

    # ------------------------------------------------------------------ sync support

    @overload
    def manifest(
        self, root: str, *, inodes: Literal[False] = False, after: str | None = None, limit: int | None = None
    ) -> list[ManifestRow]: ...

    @overload
    def manifest(
        self, root: str, *, inodes: Literal[True], after: str | None = None, limit: int | None = None
    ) -> list[ManifestEntry]: ...

    def manifest(
        self, root: str, *, inodes: bool = False, after: str | None = None, limit: int | None = None
    ) -> list[ManifestRow] | list[ManifestEntry]:
        """Every node below ``root`` in walk order: a :class:`ManifestRow`, or with ``inodes=True`` a
        :class:`ManifestEntry` (adds ``ino``, ``nlink``); ``after``/``limit`` page it (``_batch.manifest``)."""
        return _batch.manifest(self._store, root, inodes=inodes, after=after, limit=limit)

    def changes_since(self, rev: int, root: str = "/", *, skip_revs: Sequence[int] = ()) -> ChangeSet:
        """Changes at or below ``root`` (or of an ancestor of it) after ``rev``, in order, leaving out
        the revisions ``skip_revs``; ``complete`` is False when the log was trimmed past ``rev``."""
        return _batch.changes_since(self._store, rev, root, skip_revs=skip_revs)

    def commit_batch(
        self,
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
        """Apply many changes in one transaction and one revision (the shell backend's pull); see
        ``_batch.commit_batch`` for the order and the conflict rule. A write is bytes or a list of
        pieces as in :meth:`write_chunks`. ``sub_ns``: the nanoseconds past a path's ``mtimes``
        entry (a pull's exact times; ``FileStat.sub_ns``), 0 where it names none. ``in_place``:
        writes through the node, every name, refused when the workspace wrote it meanwhile
        (``_in_place``)."""
        return _batch.commit_batch(
            self._store,
            writes,
            mkdirs=mkdirs,
            modes=modes,
            base_rev=base_rev,
            mtimes=mtimes,
            links=links,
            symlinks=symlinks,
            sub_ns=sub_ns,
            in_place=in_place,
            own_revs=own_revs,
        )

    # ------------------------------------------------------------------ chunk-level sync

    def file_chunks(self, path: str) -> list[ChunkRef]:
        """The chunks of a file (following symlinks), in order: hex SHA-256 and size of each.

        Chunks are cut at fixed 512 KiB offsets (every one but the last full), so a change of a few
        bytes in place changes one entry: compare two lists to find what to send (see ``_pieces``).
        """
        return _pieces.file_chunks(self._store, path)

    def read_chunks(self, hashes: Iterable[ChunkRef | str]) -> dict[str, bytes]:
        """Bytes of the chunks named (hex hash -> bytes); the ones the store lacks are left out."""
        return _pieces.read_chunks(self._store, hashes)

    def missing_chunks(self, hashes: Iterable[ChunkRef | str]) -> list[str]:
        """The hashes among ``hashes`` that the store does not hold: what a sender must send as bytes."""
        return _pieces.missing_chunks(self._store, hashes)

    async def write_chunks(
        self,
        path: str,
        pieces: Iterable[Piece] | AsyncIterable[Piece],
        *,
        mode: int | None = None,
        mtime: int | None = None,
    ) -> None:
        """Create or replace a file from pieces, each new bytes or an existing chunk (a :class:`ChunkRef`
        or its hex hash), in bounded memory (one partial chunk). Existing chunks on 512 KiB boundaries
        are used without reading or writing them. Otherwise as :meth:`write_file`; a chunk the store
        does not hold is EINVAL (ask :meth:`missing_chunks` first)."""
        await _content.write_chunks(self._store, path, pieces, mode=mode, mtime=mtime)

    def stats(self) -> dict[str, int]:
        """Counters: files, dirs, symlinks, chunks, stored_bytes, chunk_bytes, logical_bytes, queries,
        chunk_reads, rev (freed garbage is collected first, so the chunk counts are exact)."""
        return _reads.stats(self._store)

    def __repr__(self) -> str:
        return f"FileSystem(id={self.id!r}, rev={self._store.rev})"
