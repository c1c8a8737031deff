"""A push's pages (``PushPages``, mixed into ``LocalExecContext``): what a mirror needs, read here."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
from typing import Any

from ..storage.paths import canonical, is_within
from ._backend import BIG_FILE, MirrorDir, MirrorFile, MirrorSymlink, SyncLimits, SyncPush
from ._dir_times import root_fields
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

__all__ = ["PushPages"]

# An incremental push (``_changed``): revision, ops, paths replaced, names linked, renames followed.
_Changed = tuple[int, list[Op], set[str], dict[str, tuple[str, bool]], list[tuple[str, str]]]


class PushPages:
    """The pages of a push; mixed into :class:`LocalExecContext` (``self.fs``, its two caches)."""

    fs: Any
    # The last tree walked for a push: ((rev, root), ops), reused by the pages of one push.
    _tree_cache: tuple[tuple[int, str], list[Op]] | None
    # The last incremental push's computed pages (see ``_changed``).
    _changed_cache: tuple[tuple[object, ...], _Changed | None] | None

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
        plan = None
        if changes.complete and not size and not refetch:
            # Nothing at, above or below the root since (a run's start after one that changed
            # nothing: the log holds only the journal's records): no plan to make (~40 µs a run).
            changed = (changes.rev, [], set(), {}, [])
        elif changes.complete:
            plan = await pure(size, plan_changes, changes.changes, root, refetch)
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
            if path in plan.timed:
                ops += await self._timed_op(path)
                continue
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
            sub = getattr(st, "sub_ns", 0)
            if st.is_directory and path not in whole:
                ops.append(Op(path, "dir", mode=st.mode, mtime=st.mtime, sub_ns=sub))
                listing = await self._walked(path)
                ops.extend(await pure(len(listing), ops_below, listing, path, plan.below[path], whole))
            elif st.is_directory:
                # Removed, replaced or renamed here, or dropped by the mirror: sent whole, replacing it.
                ops.append(Op(path, "tree", mode=st.mode, mtime=st.mtime, sub_ns=sub))
                ops.extend(await self._walked(path))
            else:
                ino = getattr(st, "ino", 0)
                nlink = getattr(st, "nlink", 1)
                ops.append(Op(path, "file", st.size, st.mode, st.mtime, ino, nlink, sub_ns=sub))
        return await pure(max(size, len(ops)), sorted_ops, ops)

    async def _timed_op(self, path: str) -> list[Op]:
        """The op of a directory whose time alone changed (``Plan.timed``): itself with its mode and
        time, nothing below it looked at; none when it is no directory now (a symlink, gone: the
        log's other entries say what it is)."""
        with contextlib.suppress(OSError):  # EINVAL: no symlink
            await self.fs.readlink(path)
            return []
        try:
            st = await self.fs.stat(path)
        except OSError:
            return []
        if not st.is_directory:
            return []
        return [Op(path, "dir", mode=st.mode, mtime=st.mtime, sub_ns=getattr(st, "sub_ns", 0))]

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
                push.dirs.append(MirrorDir(op.path, op.mode, op.mtime, op.sub_ns))
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
                own = op.target is None
                push.symlinks.append(
                    MirrorSymlink(op.path, target, op.mtime if own else None, op.sub_ns if own else 0)
                )
            else:
                count += 1
                reason = over_limit(op, count, limits)
                if reason is not None:
                    push.deleted.append(op.path)
                    push.protected.append(op.path)
                    push.reasons[op.path] = reason
                    continue
                if op.nlink > 1 and op.ino in first_name:
                    push.files.append(
                        MirrorFile(op.path, b"", op.mode, op.mtime, 0, first_name[op.ino], sub_ns=op.sub_ns)
                    )
                    continue
                same = replaced is not None and op.path not in replaced
                held = linked.get(op.path) if op.nlink > 1 else None
                if held is not None:  # a new name of a file the mirror holds: linked there, and
                    push.files.append(
                        MirrorFile(op.path, b"", op.mode, op.mtime, 0, held[0], sub_ns=op.sub_ns)
                    )
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
                        MirrorFile(op.path, None, op.mode, op.mtime, op.size, None, chunks, same, op.sub_ns)
                    )
                    continue
                if op.size > budget:  # alone on its page and still too big: fetched in pieces
                    push.files.append(
                        MirrorFile(op.path, None, op.mode, op.mtime, op.size, same=same, sub_ns=op.sub_ns)
                    )
                    budget = 0
                    continue
                small.append((len(push.files), op))  # read in bulk below
                push.files.append(MirrorFile(op.path, b"", op.mode, op.mtime, same=same, sub_ns=op.sub_ns))
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
            push.files[index] = MirrorFile(
                f.path, data, f.mode, f.mtime, f.size, f.link, f.chunks, f.same, f.sub_ns
            )
        for index in reversed(gone):
            del push.files[index]


# Entries in one push page at most. A page's small files are read on the owner's loop: 20,000 on one
# page held it ~0.2 s (a push computes what it sends once, ``_changed``, so more pages cost little).
_PAGE_ENTRIES = 5_000
# Manifest rows read at a time by a walk (``_walked``).
_WALK_SLICE = 5_000
