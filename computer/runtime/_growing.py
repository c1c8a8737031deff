"""``Growing``: a large file a program keeps writing is pulled by a live sandbox's ticks at growing
intervals, not at every tick.

A pull reads a large file whole (its chunks fingerprinted, ``_mirror_pull``): a file written for a long
time (a download, ``dd``, a log) was read again at every tick (~100 ms), quadratic work (a 2 GiB
``dd`` took 56 s in a live sandbox, 24 s in a sandbox per call) on the threads every workspace of the
process shares.

Decision (s64): a file of at least ``BIG_FILE`` bytes that a tick's pull (``paced``) found changed at
each of its last ``STREAK`` ticks is left out of the ticks' pulls (the state keeps its last pulled
entry, the next pull looks at it again: ``Mirror.forced``) until a wait has passed since it was last
pulled: ``FIRST_WAIT`` (0.2 s), doubling at each pull of it while it keeps changing, up to
``MAX_WAIT`` (1 s), and at least ``SHARE`` (9) times what that pull took from its plan to its settle
(reading, hashing and committing: the ticks spend at most a tenth of the time on it, the rule of the
other paced looks, ``look_again`` and walks). With a fixed wait alone the work stays quadratic in the
time a file grows (a 20 GiB download over 10 minutes re-read every second: terabytes read). It is pulled at once by a tick that finds it as the last tick saw it (it went
quiet), and by every pull that is not a tick's (a run's start and end, a kill, the sandbox's end): a
run's ``pulled`` and its final content are as before. A poller in the workspace sees such a file at
most ``MAX_WAIT`` (or ten times its pull, for a file of gigabytes) plus a tick behind the program, as
a whole version the mirror held at one pull (never
a mix). Small files, and a large file changed at fewer than ``STREAK`` ticks in a row, are pulled at
every tick as before. A file deferred this way that the workspace changes meanwhile keeps the
workspace's version (the rule of a path both sides changed within one interval, over a longer one).

Decision (s65), a workspace change to a deferred file: a tick whose push writes, removes or renames
a file its pull left out (or a directory above or below it, or pushes the whole tree) pulls every
file whole first (``touched_by``, ``whole``: a second pull in the same frozen sync), so the pull's conflict rules see the program's latest version as
at every tick: a write or a removal keeps the workspace's and the run's ``skipped`` says so, and a
rename follows the program's open file to its new name. Before, the push met a state older than the
file: a write left ``skipped`` empty, and a rename could not follow the file (``Mirror.move`` found
it changed), dropped it and fetched the workspace's older copy: the program went on writing into an
unlinked file, 97 of its 455 blocks lost with no word.

Hard links: a file with several names (``ln big.log big.link``) is never spaced out (``defer`` leaves
out what ``PullPlan.same`` and ``PullPlan.links`` name): its names are pulled together at every tick,
as before, so each name holds the same content at every pull. Spacing them out would need every name
held back together (one left at its old entry would be read as changed against the other). Rare
enough (a log with two names) to keep the tick's cost.

Not chosen: sending only the appended tail. A program may rewrite bytes before the old size (``pwrite``,
a database, a tool seeking back to patch a header): only reading them proves they did not change.
"""

from __future__ import annotations

import time

from ._backend import BIG_FILE, SyncPush
from ._entry import SIZE
from ._mirror_base import Entry, PullPlan, is_below

__all__ = ["FIRST_WAIT", "MAX_WAIT", "SHARE", "STREAK", "Growing", "touched_by"]

STREAK = 2  # ticks in a row a large file changed at before its pulls are spaced out
FIRST_WAIT = 0.2  # seconds between its pulls at first, doubling while it keeps changing
MAX_WAIT = 1.0  # ... up to this
SHARE = 9.0  # ... and at least this many times what its last pull took
clock = time.monotonic  # (tests drive their own)


class Growing:
    """What a mirror knows of its large files that keep changing (one per mirror)."""

    def __init__(self) -> None:
        self.streak: dict[str, int] = {}  # ticks in a row the file was found changed
        self.seen: dict[str, Entry] = {}  # its entry as the last tick found it
        self.due: dict[str, float] = {}  # monotonic time of its next pull
        self.wait: dict[str, float] = {}  # the wait after its next pull
        self.deferred = 0  # files left out of a tick's pull, in all (for tests and benchmarks)
        self.pulling: list[str] = []  # files of the pull in progress whose pulls are spaced out
        self.started = 0.0  # when that pull's plan was made (monotonic)
        self.whole = False  # the next pull defers nothing (a push changes a deferred file: ``touched_by``)
        self.kept: set[str] = set()  # the files the last pull left out

    def defer(self, plan: PullPlan, now: dict[str, Entry], state: dict[str, Entry], paced: bool) -> set[str]:
        """Take out of ``plan`` (and ``now``) the large files not due at this pull; their paths (the
        caller's next pull looks at them again)."""
        self.pulling, self.kept = [], set()
        if self.whole:  # every file now: the workspace changes one of those spaced out
            paced = self.whole = False
        changed = {rel: entry for rel, entry in plan.files if entry[SIZE] >= BIG_FILE}
        for rel in [rel for rel in self.streak if rel not in changed]:  # quiet, gone or pulled whole
            self._forget(rel)
        if not changed:
            return set()
        at = self.started = clock()
        firsts = {first for _, first in plan.links}
        kept: set[str] = set()
        for rel, entry in changed.items():
            quiet = self.seen.get(rel) == entry  # as the last tick saw it: it stopped changing
            self.seen[rel] = entry
            streak = self.streak[rel] = 1 if quiet else self.streak.get(rel, 0) + 1
            if paced and not quiet and streak > STREAK and at < self.due.get(rel, 0.0):
                if rel not in plan.same and not any(path.endswith("/" + rel) for path in firsts):
                    kept.add(rel)
                    continue
            if streak >= STREAK:  # pulled now: the next pull of it waits longer while it keeps changing
                wait = self.wait.get(rel, FIRST_WAIT)
                self.due[rel], self.wait[rel] = at + wait, min(MAX_WAIT, 2 * wait)
                self.pulling.append(rel)
        if kept:
            plan.files = [(rel, entry) for rel, entry in plan.files if rel not in kept]
            for rel in kept:
                old = state.get(rel)
                if old is None:
                    now.pop(rel, None)
                else:
                    now[rel] = old
            self.deferred += len(kept)
        self.kept = kept
        return kept

    def settled(self) -> None:
        """The pull :meth:`defer` planned is settled: the files it took wait at least ``SHARE`` times
        what it took before their next pull."""
        if self.pulling:
            at = clock()
            spent = at - self.started
            for rel in self.pulling:
                if rel in self.due:
                    self.due[rel] = max(self.due[rel], at + SHARE * spent)
            self.pulling = []

    def _forget(self, rel: str) -> None:
        for table in (self.streak, self.seen, self.due, self.wait):
            table.pop(rel, None)


def touched_by(page: SyncPush, paths: list[str]) -> bool:
    """Whether a push page changes one of ``paths`` (workspace paths: the files the last pull left
    out), a path above or below one, or the whole tree (a full push, or one of several pages: only the
    first is known here)."""
    if not paths:
        return False
    if page.full or page.more:
        return True
    named = [
        *(f.path for f in page.files),
        *(d.path for d in page.dirs),
        *(s.path for s in page.symlinks),
        *page.deleted,
        *(p for move in page.moves for p in move),
    ]
    return any(is_below(a, b) or is_below(b, a) for a in named for b in paths)
