"""``LocalExecContext``: the :class:`ExecContext` of an in-process workspace.

This is also the owner-side half of a remote context: a pool worker's context forwards each call to
the owner, which answers it with this class. Sync computations (what a mirror needs, applying a
run's changes) therefore happen next to the SQLite file, one round trip each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ..storage import TOUCH
from ..storage.paths import canonical
from ._backend import MirrorFile, PullResult, SyncPull
from ._codec import to_plain
from ._deliver import deliverable, record_delivered, record_delivery_revs, without_deliveries
from ._dir_times import keep_later
from ._journal import JOURNAL_DIR, journal_refused
from ._moves import Move, follow
from ._protected import call_guard, checked_call
from ._pull_commit import SAFE_BITS, KeptChunksGone, PullCommits
from ._pull_lost import PullRecords
from ._pull_moves import as_taken, rename_dirs, renames_refused
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
from ._push_pages import PushPages
from ._share_budget import ShareBudget

__all__ = ["FS_OPS", "GUEST_OPS", "LocalExecContext"]

# Seconds a pull in pages keeps the change log after its run's revision (from each page; see
# ``FileSystem.hold_log``): its own pages' entries may fill the log past ``change_log_limit``.
_HOLD_LOG = 600.0

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


class LocalExecContext(PushPages, PullCommits):
    """Answers a backend's workspace calls directly on ``workspace.fs`` (and ``workspace.assets``)."""

    def __init__(self, workspace: Any) -> None:
        self.workspace = workspace
        self._tree_cache = None  # the push's caches (:class:`PushPages`)
        self._changed_cache = None
        # Directories a program's ``fs_call`` may read, not change (an agent adds its state).
        self.protected: dict[str, Callable[[str], Exception]] = {JOURNAL_DIR: journal_refused}
        self.shares = ShareBudget()  # what the share links of its programs may hold (``_share_budget``)
        # Times live mirrors' deliveries committed (``_deliver``): another mirror's never replace them.
        self.delivered: dict[str, tuple[int, int]] = {}
        # The revisions of those commits: a time alone, no conflict for any pull (``without_deliveries``).
        self.delivery_revs: dict[int, None] = {}
        self.live_staging: dict[str, float] = {}  # pulls in progress (``_pull_commit._sweep_stale``)
        self.pulls = PullRecords()  # what each recent pull committed, for a mirror that lost an answer

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
        """A program's share (the sandbox's ``assets`` command): within ``shares`` (``_share_budget``)."""
        from ..assets import link_lifetime  # (``computer.assets`` imports this package)

        assets = getattr(self.workspace, "assets", None)
        if assets is None:
            raise RuntimeError("this workspace has no assets publisher")
        lifetime = link_lifetime(expires_after)  # a bad one: the ValueError share would raise
        size = int((await self.fs.stat(path)).size)
        with self.shares.hold(canonical(path), size, lifetime):
            return str(await assets.share(path, expires_after=expires_after))

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
        for the mirror to follow (``moves``). A live mirror's delivery times (``SyncPull.delivered``,
        ``_deliver``) are its ``dir_times`` alone, less those over another mirror's delivery.
        A page of a pull whose answer the mirror lost is recorded by the pull's id, and a question
        about it (``SyncPull.asks``) is answered with what it committed (``_pull_lost``).
        """
        if pull.asks:
            return await self.pulls.answer(pull, base_rev)
        own = set(pull.own_revs)
        if not pull.pull_id:
            return await self._sync_pull(pull, base_rev, own, [])
        record = self.pulls.start(pull, own)
        if record is None:  # a mirror asked about this pull already: it takes nothing more of it
            return PullResult(rev=base_rev, unrenamed=bool(pull.renames))
        try:
            return await self._sync_pull(pull, base_rev, own, record.renamed)
        finally:
            self.pulls.end(record)

    async def _sync_pull(
        self, pull: SyncPull, base_rev: int, own: set[int], done: list[tuple[str, str]]
    ) -> PullResult:
        fs = self.fs
        if pull.delivered:  # a live mirror's delivery times (``_deliver``)
            pull = await deliverable(fs, pull, self.delivered)
        root = canonical(pull.root)
        protected = set(pull.protected)
        reasons: dict[str, str] = {}
        hold = getattr(fs, "hold_log", None)
        if hold is not None and not pull.done:  # more pages to come: the log after ``base_rev`` stays
            hold(base_rev, _HOLD_LOG)
        since = without_deliveries(
            fs.changes_since(base_rev, root, skip_revs=sorted(own)), self.delivery_revs
        )
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
        sub_ns: dict[str, int] = {}  # the nanoseconds past those, where not 0 (``FileStat.sub_ns``)
        links: dict[str, str] = {}
        in_place: dict[str, int] = {}  # files written through their node (``MirrorFile.same``)
        chunked: list[MirrorFile] = []
        renames = [(canonical(a), canonical(b)) for a, b in pull.renames]
        if renames and (moves or renames_refused(renames, conflicts, protected, root)):
            return PullResult(rev=base_rev, unrenamed=True)  # nothing committed: sent again without
        if renames and not await as_taken(fs, renames):
            return PullResult(rev=base_rev, unrenamed=True)
        try:
            staged = await self._stage_page(pull, own)
        except KeptChunksGone as gone:  # nothing committed: the mirror sends the pull again
            return PullResult(rev=base_rev, missing=gone.missing)
        # A program's directory renames first (``_pull_moves``): the page names what is below them anew.
        # (listed whatever their times)
        renamed = await rename_dirs(fs, renames, own, done) if renames else []
        applied: list[str] = []
        refusals = refused_files(pull.files, refused) if strict else {}  # a file's names together
        reasons.update(refusals)
        for f in pull.files:
            if f.path in refusals:
                continue
            if f.link is not None:
                links[f.path] = f.link
                continue
            if f.same:  # through the node, every name: refused if the workspace wrote it (``commit_batch``)
                in_place[f.path] = base_rev
            if f.chunks is not None:
                chunked.append(f)
                continue
            writes[f.path] = f.data or b""
            modes[f.path] = f.mode & SAFE_BITS
            mtimes[f.path] = f.mtime
            if f.sub_ns:
                sub_ns[f.path] = f.sub_ns
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
                if d.sub_ns:
                    sub_ns[d.path] = d.sub_ns
        # Directories' own mtimes: kept where nothing refuses the path, never reported either way.
        timed = [p for p in pull.dir_times if p not in mtimes and p not in protected]
        timed = [p for p in timed if not (strict and (refused(p, True) or p in conflicts.made))]
        for path in timed:
            mtimes[path] = pull.dir_times[path]
            if sub := pull.dir_sub_ns.get(path):
                sub_ns[path] = sub
        # One the workspace moved too meanwhile (a name it made there) keeps the later time of the two.
        kept = await keep_later(fs, since.changes, mtimes, sub_ns, {d.path for d in dirs}.union(timed))
        timed = [p for p in timed if p not in kept] if kept else timed
        symlinks: dict[str, str] = {}
        for link in pull.symlinks:
            why = refused(link.path) if strict else None
            if why is not None:
                reasons[link.path] = why
            else:
                symlinks[link.path] = link.target  # verbatim: resolved only inside a sandbox or the VFS
                if link.mtime is not None:  # the link's own (``commit_batch``)
                    mtimes[link.path] = link.mtime
                    if link.sub_ns:
                        sub_ns[link.path] = link.sub_ns
        # A link to a large file of this page is made once that file is written (after the batch).
        big = {f.path for f in chunked}
        late = {path: first for path, first in links.items() if first in big} if big else {}
        for path in late:
            del links[path]
        if (writes or mkdirs or symlinks or links or chunked) and not await fs.exists(root):
            mkdirs.insert(0, root)
        if writes or mkdirs or symlinks or links or timed:
            await self._commit_main(
                writes,
                applied,
                reasons,
                own,
                mkdirs=mkdirs,
                modes=modes,
                mtimes=mtimes,
                links=links,
                symlinks=symlinks,
                sub_ns=sub_ns,
                in_place=in_place,
            )
        # Large files from their chunks, one transaction each (a chunk the store lacks fails that file).
        for f in chunked:
            await self._write_chunks(f, applied, reasons, own, in_place)
        if late:
            self._commit_links(late, applied, reasons, own)
        if timed:
            only = set(timed)
            applied = [p for p in applied if p not in only]
            if pull.delivered:
                record_delivered(pull, set(reasons) | (set(pull.dir_times) - only), self.delivered)
                record_delivery_revs(own - set(pull.own_revs), self.delivery_revs)
        if staged is not None and pull.done:
            self.live_staging.pop(staged.rpartition("/")[2], None)
            with contextlib.suppress(OSError):
                before = fs.rev
                await fs.rm(staged, recursive=True, force=True)
                if fs.rev == before + 1:
                    own.add(fs.rev)
        foreign = fs.changes_since(base_rev, root, skip_revs=sorted(own)).changes
        claim = base_rev if foreign else fs.rev
        return PullResult(
            rev=claim,
            applied=sorted(dict.fromkeys(renamed + applied)),  # the batch's paths come sorted: cheap
            skipped=sorted(reasons),
            reasons=reasons,
            own_revs=sorted(own - set(pull.own_revs)),
            moves=[(m.src, m.dst, m.rev) for m in moves],
            carried=sorted({p for m in moves for p in m.carried}),
        )
