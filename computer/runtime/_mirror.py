"""``Mirror``: a host directory mirroring a workspace subtree for the sandboxed backends.

A mirror remembers the workspace revision it reflects (``rev``) and the state of every entry it
wrote (inode, size, mtime, ctime, mode), so a push touches only what changed since, and after a run
a single directory walk tells what the program created, changed or deleted. Its layers: the shared
key and plan (``_mirror_base``), applying pushes (``_mirror_push``), finding and reading what a
program changed (``_mirror_pull``); this module puts them together with the mirror's fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ._backend import MirrorFile, SyncPush
from ._deliver import Delivery
from ._dir_times import RootTime
from ._entry import KIND, MODE
from ._growing import Growing
from ._lifts import Lifts
from ._mirror_base import Entry, PullPlan, entry_of, is_below
from ._mirror_pull import MirrorPull
from ._mirror_push import MirrorPush
from ._pull_rules import PROTECTED_BELOW
from ._uid_lease import UidLease
from ._watch import TreeWatch

__all__ = [
    "Entry",
    "Mirror",
    "PullPlan",
    "entry_of",
]


class Closeable(Protocol):
    """Something kept ready for a mirror's next run (a prepared sandbox); closed when the mirror goes."""

    def close(self) -> None: ...


@dataclass
class Mirror(MirrorPush, MirrorPull):
    """One host directory reflecting ``root`` of a workspace at ``rev``."""

    directory: Path
    root: str
    rev: int | None = None
    session: str | None = None  # the store session ``rev`` belongs to (``SyncPush.session``)
    protected: set[str] = field(default_factory=set)
    state: dict[str, Entry] = field(default_factory=dict)  # keyed by path relative to the mirror
    watch: TreeWatch | None = field(default=None, repr=False)
    # Paths kept in the mirror although the workspace does not have them (FIFOs, names that are not
    # UTF-8): a settle leaves them where they are.
    kept: set[str] = field(default_factory=set)
    # What the backend prepared for the next run on this mirror (closed with the mirror).
    standby: Closeable | None = field(default=None, repr=False)
    # A run whose pull was deferred: (its id, the state to adopt once its outcome is known).
    unsettled: tuple[str, dict[str, Entry]] | None = field(default=None, repr=False)
    # Why each protected path is kept out (from the push).
    reasons: dict[str, str] = field(default_factory=dict)
    # Files of the push being applied whose bytes come in pieces (see ``apply``), each with the
    # indexes of the chunks to fetch (None: fetch by byte ranges).
    unfilled: list[tuple[MirrorFile, list[int] | None]] = field(default_factory=list, repr=False)
    # Inodes of hard-linked files the push being applied wrote a workspace file into in place (small
    # or large, every page): another workspace file at one of their names gets a new file, never the
    # same one (a program linked two the workspace keeps apart, both names kept as conflicts).
    written_into: set[int] = field(default_factory=set, repr=False)
    # The chunk hashes of the content each large file of the mirror holds (by relative path), as last
    # synced: a push moves only the chunks that differ, a pull sends only chunks the store lacks.
    chunks: dict[str, list[str]] = field(default_factory=dict, repr=False)
    # Per large file, fast keyed fingerprints of its chunks as the last pull read them, with the chunk
    # list they belong to: the next pull hashes (SHA-256) only the chunks whose fingerprint changed.
    prints: dict[str, tuple[tuple[str, ...], list[int]]] = field(default_factory=dict, repr=False)
    # The host uid/gid that must own what the mirror writes (the sandbox's user), or None.
    owner: tuple[int, int] | None = None
    # The host uid leased for this mirror's sandboxes (``_uid_lease``): released once it is removed.
    lease: UidLease | None = field(default=None, repr=False)
    # File bytes and entries the mirror holds and when it went idle (for the process's scratch budget).
    held_bytes: int = 0
    held_entries: int = 0
    # Files the next pull takes as changed whatever their lstat says (written through a mapping).
    forced: set[str] = field(default_factory=set)
    # Files a pull could not read for a moment (``MirrorPull.RETRY``): forced into the next one.
    unread: set[str] = field(default_factory=set)
    idle_since: float = 0.0
    # Revisions after ``rev`` that the mirror's own pulls committed (a push leaves them out).
    own_revs: list[int] = field(default_factory=list)
    # Workspace paths a pull left alone and removed from the mirror: the next push sends them whole.
    refetch: set[str] = field(default_factory=set)
    # Workspace paths a live program removed whose removal the pull refused only for what the mirror
    # keeps out below them (``PROTECTED_BELOW``): left removed while the program may still be removing
    # the tree, sent whole by the next run's push (``hold``, ``restore_held``).
    held: set[str] = field(default_factory=set)
    # Inodes of files the mirror saw with several names (a hint): a run removing or replacing one name
    # changes the others' ctime without an event in their directories (``settle`` looks again).
    linked: set[int] = field(default_factory=set, repr=False)
    # Directories the push being applied sent, with the workspace's exact time (ns) of each: set last
    # (``finish_push``).
    dir_times: dict[str, int] = field(default_factory=dict, repr=False)
    # A run made and removed a name (it may have been a hard link): every file is lstat-ed again at
    # the next pull (a paced one, a live sandbox's tick, when its last took under a tenth of the time).
    look_owed: bool = False
    look_next: float = 0.0
    # Paths whose mode locks this process out (a non-root host) and which the sync lifted (``_lifts``).
    lifts: Lifts = field(default_factory=Lifts, repr=False)
    # More directories than a watch may hold: walked, not watched, until a walk finds it smaller; a
    # live sandbox's tick walks it again from ``walk_next`` on (see ``_mirror_watch``).
    unwatched: bool = False
    walk_next: float = 0.0
    shed_until: float = 0.0  # its watch was shed (its events nearly overflowed the queue): walked till then
    walk_times: dict[str, int] = field(default_factory=dict, repr=False)  # (unwatched: ``moved_times``)
    # The top directory's own time and mode (no entry of ``state``), as last synced either way
    # (``_dir_times``).
    root_time: RootTime = field(default_factory=RootTime, repr=False)
    # The inodes of the mirror's files a process of its live sandbox holds for reading only (``_mapped.
    # read_only_held``), asked once per push page that would write one in place; None: no sandbox.
    readers: Callable[[], set[int]] | None = field(default=None, repr=False)
    # The event loop that ended the run over it after the run's own had ended (``PerCallRuns.end``):
    # a pull or release from any other does nothing (that loop's bracket, should it run again).
    taken_by: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    # Set-id bits (never in the workspace, SPEC): a pull takes them off the mirror's file too, except a
    # live sandbox's tick (``keep_setid``), which leaves them to the run's end (``clear_setid``).
    keep_setid: bool = False
    setid: set[str] = field(default_factory=set, repr=False)
    # A live sandbox's delivery times (``_deliver``): a push notes its pages, retimes before it arms.
    delivery: Delivery | None = field(default=None, repr=False)
    # Large files a program keeps writing: a tick's pull takes them at growing intervals (``_growing``).
    growing: Growing = field(default_factory=Growing, repr=False)

    def apply(self, push: SyncPush, *, first: bool = True) -> int:
        self.root_time.pushing(push, first)
        written = super().apply(push, first=first)
        self.root_time.give_mode(self.directory, self.lifts)
        return written

    def finish_push(self, rev: int, refetched: Iterable[str] = ()) -> None:
        super().finish_push(rev, refetched)
        self.root_time.pushed(self.directory, self.lifts)

    def plan(self, *, paced: bool = False, cap: int | None = None) -> tuple[PullPlan, dict[str, Entry]]:
        plan, now = super().plan(paced=paced, cap=cap)
        self.forced |= self.growing.defer(plan, now, self.state, paced)  # (looked at again next time)
        self.root_time.pulled(plan, self.directory, self.root, self.lifts, self.keep_setid)
        return plan, now

    def settle(self, *args: Any, **kwargs: Any) -> None:  # (``MirrorPull.settle``'s)
        super().settle(*args, **kwargs)
        self.growing.settled()  # what the pull took spaces the next pulls of the files it spaces out

    def move(self, src: str, dst: str) -> bool:
        """``MirrorBase.move``; a file a tick's pull left out (``Growing.kept``: its entry older than
        the file, which the program wrote since) moves too, and the next pull reads it at its new name
        (``force``). Before, the move refused it as changed: the file was dropped under its program
        and the workspace's older copy fetched, the program's writes since lost with no word (s65)."""
        s, kept = self.rel(src), self.growing.kept
        stale = self.state.get(s) if s in kept else None
        if stale is not None:  # taken as it is now (the sandbox is frozen while a sync lasts)
            with contextlib.suppress(OSError):
                self.state[s] = entry_of(os.lstat(self.directory / s))
        if not super().move(src, dst):
            if stale is not None and s in self.state:
                self.state[s] = stale
            return False
        d = self.rel(dst)
        for rel in [rel for rel in kept if is_below(rel, s) or rel == s]:  # (a directory above: below it)
            kept.discard(rel)
            self.forced.discard(rel)
            self.force(d + rel[len(s) :])
            kept.add(d + rel[len(s) :])  # still left out: a second rename in the same sync moves it too
        return True

    def setid_kept(self) -> bool:
        """Whether a tick's pull left set-id bits for :meth:`clear_setid` (on the top too)."""
        return bool(self.setid) or bool((self.root_time.mode_seen or 0) & 0o6000)

    def clear_setid(self) -> None:
        """Take the set-id bits off the files and directories a tick's pull left them on (``setid``),
        with the mirror as last pulled (the sandbox frozen or dead: the caller's job).

        Decision (s62): in a live sandbox a program's ``chmod 4755 f`` holds in the mirror until the
        end of the run in progress (the sync that ends it, a run's start, the sandbox's end: the syncs
        that are not a tick's), so the run sees its own chmod throughout; before, whichever tick pulled
        ``f`` first took the bit off under it (``stat`` said 755 at a random moment). The workspace
        never holds the bits; the mirror's file is the sandbox user's (not host root, ``_users``), in a
        scratch directory only that user and this process reach, below a ``nosuid`` mount."""
        self.root_time.clear_setid(self.directory, self.lifts)
        pending, self.setid = self.setid, set()
        for rel in pending:
            entry = self.state.get(rel)
            if entry is not None and entry[KIND] in "fd" and entry[MODE] & 0o6000:
                self.state[rel] = self.strip_setid(rel, entry)

    def invalidate(self) -> None:
        """Forget what the mirror holds: the next push is a full one."""
        self.rev = None
        self.session = None
        self.unsettled = None
        self.own_revs = []
        self.refetch = set()
        self.held = set()
        self.linked = set()
        self.look_owed = False
        self.unwatch()
        self.drop_standby()

    def holdable(self, reasons: dict[str, str], now: dict[str, Entry]) -> set[str]:
        """Of a pull's refusals (``reasons``), the removals refused only because the path holds what
        the mirror never had (a path too long, too big, too many: ``protected``), which the program
        left removed (nothing of that name in ``now``) and no earlier pull asked for again."""
        return {
            path
            for path, why in reasons.items()
            if why == PROTECTED_BELOW
            and path not in self.refetch
            and path != self.root
            and is_below(path, self.root)
            and self.rel(path) not in now
        }

    def hold(self, paths: Iterable[str]) -> None:
        """Leave ``paths`` (see :meth:`holdable`; the settle put them in ``refetch``) removed in the
        mirror until :meth:`restore_held`: a live sandbox's sync that put them back under the program
        still removing the tree (``rm -rf`` of a chain above a path too long for the sandbox) failed
        it ("Directory not empty")."""
        held = set(paths) & self.refetch
        self.refetch -= held
        self.held |= held

    def restore_held(self) -> None:
        """The next push sends the paths :meth:`hold` left out, whole (a run starts, the mirror is
        taken for a new sandbox or run)."""
        if self.held:
            self.refetch |= self.held
            self.held = set()

    def take_standby(self) -> Closeable | None:
        standby, self.standby = self.standby, None
        return standby

    def drop_standby(self) -> None:
        standby = self.take_standby()
        if standby is not None:
            standby.close()
