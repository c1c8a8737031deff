"""``MirrorSync``: the sync bracket around one program run over a mirror (shell and python backends).

*acquire* a mirror of the workspace (settling a deferred pull of its last run) → *push* (the mirror
catches up with the workspace, page by page) → the backend runs its program over the mirror →
*pull* (what the program changed goes back, page by page, under the pull's rules) → *release*.

Two invariants carry it (ARCHITECTURE, "The mirror is a sync engine"):

1. ``Mirror.rev`` is a lower bound: it only advances over changes the mirror provably holds (the
   first page of a push it applied; a pull whose every revision was its own). A workspace change made
   while a run was in flight is therefore always sent to the next run.
2. A path the pull left alone (the workspace changed it too, or it is protected) is dropped from the
   mirror and the mirror's revision stays at the run's base, so the next push repairs it with the
   workspace's version (a live sandbox's refused removal of what holds a path the mirror never had:
   the next run's push, ``Mirror.hold``, never a sync under the program still removing the tree).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from ..storage import CHUNK_SIZE
from ._backend import (
    PAGE_DIRS,
    PAGE_FILES,
    DeferringContext,
    ExecContext,
    MirrorFile,
    PendingPull,
    SyncLimits,
    SyncPull,
    SyncPush,
    fits,
)
from ._entry_cap import MAX_ENTRIES, cap_entries
from ._kept import trim_kept
from ._mirror import Entry, Mirror, PullPlan
from ._mirror_pool import MirrorPool
from ._per_call import PerCallRuns
from ._pull_lost import ask_lost, sent
from ._pull_moves import Unrenamed
from ._pull_pages import Pages as _Pages  # (``tests/runtime/test_sync_pages`` names it so)
from ._pull_pages import removals_outermost
from ._pull_rules import CONFLICT
from ._tasks import finish_in_thread, in_thread, offload
from ._uid_lease import UidLeases

__all__ = ["MirrorSync", "Synced"]


class RunSaves(Protocol):
    """What a run saved to the workspace itself while it ran (the assets bridge)."""

    saved: list[str]
    own_revs: list[int]


@dataclass
class Synced:
    """The pull's outcome, as an exit event reports it."""

    pulled: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> reason
    pending: PendingPull | None = None  # handed to the dispatcher (a deferring context)
    # The program's changes this pull refused (a subset of ``skipped``: not what the mirror keeps out)
    refused: dict[str, str] = field(default_factory=dict)


class MirrorSync:
    """Pushes, pulls and lends the mirrors of one backend (``mount_root`` of every workspace)."""

    def __init__(self, mirrors: MirrorPool, mount_root: str, limits: SyncLimits) -> None:
        self.mirrors = mirrors
        self.mount_root = mount_root
        self.limits = limits
        # The host uid/gid that must own what mirrors hold (the sandbox's unprivileged user), or None;
        # with ``leases``, each mirror's own uid (``_uid_lease``: leased at its first use, released
        # once it is removed), the gid the owner's.
        self.owner: tuple[int, int] | None = None
        self.leases: UidLeases | None = None
        # Bytes a mirror may hold in files only its sandbox has (``_kept``; the sandbox's memory limit).
        self.kept_limit: int | None = None
        # The most files, directories and symlinks a pull leaves in a workspace (``_entry_cap``).
        self.max_entries: int | None = MAX_ENTRIES
        # The runs in a sandbox per call in progress: one whose event loop ended is ended from another.
        self.calls = PerCallRuns(self)

    def acquire(self, workspace_id: str, ctx: ExecContext) -> Mirror:
        mirror = self.mirrors.acquire(workspace_id)
        if mirror.lease is None and self.leases is not None and self.owner is not None:
            mirror.lease = self.leases.take()  # RangeExhausted: refused, never a shared uid
        mirror.owner = mirror.lease.ids if mirror.lease is not None else self.owner
        mirror.restore_held()  # a live sandbox's, ended since: the next push sends them
        if mirror.unsettled is not None:
            _settle_deferred(mirror, ctx)
        return mirror

    async def release(self, workspace_id: str, mirror: Mirror, *, clean: bool) -> bool:
        """Give the mirror back; True when the pool keeps it (idle and warm).

        A bracket interrupted midway (kill) leaves unknown content, and a worker thread may still be
        writing it: such a mirror is never reused; the next run takes a fresh one (full push).
        """
        if _taken(mirror):  # ended from another loop (``PerCallRuns.end``): released there
            return False
        if clean:
            return self.mirrors.release(workspace_id, mirror)
        mirror.invalidate()
        await offload(None, self.mirrors.discard, mirror)
        return False

    def remove_evicted(self) -> None:
        """Remove the idle mirrors the pool's bound pushed out, in a worker thread (each is a tree)."""
        for mirror in self.mirrors.take_evicted():
            in_thread(functools.partial(self.mirrors.discard, mirror), "removing an evicted mirror")

    # ------------------------------------------------------------------ push

    def push_limits(self, mirror: Mirror) -> SyncLimits:
        """The limits of a push to ``mirror``: the backend's, leaving out what the mirror's own pulls
        committed after its revision (``SyncLimits.skip_revs``) and asking again for the paths its pulls
        left alone (``SyncLimits.refetch``)."""
        if mirror.rev is None:
            return self.limits
        own = mirror.own_since(mirror.rev)
        if not own and not mirror.refetch:
            return self.mirror_limits(mirror)
        return dataclasses.replace(
            self.limits, skip_revs=tuple(own), refetch=tuple(sorted(mirror.refetch)), session=mirror.session
        )

    def mirror_limits(self, mirror: Mirror) -> SyncLimits:
        """The backend's limits with the store session of ``mirror``'s revision (what its next push
        asks with when it has nothing of its own to leave out: a dispatcher prefetches by them)."""
        return dataclasses.replace(self.limits, session=mirror.session)

    async def push(
        self, mirror: Mirror, ctx: ExecContext, *, first: SyncPush | None = None
    ) -> tuple[SyncPush, int]:
        """Bring ``mirror`` to the workspace's current revision, page by page, and start watching it;
        the first page (whose revision the mirror then reflects) and how many files were written.
        A rename the mirror could not follow (``Mirror.move``) leaves the new name to fetch again:
        one more round sends it, and its first page is the one returned.

        A file larger than a page arrives in pieces of at most a page, written in place, so memory
        stays one page whatever the tree holds. A continuation page that is no longer of the same kind
        (the change log was trimmed meanwhile) starts the push over as a full one. ``first``: the
        first page, already fetched for ``mirror.rev`` (a live sandbox looks before it pauses).
        """
        try:
            if mirror.lost is not None:  # a pull's answer lost: what it committed first (``_pull_lost``)
                await ask_lost(mirror, ctx)
                first = None  # (asked for before: its skipped revisions may be short)
            start, pushed = await self._push_pages(mirror, ctx, first)
            if mirror.refetch:  # a rename it could not follow: the new name, whole (one more round)
                start, again = await self._push_pages(mirror, ctx, None)
                pushed += again
            if mirror.delivery is not None:  # a live sandbox's: what it was given, timed now
                await mirror.delivery.retime(mirror)
            if mirror.watch is not None:
                mirror.arm()  # drains what the push caused
            else:
                await offload(mirror, mirror.arm)  # a new watch walks the whole tree
            return start, pushed
        finally:
            mirror.restore_lifts()  # what it lifted to write below a locked directory (``_lifts``)

    async def _push_pages(
        self, mirror: Mirror, ctx: ExecContext, first: SyncPush | None
    ) -> tuple[SyncPush, int]:
        limits = self.push_limits(mirror)
        given, start = first, None
        pushed = 0
        while True:
            if given is not None:
                page, given = given, None
            else:
                page = await ctx.sync_push(mirror.rev, self.mount_root, limits)
            if start is not None and page.full != start.full:
                mirror.invalidate()
                start, pushed, limits = None, 0, self.push_limits(mirror)
                continue
            starting = start is None
            if starting:
                start = page
                if page.full and mirror.rev is not None and page.session != mirror.session:
                    # Not the history the mirror reflects (a copy of the store, or an earlier copy of
                    # it restored): nothing it kept of that one holds (its own revisions included).
                    mirror.invalidate()
            # A thread hop costs more than applying a handful of entries; not so a page that may ask a
            # live sandbox's readers (``Mirror.readers``: its processes' /proc, ~0.5 ms each).
            if _small(page) and (mirror.readers is None or not any(f.same for f in page.files)):
                pushed += mirror.apply(page, first=starting)
            else:
                pushed += await offload(mirror, mirror.apply, page, first=starting)
            if mirror.delivery is not None:
                mirror.delivery.note(page)
            for file, needed in list(mirror.unfilled):
                if needed is None:
                    await self._fill(mirror, ctx, file)
                else:
                    await self._fill_chunks(mirror, ctx, file, needed)
            mirror.unfilled = []
            if not page.more:
                break
            limits = dataclasses.replace(limits, after=page.cursor)
        assert start is not None
        mirror.finish_push(start.rev, limits.refetch)
        mirror.session = start.session
        return start, pushed

    async def _fill(self, mirror: Mirror, ctx: ExecContext, file: MirrorFile) -> None:
        """Fetch a large file's bytes in pieces of at most a page, each written in place."""
        piece = max(1 << 20, self.limits.max_sync_bytes)
        offset = 0
        while offset < file.length:
            try:
                data = await ctx.fs_call("read_file", {"path": file.path, "offset": offset, "length": piece})
            except FileNotFoundError:
                return  # removed meanwhile: the next push removes it here too
            await offload(mirror, mirror.fill, file, offset, bytes(data))
            if len(data) < piece:
                return
            offset += len(data)

    async def _fill_chunks(
        self, mirror: Mirror, ctx: ExecContext, file: MirrorFile, needed: list[int]
    ) -> None:
        """Fetch the chunks of a large file the mirror lacks, a page of them per call. A chunk the
        store no longer holds (the file changed since the page was made) is read by its byte range
        instead: the next push brings the newer version whole anyway (the mirror's rev predates it)."""
        assert file.chunks is not None
        per_call = max(1, self.limits.max_sync_bytes // CHUNK_SIZE)
        for start in range(0, len(needed), per_call):
            batch = needed[start : start + per_call]
            got = await ctx.fs_call("read_chunks", {"hashes": [file.chunks[i] for i in batch]})
            pieces: dict[int, bytes] = {}
            for i in batch:
                data = got.get(file.chunks[i])
                if data is None:
                    try:
                        data = await ctx.fs_call(
                            "read_file", {"path": file.path, "offset": i * CHUNK_SIZE, "length": CHUNK_SIZE}
                        )
                    except FileNotFoundError:
                        return
                pieces[i] = bytes(data)
            last = start + per_call >= len(needed)
            await offload(mirror, mirror.fill_chunks, file, pieces, last)

    # ------------------------------------------------------------------ pull

    async def pull(
        self,
        mirror: Mirror,
        ctx: ExecContext,
        base_rev: int,
        run: str,
        saves: RunSaves | None = None,
        *,
        defer: bool = True,
        follow: bool = False,
        paced: bool = False,
    ) -> Synced:
        """Send back what the program changed since the push of ``base_rev``, and settle the mirror.

        A deferring context (a pool worker's) gets the changes in the exit event instead, when they fit
        one page: its dispatcher applies them, and the mirror is settled by the next run. ``follow``
        (a live sandbox, whose programs outlive a sync): what the program changed below a path the
        workspace renamed goes to the new name, and the mirror follows the rename (``_moves``); a
        removal refused only for what the mirror keeps out below it (``PROTECTED_BELOW``) stays
        removed until the next run's push (``Mirror.hold``), not made again under the program.
        ``paced``: a live sandbox's tick (``Mirror.look_again`` may wait for a later one).
        What the pull lifted in a mirror its program locked is put back at its end (``_lifts``).
        """
        if _taken(mirror):  # ended from another loop (``PerCallRuns.end``): pulled there
            return Synced()
        try:
            if mirror.lost is not None:  # a pull's answer lost: what it committed first (``_pull_lost``)
                await ask_lost(mirror, ctx)
            synced = await self._pull(
                mirror, ctx, base_rev, run, saves, defer=defer, follow=follow, paced=paced
            )
            mirror.pull_stored()
            return synced
        except BaseException:
            # The watch's events are spent and the state not settled: the next plan walks the whole
            # tree, so what this pull could not store (a full disk, the owner gone) is tried again, as
            # is what a cancelled one planned (a live sandbox's end cancels its tick: before, only a
            # failure to store counted; the plan went on alone in its thread and was dropped, the
            # end's pull found the watch quiet, and the warm mirror kept what the workspace never got).
            mirror.unrename()  # a walk next; the state (renames), the top's and directories' times as before
            raise
        finally:
            mirror.restore_lifts()

    async def _pull(
        self,
        mirror: Mirror,
        ctx: ExecContext,
        base_rev: int,
        run: str,
        saves: RunSaves | None,
        *,
        defer: bool,
        follow: bool,
        paced: bool,
    ) -> Synced:
        cap = self.max_entries
        if mirror.quiet(paced):  # the program changed nothing: no thread hop for an empty pull
            plan, now = mirror.plan(paced=paced, cap=cap)
        else:
            plan, now = await finish_in_thread(functools.partial(mirror.plan, paced=paced, cap=cap), mirror)
        mirror.kept = set(plan.unsyncable)
        left_out = {**mirror.left_out(), **plan.unsyncable}
        if self.kept_limit is not None and plan.unsyncable:  # such a file made or grown: count them all
            removed = await finish_in_thread(
                functools.partial(trim_kept, mirror, now, self.kept_limit), mirror
            )
            left_out.update(removed)
        capped: dict[str, str] = {}
        if self.max_entries is not None and (len(now) > self.max_entries or plan.overflow is not None):
            capped = await finish_in_thread(
                functools.partial(cap_entries, mirror, plan, now, self.max_entries), mirror
            )
        saved = list(saves.saved) if saves is not None else []
        # Revisions committed since ``base_rev`` by this mirror's earlier pulls (a live sandbox's pull at a
        # run's end, then its tick's before any push) are no workspace change either: counted as one,
        # the program's newer writes to those paths were refused and removed from the mirror.
        own = [*(saves.own_revs if saves is not None else ()), *mirror.own_since(base_rev)]
        deferring = defer and isinstance(ctx, DeferringContext) and ctx.defers_pull and not capped
        # A pull that keeps chunks (a renamed large file) is not deferred: its first page may have to
        # be sent again (``PullResult.missing``), which only this side can do.
        if (
            deferring
            and plan.size() <= self.limits.max_sync_bytes
            and len(plan.files) + len(plan.links) <= PAGE_FILES  # then a copy of both costs nothing
            and fits((rel for rel, _ in [*plan.files, *plan.links]), PAGE_FILES)
            == len(plan.files) + len(plan.links)
            and fits((s.path + s.target for s in plan.symlinks), PAGE_FILES) == len(plan.symlinks)
            and fits(plan.deleted, PAGE_FILES) == len(plan.deleted)
            and fits((d.path for d in plan.dirs), PAGE_DIRS) == len(plan.dirs)
            and not mirror.chunk_sources(plan)
            and not plan.shared  # (its other names are listed as pulled here: ``_apply``)
            and not plan.renames  # (refused, it is sent again: ``_pull_moves``)
        ):
            pull = (
                mirror.read_all(plan)
                if plan.empty()
                else await finish_in_thread(functools.partial(mirror.read_all, plan), mirror)
            )
            pull = dataclasses.replace(pull, own_revs=own)
            mirror.forget_chunks(plan)  # settled later without the plan
            mirror.unsettled = (run, now)
            pending = PendingPull(pull, base_rev, dataclasses.asdict(self.mirror_limits(mirror)))
            return Synced(sorted(saved), left_out, pending)
        try:
            applied, reasons = await self._apply(mirror, ctx, plan, now, base_rev, own, follow)
        except Unrenamed:  # nothing committed: sent again as a removal and the new tree (``_pull_moves``)
            return await self._pull(
                mirror, ctx, base_rev, run, saves, defer=False, follow=follow, paced=paced
            )
        if len(plan.deleted) > PAGE_FILES:  # removal pages: a removed directory stands for its tree
            applied = await offload(mirror, removals_outermost, applied, set(plan.deleted))
        # Unique in the order given (pages come sorted), then sorted: a sort of a set's order took
        # 0.12 ms of 1,111 paths, ~0.05 this way.
        refused = {**capped, **reasons}  # (the cap's: gone from the mirror already, nothing to settle)
        return Synced(sorted(dict.fromkeys([*applied, *saved])), {**refused, **left_out}, refused=refused)

    async def _apply(
        self,
        mirror: Mirror,
        ctx: ExecContext,
        plan: PullPlan,
        now: dict[str, Entry],
        base_rev: int,
        own: list[int],
        follow: bool,
    ) -> tuple[list[str], dict[str, str]]:
        applied: list[str] = []
        reasons: dict[str, str] = {}
        moves: dict[int, tuple[str, str, int]] = {}  # by revision: every page names the same ones
        carried: set[str] = set()  # the workspace's changes those renames carried (fetched again)
        rev, pull_id = base_rev, secrets.token_hex(8)
        # Nothing changed: the mirror still reflects ``base_rev`` exactly (no round trip needed; claiming
        # more would count a workspace change made during the run as mirrored).
        if not plan.empty():
            pages = _Pages(mirror.pages(plan, self.limits.max_sync_bytes, reuse=True))
            # Pages are read in a worker thread when they read files; removals, directories and
            # links are lists already (1,000 removals: no hop, which under load costs milliseconds).
            # The last page says so (``done``): no hop to learn that nothing follows.
            light = not plan.files
            try:
                while True:
                    page = pages.next() if light else await offload(mirror, pages.next)
                    if page is None:
                        break
                    page = dataclasses.replace(page, own_revs=own, follow_moves=follow, pull_id=pull_id)
                    result = await sent(mirror, ctx, page, base_rev)  # (its answer lost: ``_pull_lost``)
                    if result.unrenamed:  # nothing committed: the state as it was, the tree walked again
                        mirror.unrename()
                        raise Unrenamed
                    if result.missing:  # a first page whose kept chunks are gone: nothing committed
                        pages.close()
                        pages = _Pages(mirror.pages(plan, self.limits.max_sync_bytes))
                        continue
                    mirror.renames_done(page, result.own_revs)  # (kept if a later page fails)
                    own = own + result.own_revs
                    moves.update((r, (src, dst, r)) for src, dst, r in result.moves)
                    carried.update(result.carried)
                    applied += result.applied
                    reasons.update(result.reasons)
                    rev = result.rev
                    if page.done:
                        break
                    await asyncio.sleep(0)  # other work between pages (a light pull has no thread hop)
            finally:
                pages.close()
        if plan.shared:  # a file written through its node changed its other names too (``PullPlan.shared``)
            applied += [name for path in list(applied) if path in plan.shared for name in plan.shared[path]]
        followed = [moves[r] for r in sorted(moves)]
        # A live program may still be removing the tree: what the workspace keeps only for what the
        # mirror never had stays removed until the next run (``Mirror.hold``), as per call.
        held = mirror.holdable(reasons, now) if follow and reasons else set()
        if reasons or followed:  # the mirror follows renames, drops what the pull left alone
            conflicts = [path for path, why in reasons.items() if why == CONFLICT]
            await finish_in_thread(
                functools.partial(mirror.settle, now, rev, list(reasons), plan, followed, conflicts), mirror
            )
        else:
            mirror.settle(now, rev, (), plan)
        if carried:  # at their new names, after the mirror followed the renames (or fetches them whole)
            mirror.refetch |= carried
        if held:
            mirror.hold(held)
        # What this pull committed is in the mirror: the next push leaves those revisions out.
        mirror.own_revs = sorted(
            {r for r in (*mirror.own_revs, *own) if mirror.rev is None or r > mirror.rev}
        )
        for path, names in plan.shared.items():
            if path in reasons:  # refused: its other names kept the workspace's version too (said so)
                for name in names:
                    reasons.setdefault(name, reasons[path])
        return applied, reasons


def _taken(mirror: Mirror) -> bool:
    """Whether another event loop than this one took ``mirror`` over (``Mirror.taken_by``)."""
    return mirror.taken_by is not None and mirror.taken_by is not asyncio.get_running_loop()


def _small(push: SyncPush | SyncPull) -> bool:
    """A page worth applying without a thread hop: incremental, a few entries, a few KiB."""
    if isinstance(push, SyncPush) and push.full:
        return False
    moves = len(push.moves) if isinstance(push, SyncPush) else 0
    if len(push.files) + len(push.dirs) + len(push.symlinks) + len(push.deleted) + moves > 8:
        return False
    return sum(f.length for f in push.files) <= 64 * 1024


def _settle_deferred(mirror: Mirror, ctx: ExecContext) -> None:
    """Settle a mirror whose last run deferred its pull, from that pull's outcome; unknown outcome
    (the dispatcher failed to apply it, or restarted): forget the mirror's revision (full push)."""
    assert mirror.unsettled is not None
    run, now = mirror.unsettled
    mirror.unsettled = None
    outcome = ctx.pull_outcome(run) if isinstance(ctx, DeferringContext) else None
    if outcome is None:
        mirror.rev = None
        return
    rev, skipped = outcome
    mirror.settle(now, rev, skipped)
