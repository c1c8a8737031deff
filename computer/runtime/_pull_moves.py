"""A program's directory renames, sent by a pull as renames (the mirror's side and the owner's).

A program's ``mv big big2`` of a directory of 20,000 files reached the workspace as the removal of
``big`` and the whole of ``big2`` made again: 40,004 change-log rows, every file's bytes read and sent,
every file a new node (its identity lost: the workspace's hard links, the file ids a client holds), for
what the program did with one directory entry (1.3-2.3 s a call, against 3-6 ms bare). Now:

* The mirror's watch pairs a move within the tree from its events (``_watch_moves``; the pairs taken
  by :meth:`PullRenames.watched_renames`, no walk). After a walk (a directory moved in from outside
  the tree or out of it breaks the watch, ``_watch``), the mirror pairs each directory that is gone
  from the state with where its files went (:meth:`PullRenames.find_renames`): a file's inode is in the
  state (a directory's is not: its entry is its mode alone, ``_entry``), so a few files below the old
  path (``PROBES``) found at the same relative place below another path name the new one. It then
  re-keys its state, chunk lists, fingerprints and an unwatched tree's directory times to the new names
  (so the pull sends what the program changed after the rename as usual, at the new names, and nothing
  else), and the plan carries the
  pairs (``PullPlan.renames``), which ride on the pull's first page (``SyncPull.renames``).
* The owner renames each (:func:`rename_dirs`) before anything else of that page, under the conflict
  rule of any pull: when the workspace changed anything at, above or below either name since the
  mirror's revision, a protected path is there, either name is not as the mirror took it, or the page
  follows workspace renames too, it refuses them all with nothing committed (``PullResult.unrenamed``),
  and the mirror sends the pull again as before (:meth:`PullRenames.unrename`: the state put back, the
  tree walked again, no pairing), a removal and the new tree, which is always correct.

A pairing is only ever a better way to the same tree: what differs below the new name from the
re-keyed state is sent, whatever the program did. Left to the removal and the new tree: a directory
that holds no file or symlink to pair by, one whose old name is a directory again, a new name the state
has, a directory whose synced contents the workspace cannot hold (a FIFO, a socket, a name that is not
UTF-8, a path near the length limit at the new name: ``_deepest``), a path the workspace keeps out or
the mirror must fetch again, a mirror its program locked (``_lifts``), and single files (a renamed file changes its ctime, so its entry
differs anyway; a large one keeps its chunks, ``SyncPull.keep``).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import stat
from collections.abc import Generator, Sequence
from typing import Any

from ..storage.paths import real_path
from ._backend import BIG_FILE, SyncPull
from ._entry import INO, KIND, SIZE, is_dir
from ._held_links import is_utf8
from ._mirror_base import Entry, PullPlan, is_below
from ._mirror_watch import MirrorWatch
from ._protected import SYSTEM_DIR
from ._pull_pages import keys_below, path_order
from ._pull_rules import Conflicts

__all__ = [
    "PROBES",
    "PullRenames",
    "Unrenamed",
    "as_taken",
    "first_renamed",
    "rename_dirs",
    "rename_parents",
    "renames_refused",
    "translated",
]

# Entries below a gone directory a pairing looks at, at most (its files' inodes name the new place).
PROBES = 16
# Directory renames one pull sends, at most (each re-keys the state: a memmove of its sorted paths).
MAX_RENAMES = 64
# Directory moves a kept watch saw that one pull looks at, at most (``watched_renames``: past it, a walk).
MAX_MOVES = 4096


class Unrenamed(Exception):
    """The owner refused a pull's renames (``PullResult.unrenamed``): nothing was committed."""


class PullRenames(MirrorWatch):
    """Pairing and re-keying a program's directory renames (a part of ``Mirror``)."""

    # The state, chunk lists and fingerprints before a plan re-keyed them (put back when refused).
    renamed_from: tuple[dict[str, Entry], dict[str, list[str]], dict[str, Any]] | None = None
    no_renames = False  # the next plan pairs none (a pull sent again after a refusal)
    renaming: Sequence[tuple[str, str]] = ()  # the relative pairs of the plan at hand
    # A page whose answer was lost (``_pull_lost``): its pull's id and renames (relative, in order).
    lost: tuple[str, list[tuple[str, str]]] | None = None

    def _lacking(self) -> list[str]:
        """What the workspace keeps out or the mirror must fetch again below the root (no rename near)."""
        held = (*self.protected, *self.refetch, *self.held, *self.kept)
        return [p for p in held if is_below(p, self.root)]

    def find_renames(self, now: dict[str, Entry], denied: list[str]) -> list[tuple[str, str]]:
        """Pair the directories gone from the state with where their files are in ``now`` (a walk's
        whole tree), re-key the state to the new names (the old one kept in ``renamed_from``), and
        return the pairs (relative paths, in the order the owner applies them)."""
        self.renamed_from, self.renaming = None, []
        if self.no_renames or denied or self.lifts.locked:
            self.no_renames = False
            return []
        state = self.state
        gone = [rel for rel, e in state.items() if rel and e[KIND] == "d" and not is_dir(now.get(rel))]
        if not gone:
            return []
        gone.sort(key=lambda rel: (rel.count("/"), rel))
        # Files and symlinks not where the state had them (a hard link's unmoved name misleads none).
        by_ino = {e[INO]: rel for rel, e in now.items() if e[KIND] in "fl" and not _same(state.get(rel), e)}
        olds = path_order(state)
        quick = self.room() // 4
        lacking = self._lacking()
        moves: list[tuple[str, str]] = []
        for g in gone:
            if len(moves) >= MAX_RENAMES:
                break
            src = _translate(g, moves)
            if src != g and is_dir(now.get(src)):
                continue  # moved along with a directory above it
            new = _probe(g, src, olds, state, by_ino)
            if new is None or not is_dir(now.get(new)) or _related(new, src):
                continue
            if not (is_utf8(src) and is_utf8(new)) or len(new) > quick:
                continue
            held = _untranslate(new, moves)
            if held is not None and held in state:
                continue  # the new name is taken in the state (a rename over it: sent as before)
            if any(dst == new or dst.startswith(new + "/") for _, dst in moves):
                continue  # an earlier pair's parents made it (``mv d n/d; mv e n/e; mv n/d n/e/d``; s67)
            if not _dirs_above(new, moves, state):
                continue  # a symlink above the new name (the owner's rename would go through it)
            if any(_related(self.workspace_path(p), q) for p in (src, new) for q in lacking):
                continue
            longest = _deepest(olds, state, g)
            if longest is None or len(new) + longest - len(g) > quick:
                continue
            moves.append((src, new))
        if moves:
            self._rekey(moves)
        return moves

    def watched_renames(self, moves: list[tuple[str, str]]) -> bool:
        """Take the directory moves a kept watch paired (``_watch_moves``; relative, in order): the
        state re-keyed to them (as :meth:`find_renames` does) and True, or False when one is not what
        a pairing would take (the pull walks the whole tree then, and pairs there). A move of a
        directory the state does not hold (made since the last pull) renames nothing: what it holds
        is in the events, at the new names. A move undone by the next (``a -> b -> a``) is dropped,
        one continued by the next (``a -> b -> c``) is one (a background ``mv`` loop: one rename a pull,
        not one per ``mv``); past ``MAX_RENAMES`` left, or ``MAX_MOVES`` seen, the pull walks."""
        self.renamed_from, self.renaming = None, []
        if self.no_renames or self.lifts.locked or len(moves) > MAX_MOVES:
            return False
        state, quick, taken = self.state, self.room() // 4, list[tuple[str, str]]()
        lacking = self._lacking()
        olds: list[str] | None = None
        deepest: dict[str, int | None] = {}  # state directory -> its longest key below (None: unsyncable)
        for src, dst in moves:
            was, held = _untranslate(src, taken), _untranslate(dst, taken)
            olds = olds if olds is not None else path_order(state)
            if held is not None and (held in state or keys_below(olds, held)):
                return False  # onto a name the state holds (an empty directory): sent as before
            if was is None or was not in state:
                if was is not None and keys_below(olds, was):
                    return False
                # One carrying a pair's new name (``mkdir n && mv d n/d && mv n m``) is walked and paired
                # there (``d -> m/d``): before, s67, ``d -> n/d`` was sent, a name gone by then.
                if any(new == src or new.startswith(src + "/") for _, new in taken):
                    return False
                continue  # made since the last pull: its entries are events
            if not is_dir(state[was]) or not _dirs_above(dst, taken, state):
                return False  # (a symlink above the new name: the owner's rename would go through it)
            if not (is_utf8(src) and is_utf8(dst)) or len(dst) > quick:
                return False
            if any(_related(self.workspace_path(p), q) for p in (src, dst) for q in lacking):
                return False
            if was not in deepest:  # (once per directory: a storm moves one back and forth)
                deepest[was] = _deepest(olds, state, was)
            longest = deepest[was]
            if longest is None or len(dst) + longest - len(was) > quick:
                return False
            last = taken[-1] if taken else None
            if last is not None and last[1] == src and (last[0] == dst or not _related(last[0], dst)):
                # continued: a -> b -> c is a -> c, a -> b -> a nothing
                first = taken.pop()[0]
                if first != dst:
                    taken.append((first, dst))
            else:
                taken.append((src, dst))
        if len(taken) > MAX_RENAMES:
            return False
        # A new name gone by now (``mkdir n && mv d n/d && rm -rf n``) is walked: the owner's rename
        # made ``n``, which nothing removed then (s67: the workspace kept an empty ``n``).
        if not all(
            _dir_now(f"{self.directory}/{_translate(dst, taken[at + 1 :])}")
            for at, (_, dst) in enumerate(taken)
        ):
            return False  # (each at its name once the later pairs are done)
        if taken:
            self._rekey(taken)
        return True

    def moved_parents(self, moves: Sequence[tuple[str, str]]) -> set[str]:
        """The directories the watch's ``moves`` took a name from or gave one to (``rename_parents``,
        the top left out: ``RootTime``), lstat-ed at the pull: the watch's own lstat of a new one, taken
        as it appeared, is dropped (s67: ``mkdir -p x/y/z && mv x/y/z q`` kept the time ``x/y`` had
        before ``z`` left it, the move's event naming ``z`` alone)."""
        parents = rename_parents(moves) - {""}
        stats = self.watch.stats if self.watch is not None else {}
        for rel in parents.intersection(stats):
            del stats[rel]
        return parents

    def _rekey(self, moves: list[tuple[str, str]]) -> None:
        """The state, chunk lists and fingerprints with each of ``moves`` done (the old ones kept)."""
        self.renamed_from = (self.state, self.chunks, self.prints)
        state, chunks, prints = dict(self.state), dict(self.chunks), dict(self.prints)
        # An unwatched tree's baseline of directory times too (``moved_times``): before, a run's
        # ``mv d e && touch -d @1000000000 e/sub`` compared ``e/sub`` with nothing and never sent it.
        times = dict(self.walk_times)
        ordered = path_order(state)
        for src, dst in moves:
            lo = bisect.bisect_left(ordered, src + "/")
            hi = bisect.bisect_left(ordered, src + "0", lo)
            run = ordered[lo:hi]
            moved = [dst + key[len(src) :] for key in run]  # (in order still: one suffix each)
            del ordered[lo:hi]
            for key, to in zip(run, moved, strict=True):
                state[to] = state.pop(key)
            state[dst] = state.pop(src)
            ordered.remove(src)
            at = bisect.bisect_left(ordered, dst)
            ordered[at:at] = [dst]
            at = bisect.bisect_left(ordered, dst + "/")
            ordered[at:at] = moved
            for key in [k for k in chunks if is_below(k, src)]:
                chunks[dst + key[len(src) :]] = chunks.pop(key)
            for key in [k for k in prints if is_below(k, src)]:
                prints[dst + key[len(src) :]] = prints.pop(key)
            for key in [k for k in times if is_below(k, src)]:
                times[dst + key[len(src) :]] = times.pop(key)
        self.state, self.chunks, self.prints, self.walk_times = state, chunks, prints, times
        self.renaming = moves

    def unrename(self) -> None:
        """The next plan walks the whole tree (a new watch: a pull failed or was refused), what
        :meth:`find_renames` re-keyed is put back (it then pairs nothing), and what the plan took as
        sent without an entry, the top's time and mode and a walk's directory times (``pull_unsent``).
        Before (s66), a refused pull planned again found those unchanged: a run's ``mv p/d p/e &&
        touch -d 2001 .`` refused by a workspace write below ``p/d`` left the top's time in the sandbox."""
        self.unwatch()
        self.pull_unsent()
        if self.renamed_from is not None:
            self.state, self.chunks, self.prints = self.renamed_from
            self.renamed_from, self.renaming = None, []
            self.no_renames = True

    def renames_done(self, page: SyncPull, own_revs: list[int]) -> None:
        """The owner committed ``page`` (``own_revs``, its revisions): when it carried the renames, the
        state keeps their names and those revisions are the mirror's own (in the mirror already), even
        if a later page fails (:meth:`unrename` then puts back nothing but the times). Before (s66), a
        live pull whose second page failed put the state back to the old names with the committed
        rename not its own: the next sync took it for the workspace's, refused every file below the new
        name as a conflict and dropped from the sandbox those the failed pages carried."""
        if page.renames:
            self.renamed()
            self.own_revs = sorted({*self.own_revs, *own_revs})

    def rekey(self, moves: list[tuple[str, str]]) -> None:
        """The state re-keyed to ``moves``, which the owner did (``_pull_lost``): nothing to put back."""
        self._rekey(moves)
        self.renamed()

    def renamed(self) -> None:
        """The pull that re-keyed the state is settled: nothing to put back."""
        self.renamed_from, self.renaming = None, []

    def chunk_sources(self, plan: PullPlan) -> dict[str, str]:
        """Large files of ``plan`` that continue the file of another name whose chunk list the mirror
        holds (the same inode: a program renamed it, or linked it and removed the old name), where
        their own name has no list of that file: path -> that other name. Their pages read them against
        that list, so unchanged chunks travel as hashes (a ``mv`` of a 200 MB file sent 200 MB)."""
        if plan.sources is None:
            state, chunks = self.state, self.chunks
            wanted = []
            for rel, entry in plan.files:
                if entry[SIZE] >= BIG_FILE and chunks:
                    old = state.get(rel)
                    if rel not in chunks or old is None or old[INO] != entry[INO]:
                        wanted.append((rel, entry[INO]))
            sources: dict[str, str] = {}
            if wanted:
                by_ino: dict[int, str] = {}
                for rel in chunks:
                    old = state.get(rel)
                    if old is not None and old[KIND] == "f":
                        by_ino.setdefault(old[INO], rel)
                for rel, ino in wanted:
                    if (source := by_ino.get(ino)) is not None and source != rel:
                        sources[rel] = source
            plan.sources = sources
        return plan.sources


def _same(old: Entry | None, entry: Entry) -> bool:
    return old is not None and old[INO] == entry[INO] and old[KIND] == entry[KIND]


def _dir_now(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _related(a: str, b: str) -> bool:
    """Whether one of two paths is the other or below it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def translated(paths: set[str], moves: Sequence[tuple[str, str]]) -> set[str]:
    """The state's ``paths`` (relative) where ``moves`` took them."""
    return {_translate(rel, moves) for rel in paths} if moves else set()


def rename_parents(moves: Sequence[tuple[str, str]]) -> set[str]:
    """The directories ``moves`` (relative, in order: a kept watch's, every one it saw) took a name from
    or gave one to, whose times moved, each at its name once every later move is done. A pull reads
    their times (``MirrorPull.plan``). Before, s67, only the pairs left to send named them, at their
    names at that move: in ``mv e d/s/e && mv d dd`` the pull lstat-ed ``d/s``, gone, so ``dd/s``'s
    time never reached the store (which took its rename's moment), and ``mv d/s/t x && mv x d/s/t``
    (no pair left) never named ``d/s`` at all."""
    return {
        _translate(path.rpartition("/")[0], moves[at + 1 :]) for at, pair in enumerate(moves) for path in pair
    }


def _translate(rel: str, moves: Sequence[tuple[str, str]]) -> str:
    for src, dst in moves:
        if rel == src or rel.startswith(src + "/"):
            rel = dst + rel[len(src) :]
    return rel


def _untranslate(rel: str, moves: list[tuple[str, str]]) -> str | None:
    """The state's path that ``moves`` took to ``rel`` (itself if none), or None: a path one of them
    left empty."""
    for src, dst in reversed(moves):
        if rel == dst or rel.startswith(dst + "/"):
            rel = src + rel[len(dst) :]
        elif rel == src or rel.startswith(src + "/"):
            return None
    return rel


def _dirs_above(rel: str, moves: list[tuple[str, str]], state: dict[str, Entry]) -> bool:
    """Whether every ancestor of ``rel`` the state holds (once ``moves`` are done) is a directory. One
    that is a symlink or a file there is one in the workspace too, which the owner renames before the
    page replaces it: before (s66 review), ``rm l && mkdir -p l/y && mv d l/y/x`` over a link ``l ->
    /.computer`` had the owner make ``/.computer/y`` and move the program's tree into it."""
    parent = rel.rpartition("/")[0]
    while parent:
        held = _untranslate(parent, moves)
        if held is not None and held in state and not is_dir(state[held]):
            return False
        parent = parent.rpartition("/")[0]
    return True


def _probe(
    gone: str, src: str, olds: list[str], state: dict[str, Entry], by_ino: dict[int, str]
) -> str | None:
    """Where the directory ``gone`` (``src`` once the earlier renames are done) went: the first of a
    few of its files or symlinks found at the same place below another path, that path."""
    prefix = gone + "/"
    at = bisect.bisect_left(olds, prefix)
    for key in olds[at : at + PROBES]:
        if not key.startswith(prefix):
            break
        entry = state[key]
        if entry[KIND] not in "fl" or (where := by_ino.get(entry[INO])) is None:
            continue
        rest = key[len(gone) :]
        if where.endswith(rest) and where != src + rest and len(where) > len(rest):
            return where[: -len(rest)]
    return None


def _deepest(olds: list[str], state: dict[str, Entry], was: str) -> int | None:
    """The longest path the state holds at or below ``was`` (the length check of a rename to a longer
    name), or None when something there is not what the workspace holds as it is (a FIFO or socket, a
    name that is not UTF-8): the rename is sent as before then (those are reported). The state, not
    the new tree, for a walk's pairing and a kept watch's alike (its events name no tree): what the run
    made below the new name is the pull's as any new path (a FIFO over a directory the state holds: the
    workspace's kept whole there, skipped, as without a rename). Before (s66), a walk judged the new
    tree and a kept watch the state, so ``rm -r p/d; mkfifo p/d; mv p q`` kept the workspace's ``p/d``
    at ``q/d`` or dropped it by which of them took the move."""
    below = keys_below(olds, was)
    if any(state[key][KIND] not in "fdl" for key in below) or not all(map(is_utf8, below)):
        return None
    return max(map(len, below), default=len(was))


def first_renamed(
    pages: Generator[SyncPull, None, None], renames: list[tuple[str, str]]
) -> Generator[SyncPull, None, None]:
    """A pull's pages, its first carrying ``renames`` (the owner does them before anything else); a
    close reaches ``pages`` (``yield from``)."""
    first = next(pages, None)
    if first is None:
        return
    yield dataclasses.replace(first, renames=list(renames)) if renames else first
    yield from pages


def renames_refused(
    renames: list[tuple[str, str]], conflicts: Conflicts, protected: set[str], root: str
) -> bool:
    """Whether the owner refuses a pull's directory renames (``(old, new)``, in order): one is not
    strictly below the pull's root, the workspace changed something at, above or below either name
    since the mirror's revision (``conflicts``), or a protected path is there, the workspace's own
    :data:`~._protected.SYSTEM_DIR` always (whatever root and protected paths the mirror names)."""
    for src, dst in renames:
        if src == root or dst == root or not (is_below(src, root) and is_below(dst, root)):
            return True
        if _related(src, dst) or conflicts.hit(src) or conflicts.hit(dst):
            return True
        if any(_related(p, q) for p in (*protected, SYSTEM_DIR) for q in (src, dst)):
            return True
    return False


async def as_taken(fs: Any, renames: list[tuple[str, str]]) -> bool:
    """Whether the workspace holds the renames' names as the mirror took them, each where the earlier
    renames of the list leave it: the old name a directory, the new one free, every parent of it the
    workspace holds a directory, and no symlink on the way to either name (:func:`_unlinked`). What
    the mirror sends is not trusted: before (s67), a pair ``(a, b), (c, b/f/x)`` over a file ``a/f``, or
    ``(a, b), (a, c)``, committed the first rename and failed the page on the second (ENOTDIR, ENOENT;
    ``b/f`` taken: EEXIST), the rest of the page with it."""
    for index, (src, dst) in enumerate(renames):
        earlier = renames[:index]
        if not (await _unlinked(fs, src, earlier) and await _unlinked(fs, dst, earlier)):
            return False
        was, held = _untranslate(src, earlier), _untranslate(dst, earlier)
        if was is None or not await _is_directory(fs, was):
            return False  # (a name an earlier rename emptied, or none)
        if held is not None and await fs.exists(held):
            return False
        parent = dst.rpartition("/")[0]
        while parent:
            at = _untranslate(parent, earlier)
            if at is not None and await fs.exists(at) and not await _is_directory(fs, at):
                return False  # a file where the rename (or the mkdir of its parents) needs a directory
            parent = parent.rpartition("/")[0]
    return True


async def _is_directory(fs: Any, path: str) -> bool:
    try:
        return bool((await fs.stat(path)).is_directory)
    except OSError:
        return False


async def _unlinked(fs: Any, path: str, earlier: list[tuple[str, str]]) -> bool:
    """Whether ``path``, once the ``earlier`` renames are done, is reached through no symlink of the
    workspace and is none itself. A rename and the ``mkdir`` of its new name's parents follow the
    links on the way (as any path's parents are): the mirror, which sends the names, is not trusted
    to have seen them (a run that replaced a link ``l -> /.computer`` by a directory has its page
    replace it only after the renames). Checked where the workspace holds it now: through the earlier
    renames back to the old name, or what leads to a name one of them left empty."""
    at = _untranslate(path, earlier)
    while at is None:  # (a name an earlier rename emptied: renames are below the root, never it)
        path = path.rpartition("/")[0]
        at = _untranslate(path, earlier)
    return bool(await real_path(fs, at) == at)


async def rename_dirs(
    fs: Any, renames: list[tuple[str, str]], own: set[int], renamed: list[tuple[str, str]]
) -> list[str]:
    """Do a pull's directory renames in the workspace, in order, each the run's own revision (added
    to ``own`` and each pair to ``renamed`` as it is committed: ``_pull_lost``); the paths (old and
    new). Each new name's missing parents are made first (a directory the same pull makes: its mode
    and time come with the page's directories)."""
    done: list[str] = []
    for src, dst in renames:
        before = fs.rev
        parent = dst.rpartition("/")[0] or "/"
        if not await fs.exists(parent):
            await fs.mkdir(parent, recursive=True)
            own.update(range(before + 1, fs.rev + 1))
        await fs.rename(src, dst)
        own.update(range(before + 1, fs.rev + 1))
        renamed.append((src, dst))
        done += [src, dst]
    return done
