"""``LocalExecContext``: the :class:`ExecContext` of an in-process workspace.

This is also the owner-side half of a remote context: a pool worker's context forwards each call to
the owner, which answers it with this class. Sync computations (what a mirror needs, applying a
run's changes) therefore happen next to the SQLite file, one round trip each.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from ..storage import TOUCH
from ..storage.paths import canonical, is_within
from ._backend import (
    BIG_FILE,
    MirrorDir,
    MirrorFile,
    MirrorSymlink,
    PullResult,
    SyncLimits,
    SyncPull,
    SyncPush,
)
from ._codec import to_plain
from ._dir_times import root_fields
from ._journal import JOURNAL_DIR, journal_refused
from ._moves import Move, follow
from ._protected import call_guard, checked_call
from ._pull_commit import SAFE_BITS, KeptChunksGone, PullCommits
from ._pull_rules import (
    CONFLICT,
    PROTECTED,
    PROTECTED_BELOW,
    Conflicts,
    add_ancestors,
    needed_dirs,
    other_names,
    outermost,
    refused_files,
)
from ._push_ops import (
    Op,
    Plan,
    lacking_names,
    op_key,
    op_of,
    ops_below,
    over_limit,
    plan_changes,
    pure,
    sorted_ops,
    walk_key,
    with_names,
)

__all__ = ["FS_OPS", "GUEST_OPS", "LocalExecContext"]

# Seconds a pull in pages keeps the change log after its run's revision (from each page; see
# ``FileSystem.hold_log``): its own pages' entries may fill the log past ``change_log_limit``.
_HOLD_LOG = 600.0

# An incremental push (``_changed``): revision, ops, paths replaced, names linked, renames followed.
_Changed = tuple[int, list[Op], set[str], dict[str, tuple[str, bool]], list[tuple[str, str]]]

# What the python backend's ``workspace`` module offers, in the order its description lists them.
GUEST_OPS = (
    "read_file",
    "read_text",
    "write_file",
    "mkdir",
    "rm",
    "readdir",
    "stat",
    "exists",
    "find",
    "grep",
    "ls",
    "rename",
    "copy",
)
# The fs operations a backend may call through ``fs_call`` (chunk reads serve a mirror's large files).
FS_OPS = frozenset((*GUEST_OPS, "readlink", "symlink", "file_chunks", "read_chunks"))


class LocalExecContext(PullCommits):
    """Answers a backend's workspace calls directly on ``workspace.fs`` (and ``workspace.assets``)."""

    def __init__(self, workspace: Any) -> None:
        self.workspace = workspace
        # The last tree walked for a push: ((rev, root), ops), reused by the pages of one push.
        self._tree_cache: tuple[tuple[int, str], list[Op]] | None = None
        # The last incremental push's computed pages (see ``_changed``).
        self._changed_cache: tuple[tuple[object, ...], _Changed | None] | None = None
        # Directories a program's ``fs_call`` may read, not change (an agent adds its state).
        self.protected: dict[str, Callable[[str], Exception]] = {JOURNAL_DIR: journal_refused}

    @property
    def fs(self) -> Any:
        return self.workspace.fs

    @property
    def workspace_id(self) -> str:
        # Not the id alone: a copy of the store's file has the same id (``FileSystem.instance``).
        return str(getattr(self.fs, "instance", None) or self.workspace.id)

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        op, guard = call_guard(op, self.protected)  # a program's: nothing of /.computer (``_protected``)
        if op not in FS_OPS:
            raise ValueError(f"unknown workspace operation {op!r}")
        # Refused when they change a guarded directory; large writes in pieces.
        return to_plain(await checked_call(self.fs, op, args, guard))

    async def share(self, path: str, expires_after: float) -> str:
        assets = getattr(self.workspace, "assets", None)
        if assets is None:
            raise RuntimeError("this workspace has no assets publisher")
        return str(await assets.share(path, expires_after=expires_after))

    # ------------------------------------------------------------------ push

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        """One page of what a mirror at ``mirror_rev`` (``None``: empty) needs; see :class:`SyncPush`.

        The page's ``rev`` is read before anything of the tree is, so it is a lower bound of what the
        page holds: a later change is sent again next time. Pages of one push are cut between paths in
        walk order (a path's components compared one by one) and carry at most ``max_sync_bytes`` of
        file content; a file larger than that travels with ``data=None`` and is fetched in pieces.
        """
        root = canonical(root)
        if mirror_rev is not None and self.fs.continues(limits.session, mirror_rev):
            changed = await self._changed(mirror_rev, root, limits)
            if changed is not None:
                rev, ops, replaced_here, linked, moves = changed
                page = await self._page(rev, root, False, ops, limits, replaced_here, linked)
                if moves and limits.after is None:
                    page = dataclasses.replace(page, moves=moves)
                return page
        rev = self.fs.rev  # read before the tree: anything newer is sent again next time
        return await self._page(rev, root, True, await self._walked(root), limits)

    async def _changed(self, mirror_rev: int, root: str, limits: SyncLimits) -> _Changed | None:
        """What an incremental push sends: the page's revision, the ops, the paths replaced (not
        written in place), the names linked to files the mirror holds, the renames to follow; None
        when the whole tree must go instead; a hard-linked file it makes anew goes with all its
        names (:func:`lacking_names`). Computed once for all the pages of one push (100,000 changed
        files held the owner's loop 1.6 s a page); the pure parts of a large one run in a worker
        thread (:func:`pure`)."""
        key = (mirror_rev, self.fs.rev, root, tuple(limits.skip_revs), tuple(limits.refetch))
        if self._changed_cache is not None and self._changed_cache[0] == key:
            return self._changed_cache[1]
        changes = self.fs.changes_since(mirror_rev, root, skip_revs=tuple(limits.skip_revs))
        refetch = [p for p in limits.refetch if is_within(p, root)]
        changed: _Changed | None = None
        size = len(changes.changes)
        plan = await pure(size, plan_changes, changes.changes, root, refetch) if changes.complete else None
        if plan is not None:
            ops = await self._changed_ops(plan, size)
            if lacking := lacking_names(ops, plan, refetch):
                ops = with_names(ops, await self._walked(root), lacking)
            changed = (changes.rev, ops, plan.replaced, plan.linked, [(m.src, m.dst) for m in plan.moves])
        self._changed_cache = (key, changed)
        return changed

    async def _walked(self, root: str) -> list[Op]:
        """Every entry below ``root`` in walk order (manifest rows come so), cached while the
        workspace does not change (the pages of one push walk the tree once), read a slice at a time
        with the loop free between (100,000 at once held it ~0.3 s). A change between slices may mix
        the walk: the page's revision, read before it, is a lower bound (the next push sends it)."""
        key = (self.fs.rev, root)
        if self._tree_cache is not None and self._tree_cache[0] == key:
            return self._tree_cache[1]
        ops: list[Op] = []
        after: str | None = None
        while True:
            try:
                rows = self.fs.manifest(root, inodes=True, after=after, limit=_WALK_SLICE)
            except (FileNotFoundError, NotADirectoryError):
                rows = []
            ops += [op_of(row) for row in rows]
            if len(rows) < _WALK_SLICE:
                break
            after = rows[-1].path
            await asyncio.sleep(0)
        self._tree_cache = (key, ops)
        return ops

    async def _changed_ops(self, plan: Plan, size: int) -> list[Op]:
        """The ops of the plan's changed paths, in walk order. A directory sent whole (removed,
        replaced or renamed here, not followed, or dropped by the mirror) is removed first; one only
        made or chmod-ed keeps what the mirror holds (a followed rename's) and gets its changes below.
        A file only written (not removed, replaced or renamed here) is written in place."""
        ops: list[Op] = []
        whole = plan.whole
        for path in plan.tops:
            try:
                target = await self.fs.readlink(path)
            except FileNotFoundError:
                ops.append(Op(path, "gone"))
                continue
            except OSError:
                target = None
            if target is not None:
                ops.append(Op(path, "symlink", target=target))
                continue
            try:
                st = await self.fs.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                ops.append(Op(path, "gone"))
                continue
            if st.is_directory and path not in whole:
                ops.append(Op(path, "dir", mode=st.mode, mtime=st.mtime))
                listing = await self._walked(path)
                ops.extend(await pure(len(listing), ops_below, listing, path, plan.below[path], whole))
            elif st.is_directory:
                # Removed, replaced or renamed here, or dropped by the mirror: sent whole, replacing it.
                ops.append(Op(path, "tree", mode=st.mode, mtime=st.mtime))
                ops.extend(await self._walked(path))
            else:
                ino = getattr(st, "ino", 0)
                nlink = getattr(st, "nlink", 1)
                ops.append(Op(path, "file", st.size, st.mode, st.mtime, ino, nlink))
        return await pure(max(size, len(ops)), sorted_ops, ops)

    async def _page(
        self,
        rev: int,
        root: str,
        full: bool,
        ops: list[Op],
        limits: SyncLimits,
        replaced: set[str] | None = None,
        linked: dict[str, tuple[str, bool]] | None = None,
    ) -> SyncPush:
        push = SyncPush(rev, root, full, session=self.fs.session, **await root_fields(self.fs, root))
        linked = linked or {}
        start = 0
        if limits.after is not None:
            after = walk_key(limits.after)
            start = bisect.bisect_right(ops, after, key=op_key)
        budget = limits.max_sync_bytes
        count = 0 if limits.after is None else sum(1 for op in ops[:start] if op.kind == "file")
        first_name: dict[int, str] = {}  # inode -> the first path of this push naming it (hard links)
        for op in ops[:start]:  # names sent on earlier pages
            if op.nlink > 1 and op.kind == "file":
                first_name.setdefault(op.ino, op.path)
        cursor: str | None = None
        small: list[tuple[int, Op]] = []  # (index in push.files, op) of files read in bulk
        for i in range(start, len(ops)):
            op = ops[i]
            if i - start >= _PAGE_ENTRIES or (op.kind == "file" and budget < op.size < BIG_FILE and cursor):
                push = dataclasses.replace(push, more=True, cursor=cursor)
                break
            cursor = op.path
            if op.kind == "gone":
                push.deleted.append(op.path)
            elif op.kind in ("tree", "dir"):  # a tree replaces what the mirror holds there
                if op.kind == "tree":
                    push.deleted.append(op.path)
                push.dirs.append(MirrorDir(op.path, op.mode, op.mtime))
            elif op.kind == "symlink":
                target = op.target
                if target is None:
                    if len(push.symlinks) % 256 == 255:  # the loop's turn between readlinks of deep paths
                        await asyncio.sleep(0)  # (20,000 links 2,000 deep: one step of 0.7 s a page)
                    try:
                        target = await self.fs.readlink(op.path)
                    except OSError:
                        continue
                push.deleted.append(op.path)
                # A link's own time is the manifest's (an op read with its target, from the change log,
                # has none: made at the push's time); 0 is a time (``touch -h -d @0``: was the push's).
                push.symlinks.append(MirrorSymlink(op.path, target, op.mtime if op.target is None else None))
            else:
                count += 1
                reason = over_limit(op, count, limits)
                if reason is not None:
                    push.deleted.append(op.path)
                    push.protected.append(op.path)
                    push.reasons[op.path] = reason
                    continue
                if op.nlink > 1 and op.ino in first_name:
                    push.files.append(MirrorFile(op.path, b"", op.mode, op.mtime, 0, first_name[op.ino]))
                    continue
                same = replaced is not None and op.path not in replaced
                held = linked.get(op.path) if op.nlink > 1 else None
                if held is not None:  # a new name of a file the mirror holds: linked there, and
                    push.files.append(MirrorFile(op.path, b"", op.mode, op.mtime, 0, held[0]))
                    if not held[1]:  # written into if it was written after (carries no bytes else)
                        continue
                    same = True
                if op.nlink > 1:
                    first_name[op.ino] = op.path
                if op.size >= BIG_FILE:  # as its chunks: the mirror fetches the ones it lacks
                    await asyncio.sleep(0)  # a turn each (100 sparse 4 GB files: one step of ~1.3 s)
                    try:
                        chunks = [c.hash for c in self.fs.file_chunks(op.path)]
                    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                        push.deleted.append(op.path)
                        continue
                    push.files.append(
                        MirrorFile(op.path, None, op.mode, op.mtime, op.size, None, chunks, same)
                    )
                    continue
                if op.size > budget:  # alone on its page and still too big: fetched in pieces
                    push.files.append(MirrorFile(op.path, None, op.mode, op.mtime, op.size, same=same))
                    budget = 0
                    continue
                small.append((len(push.files), op))  # read in bulk below
                push.files.append(MirrorFile(op.path, b"", op.mode, op.mtime, same=same))
                budget -= op.size
        if small:
            await self._read_small(push, small)
        return push

    async def _read_small(self, push: SyncPush, small: list[tuple[int, Op]]) -> None:
        """Fill in the page's small files: in bulk by inode where the storage can (one chunk or
        empty), else by path; a file removed meanwhile is removed from the page (the next push agrees)."""
        bulk = getattr(self.fs, "read_small_files", None)
        found = bulk([op.ino for _, op in small if op.ino]) if bulk is not None else {}
        gone: list[int] = []
        for index, op in small:
            data = found.get(op.ino) if op.ino else None
            if data is None or len(data) != op.size:
                try:
                    data = await self.fs.read_file(op.path)
                except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                    gone.append(index)
                    push.deleted.append(op.path)
                    continue
            f = push.files[index]  # made anew: ``dataclasses.replace`` cost ~5 µs a file (20,000: 0.1 s)
            push.files[index] = MirrorFile(f.path, data, f.mode, f.mtime, f.size, f.link, f.chunks, f.same)
        for index in reversed(gone):
            del push.files[index]

    # ------------------------------------------------------------------ pull

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> PullResult:
        """Apply a run's changes (one page of them) in one ``commit_batch`` (files, removals,
        directories, modes, mtimes, symlinks and hard links), then each large file from its chunks.

        A path the workspace changed after ``base_rev`` (itself, an ancestor or a descendant; the
        earlier pages of the same pull, ``pull.own_revs``, do not count) is left alone and reported,
        as are protected paths. The returned ``rev`` is the revision the mirror now reflects: the
        current one when nothing but this pull changed below the root since ``base_rev``, else
        ``base_rev`` (so the next push brings the other changes, and repairs the paths left alone).
        A page that follows moves (a live sandbox's) takes what the program changed below a path the
        workspace renamed since ``base_rev`` to the new name (``_moves.follow``) and returns the renames
        for the mirror to follow (``moves``).
        """
        fs = self.fs
        root = canonical(pull.root)
        own = set(pull.own_revs)
        protected = set(pull.protected)
        reasons: dict[str, str] = {}
        hold = getattr(fs, "hold_log", None)
        if hold is not None and not pull.done:  # more pages to come: the log after ``base_rev`` stays
            hold(base_rev, _HOLD_LOG)
        since = fs.changes_since(base_rev, root, skip_revs=sorted(own))
        # A directory's new time alone (another run's pull) refuses nothing below it.
        changed = [c.path for c in since.changes if c.op != TOUCH]
        linked = await other_names(fs, changed, root)
        conflicts = Conflicts(changed + linked, everything=not since.complete, made=since.changes, root=root)
        moves: list[Move] = []
        translated: set[str] = set()  # checked against the workspace's later changes already
        if pull.follow_moves and since.complete and not conflicts.none():
            followed = follow(pull, since.changes, root)
            pull, moves, translated = followed.pull, followed.moves, followed.translated
            reasons.update(dict.fromkeys(followed.refused, CONFLICT))
        # Nothing to refuse (no protected path, no workspace change below the root): the common case
        # asks nothing per path (1,000 removals: ~0.3 ms of look-ups).
        strict = bool(protected) or not conflicts.none()
        # A removal of a proper ancestor of a protected path (or of "/") leaves it alone.
        holding = add_ancestors({"/"}, protected) if protected else set()

        def refused(path: str, directory: bool = False) -> str | None:
            if path in protected:
                return PROTECTED
            if path not in translated and conflicts.hit(path, directory):
                return CONFLICT
            return None

        writes: dict[str, bytes | None] = {}
        modes: dict[str, int] = {}
        mtimes: dict[str, int] = {}
        links: dict[str, str] = {}
        chunked: list[MirrorFile] = []
        try:
            staged = await self._stage_page(pull, own)
        except KeptChunksGone as gone:  # nothing committed: the mirror sends the pull again
            return PullResult(rev=base_rev, missing=gone.missing)
        refusals = refused_files(pull.files, refused) if strict else {}  # a file's names together
        reasons.update(refusals)
        for f in pull.files:
            if f.path in refusals:
                continue
            if f.link is not None:
                links[f.path] = f.link
                continue
            if f.chunks is not None:
                chunked.append(f)
                continue
            writes[f.path] = f.data or b""
            modes[f.path] = f.mode & SAFE_BITS
            mtimes[f.path] = f.mtime
        deleted: list[str] = []
        for path in pull.deleted:
            why = refused(path) if strict else None
            if why is None and path in holding:
                why = PROTECTED_BELOW
            if why is not None:
                reasons[path] = why
            else:
                deleted.append(path)
        for path in outermost(deleted):
            writes.setdefault(path, None)
        dirs = []
        for d in pull.dirs:
            why = refused(d.path, True) if strict else None
            if why is not None:
                reasons[d.path] = why
            elif d.path not in conflicts.made:  # one both made: the workspace's mode and time stay
                dirs.append(d)
        mkdirs = needed_dirs(dirs, protected, set(writes))
        for d in dirs:  # a new one's or a chmod-ed one's: one set back to 0o755 was never stored
            modes[d.path] = d.mode & SAFE_BITS
            if d.mtime is not None:
                mtimes[d.path] = d.mtime
        # Directories' own mtimes: kept where nothing refuses the path, never reported either way.
        timed = [p for p in pull.dir_times if p not in mtimes and p not in protected]
        timed = [p for p in timed if not (strict and (refused(p, True) or p in conflicts.made))]
        for path in timed:
            mtimes[path] = pull.dir_times[path]
        symlinks: dict[str, str] = {}
        for link in pull.symlinks:
            why = refused(link.path) if strict else None
            if why is not None:
                reasons[link.path] = why
            else:
                symlinks[link.path] = link.target  # verbatim: resolved only inside a sandbox or the VFS
                if link.mtime is not None:  # the link's own (``commit_batch``)
                    mtimes[link.path] = link.mtime
        # A link to a large file of this page is made once that file is written (after the batch).
        big = {f.path for f in chunked}
        late = {path: first for path, first in links.items() if first in big} if big else {}
        for path in late:
            del links[path]
        if (writes or mkdirs or symlinks or links or chunked) and not await fs.exists(root):
            mkdirs.insert(0, root)
        applied: list[str] = []
        if writes or mkdirs or symlinks or links or timed:
            self._commit(
                writes,
                applied,
                reasons,
                own,
                mkdirs=mkdirs,
                modes=modes,
                mtimes=mtimes,
                links=links,
                symlinks=symlinks,
            )
        # Large files from their chunks, one transaction each (a chunk the store lacks fails that file).
        for f in chunked:
            await self._write_chunks(f, applied, reasons, own)
        if late:
            self._commit_links(late, applied, reasons, own)
        if timed:
            only = set(timed)
            applied = [p for p in applied if p not in only]
        if staged is not None and pull.done:
            with contextlib.suppress(OSError):
                before = fs.rev
                await fs.rm(staged, recursive=True, force=True)
                if fs.rev == before + 1:
                    own.add(fs.rev)
        foreign = fs.changes_since(base_rev, root, skip_revs=sorted(own)).changes
        claim = base_rev if foreign else fs.rev
        return PullResult(
            rev=claim,
            applied=sorted(dict.fromkeys(applied)),  # the batch's paths come sorted: cheap
            skipped=sorted(reasons),
            reasons=reasons,
            own_revs=sorted(own - set(pull.own_revs)),
            moves=[(m.src, m.dst, m.rev) for m in moves],
            carried=sorted({p for m in moves for p in m.carried}),
        )


# Entries in one push page at most. A page's small files are read on the owner's loop: 20,000 on one
# page held it ~0.2 s (a push computes what it sends once, ``_changed``, so more pages cost little).
_PAGE_ENTRIES = 5_000
# Manifest rows read at a time by a walk (``_walked``).
_WALK_SLICE = 5_000
