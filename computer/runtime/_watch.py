"""``TreeWatch``: inotify over a mirror directory, so a pull looks only at what a run touched.

A run's writes go through a bind mount of the mirror, which is the same inodes: the host's inotify sees
them. Watches are per directory (one per mirror directory, not per file). Anything the watch cannot
vouch for (queue overflow, a directory moved in or out, no watches left, no inotify) makes :meth:`drain`
return ``None`` and the caller walks the whole tree instead, so a missed event can cost time, never
data. A directory moved within the tree keeps the watch (``_watch_moves``: ``moves``).

Every watch of a process shares one inotify instance (:class:`_Inotify`): the kernel allows 128 per
user (``fs.inotify.max_user_instances``, over every process and container of the uid); one per mirror
ran out at 64 workspaces with two idle mirrors each (then every pull walked its whole tree).
"""

from __future__ import annotations

import array
import collections
import ctypes
import errno
import fcntl
import logging
import os
import select
import sys
import termios
import threading
import time
import weakref
from pathlib import Path

from ._dir_size import empty_size
from ._inotify_abi import (
    BORN,
    EVENT,
    GONE,
    IN_CLOEXEC,
    IN_DELETE,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_NONBLOCK,
    IN_Q_OVERFLOW,
    MASK,
    NEW_DIR,
    RARE,
    inotify_limit,
    load_libc,
)
from ._watch_held import Event, _Held
from ._watch_moves import PAIRED, Halves, adding, pairs_of, settle
from ._watch_release import give_back
from ._watch_shed import flooding

__all__ = ["TreeWatch"]

log = logging.getLogger(__name__)

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
# Events a watch holds undrained at most; past that it gives up (a full walk) rather than grow.
MAX_HELD = 200_000
# Seconds the reader thread lets a burst of events gather (after its first) before it reads them.
READ_AHEAD = 0.005
# Bytes of the shared queue a cheap look (``pending``) reads at most.
QUICK_READ = 4096
# Directories added to the shared instance per hold of its lock.
BATCH = 64


# Watches are counted per user over the host (``max_user_watches``: 200,000 directories took every
# watch of uid 0). A watch holds at most ``MAX_DIRS`` directories and the process ``MAX_WATCHES``; a
# tree past that is walked instead (a live sandbox's ticks: at most a tenth of the time).
MAX_WATCHES = inotify_limit("max_user_watches", 8192) // 2  # (8,192: the kernel's old default)
MAX_DIRS = max(1024, MAX_WATCHES // 2)
QUEUE_EVENTS = inotify_limit("max_queued_events", 16384)  # the shared instance's queue, in events


_libc = load_libc()


class _Inotify:
    """The process's one inotify instance; its events are dispatched to the watch owning their wd.

    Any caller's read moves every queued event to its owner, so a watch drained rarely does not hold
    up the others. A reader thread does so as events come (a burst's first at once, then what gathers
    in ``READ_AHEAD``: a directory made is watched while the run goes on, one read per burst after):
    the kernel's queue (``max_queued_events``, 16,384 here) is shared by every mirror of the process,
    and a run writing tens of thousands of files would otherwise overflow it for all of them (each then
    walks its tree) and for itself. The lock (re-entrant) covers the descriptor table and the reads
    (pulls run in worker threads).
    """

    def __init__(self) -> None:
        assert _libc is not None
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1 failed: {os.strerror(code)}")
        self.fd = fd
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.owners: dict[int, _Held] = {}
        self.dropped: collections.deque[_Held] = collections.deque()
        self.unadopted: set[_Held] = set()  # owners with directories left to adopt (``pump``)
        self.settling: set[_Held] = set()  # owners that added directories since the queue was last empty
        self.halves = Halves(self.owners)  # moves waiting for their pairs (``_watch_moves``)
        threading.Thread(target=self._read_ahead, name="computer-inotify", daemon=True).start()

    def _read_ahead(self) -> None:
        """Keep the kernel's queue drained (runs for the life of the process)."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while True:
            try:
                if not poller.poll():
                    continue
                self.pump()  # a burst's first event at once (see the class), the rest after a wait
                time.sleep(READ_AHEAD)
            except Exception:  # never let the thread die: callers' own reads still work
                log.exception("inotify reader")
                time.sleep(1)

    def add(self, held: _Held, batch: list[tuple[str, str]]) -> list[int | None]:
        """Watch each directory of ``batch`` (relative path, path) for ``held``: their wds, None where
        a path is gone already (or where ``held`` broke: out of watches, or the directory under
        another watch)."""
        assert _libc is not None
        add_watch, fd, owners, dirs, own = _libc.inotify_add_watch, self.fd, self.owners, held.dirs, held.wds
        wds: list[int | None] = []
        with self.lock:  # held from add_watch to the owner's entry: the wd's first events are its own
            if self.dropped:
                self._forget_dropped()
            if held.over or len(batch) > min(MAX_DIRS - len(own), MAX_WATCHES - len(owners)):
                if not held.over:  # its watches go back at once: a tree this big is walked instead
                    self._forget(held)
                    held.broken = held.over = True
                return [None] * len(batch)
            for rel, path in batch:
                wd: int = add_watch(fd, path.encode(_FS_ENCODING, _FS_ERRORS), MASK)
                if wd < 0:
                    code = ctypes.get_errno()
                    if code in (errno.ENOSPC, errno.ENOMEM):
                        # The user's watches are spent (``max_user_watches``, over every process of
                        # the uid): as past ``MAX_WATCHES``, its watches go back and the tree is
                        # walked, paced. Before, every tick of a live sandbox armed a new watch, was
                        # refused again and walked the whole tree: 9,000 files held 25 % of a core.
                        self._forget(held)
                        held.broken = held.over = True
                        return [None] * len(batch)
                    if code not in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):  # gone, or not synced
                        held.broken = True
                    wds.append(None)
                    continue
                if owners.setdefault(wd, held) is not held:
                    # The same directory under another watch: only if a mirror is inside another.
                    held.broken = True
                    wds.append(None)
                    continue
                own.add(wd)
                dirs[wd] = rel
                wds.append(wd)
        return wds

    def adopt(self, held: _Held, rels: list[str], touched: set[str] | None) -> None:
        """Watch each of the directories ``rels`` of ``held`` and every directory below; add every
        entry below them to ``touched`` (None: the watch's first walk).

        Directories are added in batches (one lock hold each, short enough not to stall a thread
        waiting for it). Paths are plain strings (``pathlib`` cost 30 µs per directory of a
        1,000-directory tree).

        A new directory (``touched`` given) is ``lstat``-ed once watched, and kept in ``held.stats``
        for the pull's plan (which would ``lstat`` it anyway). Where the size of a directory tells
        whether it is empty (see :func:`~._dir_size.empty_size`), one of the empty size is not listed: an entry
        made before the watch was added would show in that size, one made after is an event. The
        1,000 empty leaves of ``mkdir -p`` of a 10x10x10 tree skip 1,000 ``scandir`` calls (~12 µs
        each here; the ``lstat`` moved from the plan costs ~4).
        """
        empty = held.empty if touched is not None else None
        stats = held.stats
        root = held.root
        lstat = os.lstat
        stack = [(rel, f"{root}/{rel}" if rel else root) for rel in rels]
        with adding(self.lock, held, self.settling):  # (``_watch_moves``)
            while stack:
                batch = stack[-BATCH:]
                # not ``stack = stack[:-BATCH]``: a copy per batch, quadratic in a big tree
                del stack[-BATCH:]
                wds = self.add(held, batch)
                for (current, path), wd in zip(batch, wds, strict=True):
                    if wd is None:
                        continue
                    if touched is not None:
                        try:
                            st = lstat(path)
                        except OSError:
                            stats.pop(current, None)
                            continue
                        stats[current] = st
                        if st.st_size == empty:
                            continue
                    try:
                        with os.scandir(path) as it:
                            entries = list(it)
                    except OSError:
                        continue
                    for entry in entries:
                        child = f"{current}/{entry.name}" if current else entry.name
                        if touched is not None:
                            touched.add(child)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((child, entry.path))

    def release(self, held: _Held) -> None:
        with self.lock:
            self._forget(held)

    def drop(self, held: _Held) -> None:
        """Release ``held`` at the next full read or adding: for a finalizer, which the garbage
        collector may run in a thread that holds the lock already."""
        self.dropped.append(held)

    def _forget(self, held: _Held) -> None:
        assert _libc is not None
        wds = [wd for wd in held.wds if self.owners.get(wd) is held]
        for wd in wds:
            del self.owners[wd]
        held.wds.clear()
        held.events.clear()
        held.dirs.clear()
        held.walked.clear()
        held.stats.clear()
        held.unadopted.clear()
        self.unadopted.discard(held)
        give_back(self, wds, QUEUE_EVENTS, _libc.inotify_rm_watch)  # (slices: ``_watch_release``)

    def _forget_dropped(self) -> None:
        while self.dropped:
            self._forget(self.dropped.popleft())

    def pump(self, size: int = 1 << 16, reads: int | None = None) -> None:
        """Move queued events to their owners: all of them, or what ``reads`` reads of ``size`` bytes
        bring (whole events only: the kernel never splits one). A full read (``reads`` None) first
        adopts the directories a limited one left (``_Held.unadopted``); a limited read, the event
        loop's cheap look, leaves those it finds to the next full one."""
        with self.lock:
            if self.dropped and reads is None:  # (not a cheap look's, on the loop: 20,000 take ~0.1 s)
                self._forget_dropped()
            if reads is None and self.unadopted:
                waiting, self.unadopted = self.unadopted, set()
                for owner in waiting:
                    rels, owner.unadopted = owner.unadopted, []
                    self._new_dirs(owner, rels)
            while reads is None or reads > 0:
                if reads is not None:
                    reads -= 1
                try:
                    data = os.read(self.fd, size)
                except BlockingIOError:
                    self.halves.end()  # (``_watch_moves``)
                    settle(self.settling)
                    return
                except OSError:
                    data = b""
                if not data:  # cannot read: nobody can vouch for anything now
                    for held in self.owners.values():
                        held.broken = True
                    return
                # Directories this read found made, per watch: adopted together after the read's
                # events are dispatched (one ``adopt`` per read, not per directory: ~3 µs each of the
                # 1,000 leaves of ``mkdir -p``). No event of this read comes from one of them (not yet
                # watched); a later one naming one (a chmod, a removal) drops its lstat in ``drain``.
                fresh: dict[_Held, list[str]] = {}
                self._dispatch(data, fresh)
                if reads is None and self.dropped:  # (a rename storm's watch, shed by ``_dispatch``)
                    self._forget_dropped()
                if reads is None and len(data) > size - 4096:  # a full read: more waiting
                    self._shed(data)
                for owner, rels in fresh.items():
                    if reads is None:
                        self._new_dirs(owner, rels)
                    else:
                        owner.unadopted += rels
                        self.unadopted.add(owner)

    def _shed(self, data: bytes) -> None:
        """Near an overflow (it breaks every watch), the flooding one gives its back (``_watch_shed``)."""
        hog = flooding(data, self.owners, self._queued(), QUEUE_EVENTS)
        if hog is not None:
            self._forget(hog)
            hog.broken = hog.over = hog.shed = True

    def _dispatch(self, data: bytes, fresh: dict[_Held, list[str]]) -> None:
        """Move the events of one read to their owners, and the directories they made to ``fresh``
        (with the lock held). Events come in runs of one wd (``mkdir -p`` makes ten leaves in a row
        in each directory): its owner and prefix are looked up once a run (1,000: 0.77 ms, was 1.1)."""
        owners, unpack, head, offset = self.owners, EVENT.unpack_from, EVENT.size, 0
        halves = self.halves  # a directory's move: its two events paired (``_watch_moves``)
        last, owner, events, prefix, made = -1, None, [], None, None
        while offset + head <= len(data):
            wd, mask, cookie, length = unpack(data, offset)
            start, offset = offset + head, offset + head + length
            if wd != last or mask & (IN_Q_OVERFLOW | IN_IGNORED):
                if mask & IN_Q_OVERFLOW:  # the shared queue lost events: of anyone's
                    for held in owners.values():
                        held.broken = True
                    continue
                owner, last = owners.get(wd), wd
                if owner is None:
                    last = -1
                    continue  # a watch released already
                if mask & IN_IGNORED:  # the kernel dropped the watch (its directory is gone)
                    del owners[wd]
                    owner.wds.discard(wd)
                    last = -1
                parent = owner.dirs.get(wd)
                events, made, prefix = owner.events, None, None if parent is None else parent and f"{parent}/"
            assert owner is not None
            if owner.broken:
                continue
            if len(events) >= MAX_HELD:
                owner.broken = True
                events.clear()
                continue
            name = data[start:offset].rstrip(b"\0")
            events.append((wd, mask, name))
            if mask & NEW_DIR == NEW_DIR and name and prefix is not None:
                if made is None:
                    made = fresh.setdefault(owner, [])
                made.append(prefix + name.decode(_FS_ENCODING, _FS_ERRORS))
            elif mask & IN_ISDIR and mask & (IN_MOVED_FROM | IN_MOVED_TO):
                rel = None if prefix is None else prefix + name.decode(_FS_ENCODING, _FS_ERRORS)
                if mask & IN_MOVED_FROM:
                    halves.moved_from(owner, cookie, rel)
                elif halves.moved_to(owner, cookie, rel, fresh.get(owner, ())):
                    last = -1  # the paths are re-keyed
        halves.turn()
        for spent in halves.spent:  # a rename storm (``_watch_moves.REKEY_WORK``): as a flood, given
            spent.broken = spent.over = spent.shed = True  # back by the next full read (``dropped``)
            self.dropped.append(spent)
        halves.spent.clear()

    def _new_dirs(self, held: _Held, rels: list[str]) -> None:
        """Directories made below ``held``'s tree: watched (and what they hold found) as their events
        are read, by whichever thread reads them: mostly the reader thread, while the run that makes
        them is still going (``mkdir -p`` of 1,110 directories: ~20 ms of watches, lstat and
        listings off the run's path, on the machine's other core). A directory moved in from
        outside the tree breaks the watch anyway."""
        if not held.broken:
            self.adopt(held, rels, held.walked)

    def take(self, held: _Held) -> tuple[list[Event], set[str], dict[str, os.stat_result], dict[int, str]]:
        """``held``'s events since the last take, with what its new directories held and their
        lstat (see :meth:`adopt`), and its directories' paths (moved ones re-keyed: ``_watch_moves``)."""
        self.pump()
        with self.lock:
            taken = held.events, held.walked, held.stats, held.dirs
            held.lent, held.rekeyed = True, 0
            held.events, held.walked, held.stats = [], set(), {}
            return taken

    def count(self, held: _Held) -> int:
        """``held``'s events, or -1 when that cannot be told cheaply.

        It runs on the event loop (is the run's pull trivial?), so it reads one small chunk of the
        shared queue, never the up to 16,384 events another mirror's busy run may have left there (one
        read parses ~170 events, ~0.1 ms); with more queued and none of ``held``'s among them it says
        -1, and the pull goes to a worker thread, which reads them all. It never waits for the lock
        (another thread may hold it for a whole tree's watches) nor watches new directories itself
        (``_Held.unadopted``): either way it says -1, and the thread does that work.
        """
        if not self.lock.acquire(blocking=False):
            return -1  # another thread reads (and watches what a run made): never wait on the loop
        try:
            self.pump(QUICK_READ, reads=1)
            if held.broken or held.unadopted or self.halves.holds(held):
                return -1
            if held.events:
                return len(held.events)
            return -1 if self._queued() else 0
        finally:
            self.lock.release()

    def _queued(self) -> int:
        size = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, termios.FIONREAD, size, True)
        except OSError:
            return 1
        return size[0]


_shared: _Inotify | None = None
_shared_lock = threading.Lock()


def _instance() -> _Inotify:
    """The shared instance, made on first use (again in a forked child: the parent's would steal)."""
    global _shared
    if _libc is None:
        raise OSError(errno.ENOSYS, "inotify is not available")
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = _Inotify()
        return _shared


class TreeWatch:
    """Watches every directory below ``root``; :meth:`drain` says which relative paths were touched."""

    def __init__(self, root: Path) -> None:
        self._inotify = _instance()
        self.root = root
        self._root = os.fspath(root)
        try:
            empty = empty_size(os.path.dirname(self._root), os.stat(self._root).st_dev)
        except OSError:
            empty = None
        self._held = _Held(self._root, empty)
        # A mirror dropped without close() (e.g. by a pool evicting it) must not leak its watches.
        self._close = weakref.finalize(self, self._inotify.drop, self._held)
        # Paths the last drain's last event of each deleted (known gone without an lstat; moved away: lstat-ed).
        self.gone: set[str] = set()
        # Names where a file made in the last drain went again (a hard link? ``ln f t; echo x >> t; mv u t``).
        self.passed: set[str] = set()
        # The lstat of each new directory of the last drain that no later event named (plan's, early).
        self.stats: dict[str, os.stat_result] = {}
        self.moves: list[tuple[str, str]] = []  # directories the last drain's events moved, in order
        self._inotify.adopt(self._held, [""], None)
        self._inotify.pump()  # (a move during the adding breaks it, one after it is paired: ``_watch_moves``)

    def drain(self) -> set[str] | None:
        """Relative paths touched since the last drain, or ``None`` when only a full walk can tell."""
        touched, gone, born, passed = set[str](), set[str](), set[str](), set[str]()  # born: made, moved to
        events, walked, stats, dirs = self._inotify.take(self._held)  # (paths as of the last event)
        self.moves, moved = [], set()  # moved: the wds of directories a paired move took
        last, prefix = -1, None  # the wd whose directory prefix is at hand (events come in runs)
        for wd, mask, raw in events:
            if mask & (RARE | PAIRED):
                if mask & IN_IGNORED:
                    dirs.pop(wd, None)
                    self._held.dirs.pop(wd, None)  # (another map when a move re-keyed it since the take)
                    last = -1
                    continue
                if mask & PAIRED:  # a directory moved within the tree (``_watch_moves``)
                    self.moves.append(pairs_of(raw))
                    touched.discard(self.moves[-1][0])  # (its entries are at the new name now)
                    moved.add(wd)
                    continue
                if mask & IN_MOVE_SELF and wd not in moved:
                    self._held.broken = True  # the top moved, or a move not paired: paths are stale
                    break
            if not raw:
                continue  # an event on the directory itself: its entries report their own changes
            if wd != last:
                parent = dirs.get(wd)
                last, prefix = wd, None if parent is None else parent and f"{parent}/"
            if prefix is None:
                continue
            rel = prefix + raw.decode(_FS_ENCODING, _FS_ERRORS)  # os.fsdecode, less a call
            touched.add(rel)
            if mask & IN_DELETE:  # moved away is no proof: RENAME_EXCHANGE of a, b says a -> b, b -> a
                gone.add(rel)
            else:
                gone.discard(rel)
            if mask & (GONE | BORN) and not mask & IN_ISDIR and rel in born:
                passed.add(rel)
            if mask & BORN and not mask & IN_ISDIR:
                born.add(rel)
            if stats and mask & NEW_DIR != NEW_DIR:
                # Its lstat, taken as its creation was read, is stale now (one made again: lstat-ed again).
                stats.pop(rel, None)
        if self._held.broken:
            return None
        touched |= walked
        self.stats, self.passed = stats, passed
        self.gone = gone - walked  # found in a new directory: there again (rm -r d; mkdir d; touch d/f)
        return None if self._held.broken else touched

    @property
    def over(self) -> bool:
        """The tree had more directories than a watch may hold (``MAX_DIRS``), or its events nearly
        overflowed the shared queue (``shed``): it holds none now."""
        return self._held.over

    @property
    def shed(self) -> bool:
        return self._held.shed

    def pending(self) -> int:
        """Events waiting to be drained (-1 when the watch cannot tell)."""
        return self._inotify.count(self._held)

    def close(self) -> None:
        if self._close.detach() is not None:
            self._inotify.release(self._held)
