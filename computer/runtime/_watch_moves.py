"""A directory moved inside a watched tree (``_watch``): a program's ``mv d e`` keeps the watch.

inotify's watches follow the inode: after ``mv d e`` every watch at and below ``d`` still holds, only
the paths the watch recorded for them (``_Held.dirs``) are stale. The kernel reports the move as an
``IN_MOVED_FROM`` in the old parent and an ``IN_MOVED_TO`` in the new one with one cookie (then an
``IN_MOVE_SELF`` on ``d``). :class:`Halves` pairs the two within one read of the shared queue (both in
the same watch), re-keys the watch's paths at and below ``d`` (a new ``dirs`` when a drain holds
the one at hand: it keeps the map its events were named by) and what its new directories held
(``walked``, ``stats``), and queues a marker event (:data:`PAIRED`, ``old\\0new``) for ``drain``,
which lists the pairs in order (``TreeWatch.moves``) for the pull to re-key its state by
(``_pull_moves.watched_renames``) instead of walking the whole tree (before, s66: every directory
move broke the watch, and the pull after it walked the whole tree and watched it anew).

A half whose pair is not in the same read waits for the next read of the shared queue (``carried``:
a read, 64 KiB or the event loop's quick look of 4 KiB, may end between the two; before, s67, such a
split broke the watch and the pull walked the whole tree), and an owner with such a half cannot tell
its events cheaply (:meth:`Halves.holds`: a worker thread reads the queue). The watch breaks as before
(the pull walks the tree and watches it anew) on a half without its pair in the read after it or by the
time the queue is read empty (moved in from outside the tree or out of it, to another mirror), a directory not watched yet (made and moved before its watch was added), a move onto a
directory still watched there (``mv --exchange``, a move over an empty directory), one with new
directories below it not watched yet, and a move read while, or after, the watch added directories
until a read finds the queue empty (:meth:`Halves.settle`): a listing may have raced with the move and
named what it found under the old name, or missed what moved. A queue overflow breaks every watch.

Bounded: a pairing looks at every path the watch holds (its directories, what its new ones held, those
made in the same read or left to adopt), on the process's one reader thread with the shared lock held.
A watch's pairings between two drains look at ``REKEY_WORK`` paths at most; past it the watch gives
its watches back as one flooding the queue does (``Halves.spent``, given back by the next full read:
``_watch._Inotify.dropped``; the mirror walks for ``SHED_FOR``). Before (s67), a
program's ``mv a b; mv b a`` loop in a tree of 20,000 directories (10,000 renames, 0.3 s of the
program's) held the lock every mirror's sync takes 5.6 s, and the queue overflowed meanwhile: every
other workspace's watch broke and walked its tree (``tests/security/test_attacks10``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Collection, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._watch_held import _Held

__all__ = ["PAIRED", "REKEY_WORK", "Halves", "adding", "pairs_of", "settle"]

# A bit no kernel event carries (it is ``IN_MASK_CREATE``'s, an ``inotify_add_watch`` flag): the mask
# of the marker event a pairing queues (watch descriptor: the moved directory's; name: ``old\0new``).
PAIRED = 0x10000000

# Paths one watch's pairings look at between two drains, at most (~10-30 ms of the reader thread).
REKEY_WORK = 1 << 16

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


class Halves:
    """The ``IN_MOVED_FROM`` halves of directory moves one read brought (``_Inotify._dispatch``)."""

    __slots__ = ("carried", "froms", "owners", "spent")

    def __init__(self, owners: dict[int, _Held]) -> None:
        self.owners = owners
        self.froms: dict[int, tuple[_Held, str | None]] = {}  # cookie -> (watch, old relative path)
        self.carried: dict[int, tuple[_Held, str | None]] = {}  # those the previous read left
        self.spent: list[_Held] = []  # watches past ``REKEY_WORK``: to give their watches back

    def moved_from(self, owner: _Held, cookie: int, rel: str | None) -> None:
        self.froms[cookie] = (owner, rel)

    def moved_to(self, owner: _Held, cookie: int, rel: str | None, fresh: Collection[str]) -> bool:
        """Pair the move ending at ``rel``; whether the watch's paths were re-keyed (else it broke, or
        the pair was one it cannot vouch for)."""
        half = self.froms.pop(cookie, None) or self.carried.pop(cookie, None)
        owner_from: _Held | None = half[0] if half is not None else None
        old = half[1] if half is not None else None
        if owner_from is not owner or old is None or rel is None:
            owner.broken = True  # moved in from outside the tree (or another watch's)
            if owner_from is not None:
                owner_from.broken = True
            return False
        owner.rekeyed += (
            len(owner.dirs) + len(owner.walked) + len(owner.stats) + len(fresh) + len(owner.unadopted)
        )
        if owner.rekeyed > REKEY_WORK:  # a rename storm: shed, as a flood of the queue (see the module)
            owner.broken = True
            if owner not in self.spent:  # (once, however many of its moves the read still brings)
                self.spent.append(owner)
            return False
        if owner.adopting or owner.adopted or _any_at(old, fresh) or _any_at(old, owner.unadopted):
            owner.broken = True
            return False
        # A new map only when a drain holds the one at hand (``lent``, by ``take``): one copy a drain.
        dirs, top, owners = dict(owner.dirs) if owner.lent else owner.dirs, None, self.owners
        owner.lent = False
        for wd, path in owner.dirs.items():  # (values only change: safe in place)
            if owners.get(wd) is not owner:
                continue  # gone (its events keep the old path)
            if _at(path, rel):  # a watched directory there still (an exchange, a move over one): unsure
                top = None
                break
            if _at(path, old):
                top = wd if path == old else top
                dirs[wd] = rel + path[len(old) :]
        if top is None:  # not watched yet
            owner.broken = True
            return False
        owner.dirs = dirs
        for path in [p for p in owner.walked if _at(p, old)]:  # (in place: an adding may hold them)
            owner.walked.discard(path)
            owner.walked.add(rel + path[len(old) :])
        for path in [p for p in owner.stats if _at(p, old)]:
            owner.stats[rel + path[len(old) :]] = owner.stats.pop(path)
        owner.events.append((top, PAIRED, f"{old}\0{rel}".encode(_FS_ENCODING, _FS_ERRORS)))
        return True

    def turn(self) -> None:
        """A read is over: a half the read before left unpaired breaks its watch (moved out of the
        tree); one this read left waits for the next read (a read may end between the two halves)."""
        for owner, _ in self.carried.values():
            owner.broken = True
        self.carried, self.froms = self.froms, {}

    def holds(self, owner: _Held) -> bool:
        """Whether a half of ``owner``'s waits for its pair (its events cannot be told yet)."""
        return any(held is owner for held, _ in self.carried.values())

    def end(self) -> None:
        """The queue is read empty: a half left unpaired (moved out of the tree) breaks its watch."""
        self.turn()
        self.turn()


def settle(waiting: set[_Held]) -> None:
    """A read found the queue empty: every move that could have raced with a finished adding of
    directories is read (and broke its watch); those watches pair moves again."""
    for held in list(waiting):
        if not held.adopting:
            held.adopted = False
            waiting.discard(held)


def pairs_of(name: bytes) -> tuple[str, str]:
    """The ``(old, new)`` relative paths of a :data:`PAIRED` marker's name."""
    old, _, new = name.decode(_FS_ENCODING, _FS_ERRORS).partition("\0")
    return old, new


def _at(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _any_at(top: str, paths: Iterable[str]) -> bool:
    return any(_at(p, top) for p in paths)


@contextlib.contextmanager
def adding(lock: threading.RLock, held: _Held, waiting: set[_Held]) -> Iterator[None]:
    """While (and after: :func:`settle`) directories are added to ``held``, it pairs no move."""
    with lock:
        held.adopting += 1
    try:
        yield
    finally:
        with lock:
            held.adopting -= 1
            held.adopted = True
            waiting.add(held)
