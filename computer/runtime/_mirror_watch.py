"""A mirror's watch (see ``_watch``): armed for a run, asked whether anything changed, and given up for
a tree with more directories than a watch may hold (``MAX_DIRS``), which is walked instead: at every
run's end, and by a live sandbox's ticks at most a tenth of the time."""

from __future__ import annotations

import os
import time

from . import _watch
from ._dir_times import RootTime, dir_times
from ._entry import CTIME_NS, KIND, MTIME_NS
from ._held_links import is_utf8
from ._mirror_base import Entry, MirrorBase, PullPlan
from ._mirror_walk import Overflow, walk
from ._watch import TreeWatch

__all__ = ["SHED_FOR", "MirrorWatch"]

SHED_FOR = 30.0  # seconds a mirror whose watch was shed (``_watch``) is walked, not watched
# How far a directory's ctime may lag the clock (the kernel stamps it from a coarse clock: a tick).
CTIME_SLACK = 50_000_000


class MirrorWatch(MirrorBase):
    """The watch side of a mirror (its fields are :class:`~computer.runtime._mirror.Mirror`'s)."""

    unwatched: bool  # more directories than a watch may hold: walked, not watched
    walk_next: float  # an unwatched mirror's next paced walk is due then (monotonic)
    forced: set[str]  # files the next pull reads as changed whatever their lstat says (``force``)
    shed_until: float  # not watched again before then: its events nearly overflowed the shared queue
    overflow: Overflow | None = None  # the new entries the last walk refused past its cap (``_mirror_walk``)
    walk_times: dict[str, int]  # unwatched: directories' mtimes (ns) as the last walk found them
    armed_ns: int = 0  # the wall clock (ns) when the watch was last armed (``recent_dirs``)
    walk_undo: dict[str, int] | None  # ``walk_times`` before a pull not stored yet (``pull_unsent``)
    root_time: RootTime

    def scan(
        self, times: dict[str, int] | None = None, denied: list[str] | None = None, cap: int | None = None
    ) -> dict[str, Entry]:
        """Walk the directory: every entry below it, by relative path (and each directory's mtime in ns
        into ``times`` when given); see :func:`~computer.runtime._mirror_walk.walk`. Past ``cap``
        entries the new ones are refused, not collected: ``overflow`` says which (else None). A tree a
        watch gave up on is watched again once a walk finds it under half of ``MAX_DIRS``."""
        started = time.monotonic()
        now, self.overflow = walk(self.directory, self.state, self.lifts, times, denied, cap)
        ended = time.monotonic()
        self.walk_next = ended + 9 * (ended - started)
        if ended < self.shed_until:
            pass  # its own events nearly overflowed the queue every mirror shares: walked a while
        elif self.unwatched and sum(1 for e in now.values() if e[KIND] == "d") < _watch.MAX_DIRS // 2:
            self.unwatched = False  # the next push arms a watch again
        return now

    def arm(self) -> None:
        """Start watching for the run's changes; events the push itself caused are dropped."""
        if self.watch is not None and self.watch.drain() is None:
            self.unwatched = self.unwatched or self.watch.over
            self.shed_until = time.monotonic() + SHED_FOR if self.watch.shed else self.shed_until
            self.unwatch()
        if self.watch is None and not self.unwatched:
            if self.lifts.locked:  # a new watch reads every directory (``_lifts``)
                self.lifts.lift_all(self.directory)
            try:
                self.watch = TreeWatch(self.directory)
            except OSError:
                self.watch = None  # no inotify here: every pull walks the tree
            if self.watch is not None and self.watch.over:
                self.unwatched = True
                self.unwatch()
        self.armed_ns = time.time_ns()
        if self.unwatched and not self.walk_times:  # (a fresh mirror, a reopen's: no walk yet)
            self.walk_times = dir_times(self.directory, self.state)

    def recent_dirs(self, walked: dict[str, int], since: int) -> set[str]:
        """The directories of a walk (``walked``) whose ctime moved since ``since`` (the watch's arming):
        a watched tree walked with no baseline of times (its watch broke: a move while it added a new
        directory, frequent under load) tells which times to send by them; a ctime cannot be forged.
        Before, s67, such a walk sent no directory's time alone (``cd w && mkdir n && mv d n/d && mv n
        d`` left ``w`` at its older time in the store, now and then)."""
        base, recent = os.fspath(self.directory) + "/", set()
        for rel in walked:
            try:
                if os.lstat(base + rel if rel else self.directory).st_ctime_ns >= since - CTIME_SLACK:
                    recent.add(rel)
            except OSError:
                continue
        return recent

    def force(self, rel: str) -> int:
        """Have the next pull take the file ``rel`` as changed (1; 0 when the state has no such file):
        a write through a shared mapping moves no time and raises no event (``_mapped``). Its entry
        in the state says "unknown" (an mtime of -1) until that pull adopts what it read."""
        entry = self.state.get(rel)
        if entry is None or entry[KIND] != "f":
            return 0
        self.state[rel] = (*entry[:MTIME_NS], -1, *entry[CTIME_NS:])
        self.forced.add(rel)
        return 1

    def touched(self) -> set[str] | None:
        """What the watch saw since the last look (None: only a walk can tell), the forced files too."""
        touched = self.watch.drain() if self.watch is not None else None
        if self.watch is not None and self.watch.shed:
            self.shed_until = time.monotonic() + SHED_FOR
        forced, self.forced = self.forced, set()
        return touched | forced if touched is not None else None

    def quiet(self, paced: bool = False) -> bool:
        """True when the watch saw no change since it was armed and no look at every file is due (so
        :meth:`collect` is trivial). Without a watch, a paced look (a live sandbox's tick) is quiet
        until a walk is due again: a walk at most a tenth of the time (200,000 directories walked
        every 100 ms held a CPU)."""
        if self.forced:
            return False
        if self.watch is None:
            return paced and time.monotonic() < self.walk_next
        return self.watch.pending() == 0 and not self.look_due(paced)

    def moved_times(
        self, plan: PullPlan, walked: dict[str, int], named: set[str] | None = None, since: int | None = None
    ) -> None:
        """A walk's ``plan`` (no watch: no event names a directory whose entry did not change) takes the
        time of each directory whose mtime moved since the last walk (``walk_times``): a run's
        ``touch d``, ``tar -x`` or ``rsync -a`` over it, a name made and removed in it. Before (s66),
        a tree past ``MAX_DIRS`` lost them: the store and a reopen kept the older time. The baseline
        the pull moved on from is kept until it is stored (``pull_stored``, ``pull_unsent``).
        ``named``: a watched tree walked for moves its state cannot follow (``mkdir n && mv d n/d && mv
        n d``) has no such baseline: the directories its events named (at any name they had, and their
        parents) take their time, as do the moves' parents (``rename_parents``). Before, s67, a watched
        tree walked so sent none: the directory around ``d`` kept its older time in the store. ``since``:
        no baseline and no events (a broken watch): those whose ctime moved since (``recent_dirs``)."""
        if named is None and since is not None:
            named = self.recent_dirs(walked, since)
        extra = {p for r in named for p in (r, r.rpartition("/")[0])} if named else set()
        before, self.walk_times = self.walk_times, walked
        if self.walk_undo is None:  # (else an earlier plan's pull not stored yet: what came before it)
            self.walk_undo = before
        made = {d.path for d in plan.dirs}
        room = self.room()
        for rel, ns in walked.items():
            if (
                rel
                and (before.get(rel, ns) != ns or rel in extra)
                and is_utf8(rel)
                and not self.too_long(rel, room)
            ):
                path = self.workspace_path(rel)
                if path not in made and path not in plan.dir_times and path not in plan.unsyncable:
                    plan.time_dir(path, ns)

    def pull_stored(self) -> None:
        """The pull is stored (or deferred: ``_settle_deferred``): what its plan took as sent stays so."""
        self.root_time.undo = None
        self.walk_undo = None

    def pull_unsent(self) -> None:
        """The pull failed (a full disk, the quota, the owner's commit raising, a
        cancelled tick): the next one sends again the top's time and mode (``RootTime.unsent``) and,
        unwatched, the times of the directories this one carried (its walk compares with the baseline
        before it). Before (s66), the baseline had moved on with the failed plan: a live sandbox's
        ``touch -d`` of an existing directory in a tree past ``MAX_DIRS`` stayed in the sandbox only."""
        self.root_time.unsent()
        if self.walk_undo is not None:
            self.walk_times, self.walk_undo = self.walk_undo, None
