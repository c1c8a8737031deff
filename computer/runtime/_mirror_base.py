"""The layer under a mirror's push and pull (see ``_mirror``): the change-detection key of a path
(:data:`Entry`, from ``_entry``), what a run changed before any bytes are read (:class:`PullPlan`), and
:class:`MirrorBase`, the fields and path arithmetic both sides use."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..storage.paths import MAX_PATH_BYTES
from ._backend import MirrorDir, MirrorFile, MirrorSymlink, store_time
from ._beneath import SAFE_BITS, chmod_beneath, lstat_beneath, make_parent, open_beneath, remove_beneath
from ._entry import INO, KIND, MODE, SIZE, Entry, entry_of, is_dir
from ._forget import forget
from ._held_links import is_utf8, linked_at, lost_names, names_elsewhere, rename_at
from ._lifts import Lifts, open_top
from ._mirror_walk import Overflow
from ._pull_rules import PROTECTED
from ._watch import TreeWatch

__all__ = [
    "BAD_TARGET",
    "LOCKED_OUT",
    "NOT_UTF8",
    "SPECIAL",
    "TARGET_TOO_LONG",
    "TOO_LONG",
    "TOO_LONG_KEPT",
    "Entry",
    "MirrorBase",
    "PullPlan",
    "entry_of",
    "is_below",
    "was_dir",
]


class MirrorBase:
    """What the push and pull sides of :class:`~computer.runtime._mirror.Mirror` share: its fields
    (declared here for them, defined by the ``Mirror`` dataclass) and its path arithmetic."""

    directory: Path
    root: str
    rev: int | None
    protected: set[str]
    state: dict[str, Entry]
    watch: TreeWatch | None
    kept: set[str]
    reasons: dict[str, str]
    unfilled: list[tuple[MirrorFile, list[int] | None]]
    chunks: dict[str, list[str]]
    prints: dict[str, tuple[tuple[str, ...], list[int]]]
    owner: tuple[int, int] | None
    own_revs: list[int]
    refetch: set[str]
    held: set[str]
    linked: set[int]
    dir_times: dict[str, int]
    look_owed: bool
    look_next: float
    lifts: Lifts
    unsettled: tuple[str, dict[str, Entry]] | None
    keep_setid: bool
    setid: set[str]

    def setid_off(self, rel: str, entry: Entry) -> Entry:
        """``rel``'s entry with its set-id bits taken off the mirror's file; a live sandbox's tick
        (``keep_setid``) leaves them, noted in ``setid`` for ``Mirror.clear_setid``."""
        if self.keep_setid:
            self.setid.add(rel)
            return entry
        return self.strip_setid(rel, entry)

    def strip_setid(self, rel: str, entry: Entry) -> Entry:
        """``rel``'s entry once its set-id bits are off the mirror's file (as it was, when that failed)."""
        with contextlib.suppress(OSError):
            return entry_of(chmod_beneath(self.directory, rel, entry[MODE] & SAFE_BITS))
        return entry

    def host(self, path: str) -> Path:
        return self.directory / self.rel(path)

    def rel(self, path: str) -> str:
        if self.root == "/":
            return path[1:]
        return path[len(self.root) + 1 :]

    def room(self) -> int:
        """The longest path below the mirror (UTF-8 bytes, relative) it syncs: its path on the host
        must fit a system call's (``PATH_MAX``: 4,095 bytes and the NUL) and its workspace path the
        storage's (4,096). A program can make deeper paths (by ``cd``-ing down), and the workspace
        can hold paths its sandbox directory's longer host prefix cannot reach: those are never
        synced and reported with :data:`TOO_LONG` (before, a deeper tree was lost without a word,
        and a workspace path of 4,092 bytes failed every run's push: no sandbox could start)."""
        host = len(os.fsencode(self.directory)) + 1
        return min(_PATH_MAX - host, MAX_PATH_BYTES - self._prefix_bytes())

    def _prefix_bytes(self) -> int:
        """What a workspace path has before its path relative to the mirror (``root`` and a slash)."""
        return len(self.root.encode()) + (0 if self.root == "/" else 1)

    def left_out(self) -> dict[str, str]:
        """The workspace paths the push kept out of the mirror (too big, too many, too long), each
        with its reason: every run lists them in ``skipped``, whatever it changed."""
        return {p: self.reasons.get(p, PROTECTED) for p in self.protected}

    def path_limit(self, room: int) -> int:
        """The longest workspace path (bytes) the mirror syncs, given its :meth:`room`."""
        return room + self._prefix_bytes()

    def lstat_failed(self, rel: str, exc: OSError) -> os.stat_result | None:
        """The ``lstat`` of ``rel`` after a plain one failed with ``exc``; None when it is not there.
        A path too long for the host to name whole is opened down one directory at a time (no link
        followed); one below a directory the program locked is looked at again once the directories
        above it are lifted (``_lifts``)."""
        try:
            if exc.errno == errno.ENAMETOOLONG:
                return lstat_beneath(self.directory, rel)
            if exc.errno == errno.EACCES and self.lifts.active:
                if self.lifts.lift(self.directory, rel, itself=False):
                    return os.lstat(f"{self.directory}/{rel}")
        except OSError:
            pass
        return None

    def locked_out(self, plan: PullPlan, denied: list[str]) -> PullPlan:
        """``plan`` with the paths the sync could not look at (``LOCKED_OUT``): kept (``kept``) and
        listed in the run's ``skipped``."""
        for rel in denied:
            plan.unsyncable[self.workspace_path(rel)] = LOCKED_OUT
        return plan

    def note_locks(self, found: Iterable[tuple[str, Entry | None]], now: dict[str, Entry]) -> None:
        """Record the locks among ``found`` (what a pull's lstat calls found, None: gone), and give
        each path this sync lifted its program's mode in ``now`` (an lstat after the lift saw the
        lifted one). Nothing to do where this process overrides modes (``Lifts.active``)."""
        lifts = self.lifts
        if not lifts.active:
            return
        for rel, entry in found:
            if entry is None:
                lifts.forget(rel)
            elif rel not in lifts.lifted:
                lifts.note(rel, entry[KIND], entry[MODE])
        for rel in lifts.lifted:
            entry, mode = now.get(rel), lifts.locked.get(rel)
            if entry is not None and mode is not None:
                now[rel] = (*entry[:MODE], mode)

    def restore_lifts(self) -> None:
        """A sync's end: the program's bits back where it lifted them, the state of each path put
        back taken again (its ctime moved), and the top directory searchable by its owner, so a run
        can start in it (``_lifts``)."""
        lifts = self.lifts
        if lifts.lifted:
            states = [self.state] + ([self.unsettled[1]] if self.unsettled is not None else [])
            for rel, st in lifts.restore(self.directory).items():
                for state in states:
                    if rel in state:
                        state[rel] = entry_of(st)
        open_top(self.directory)

    def chunks_at(self, path: str) -> int:
        """How many chunks the large file at the workspace ``path`` held at the last sync (0: none)."""
        return len(self.chunks.get(self.rel(path), ())) if self.chunks else 0

    def removes_chunks(self, deleted: list[str]) -> int:
        """The chunks the large files among ``deleted`` (workspace paths) held at the last sync."""
        return sum(map(self.chunks_at, deleted)) if self.chunks else 0

    @staticmethod
    def too_long(rel: str, room: int) -> bool:
        """Whether the relative path ``rel`` is past ``room`` bytes (see :meth:`room`); its length in
        characters answers for nearly every path (a character is at most 4 bytes)."""
        return len(rel) * 4 > room and len(rel.encode("utf-8", "surrogateescape")) > room

    def workspace_path(self, rel: str) -> str:
        if not rel:
            return self.root
        return f"/{rel}" if self.root == "/" else f"{self.root}/{rel}"

    def look_due(self, paced: bool) -> bool:
        """Whether :meth:`look_again` runs now: one is owed, and (``paced``) its last took at most a
        tenth of the time since."""
        return self.look_owed and (not paced or time.monotonic() >= self.look_next)

    def look_again(self, now: dict[str, Entry], candidates: set[str], paced: bool) -> None:
        """Every file the state holds that no event named is lstat-ed again, once a run made and
        removed a name (:meth:`look_due`). That name may have been a hard link of a file: ``ln f t;
        echo x >> t; rm t`` changes ``f`` with events at ``t`` only (f's change was never pulled: the
        workspace and the sandbox differed, silently), and ``ln -f``'s temporary link changes the
        ctime of the names it links (a stale entry fails a later workspace rename of one: fetched
        whole, a new inode). A file whose size, mtime or mode moved becomes a candidate (pulled); one
        whose ctime alone moved (a link count) is taken into ``now`` only. ~1.1 µs a file (10,000:
        11 ms), only after such a run. Due or not, so are the other names of a linked file that lost a
        synced name (``t`` of ``f`` removed or replaced: before, ``f``'s change was never pulled)."""
        lost = lost_names(self.state, now, candidates, self.linked) if self.linked else set()
        due = self.look_due(paced)
        if not due and not lost:
            return
        start = time.monotonic()
        base = os.fspath(self.directory) + "/"
        lstat = os.lstat
        for rel, held in self.state.items():
            if held[0] != "f" or (not due and held[1] not in lost):  # (indexes: cheaper, 10,000 times)
                continue
            try:
                st = lstat(base + rel)
            except OSError:
                continue  # gone with no event: the next walk finds it
            # Any change moves the ctime (a program cannot set it); the rest only for those.
            if st.st_ctime_ns != held[4] and rel not in candidates and rel in now:
                now[rel] = entry = entry_of(st)
                if entry[:4] != held[:4] or entry[MODE] != held[MODE]:
                    candidates.add(rel)
        if due:
            self.look_owed = False
            end = time.monotonic()
            self.look_next = end + 10 * (end - start)

    def look_at(self, now: dict[str, Entry], candidates: set[str], names: list[str]) -> bool:
        """``names`` no event named lstat-ed again into ``now`` and made candidates (the other names of
        a file changed through one the workspace cannot hold: ``_held_links.unheld_names``); whether
        there were any."""
        for rel in names:
            with contextlib.suppress(OSError):
                now[rel] = entry_of(os.lstat(self.directory / rel))
                candidates.add(rel)
        return bool(names)

    def own_since(self, rev: int) -> list[int]:
        """The revisions after ``rev`` that this mirror's own pulls committed: what they changed is in
        the mirror already (a push leaves them out, a pull does not take them for workspace changes)."""
        return [r for r in self.own_revs if r > rev]

    def _own(self, host: Path) -> None:
        if self.owner is not None:
            os.lchown(host, *self.owner)

    def _forget(self, *rels: str) -> None:
        """Forget each of ``rels`` and everything below it (see :func:`~._forget.forget`)."""
        forget(self.state, (self.chunks, self.prints), rels)

    def move(self, src: str, dst: str) -> bool:
        """Follow a workspace rename: the node at ``src`` is renamed to ``dst``, the same file or
        directory (an open log goes on, hard links stay links, a process's directory moves with it,
        and the sandbox's own FIFOs and sockets there, ``kept``: before, they refused the move, and a
        server lost its socket and open log); what ``dst`` held is replaced. False, with nothing
        changed, when the mirror cannot: ``src`` is not what it last synced there, the workspace has
        something there it keeps out (protected or dropped), ``dst``'s parent is not a directory it
        holds, or the rename fails (a non-empty directory in the way). No link is followed."""
        if not (_strictly_below(src, self.root) and _strictly_below(dst, self.root)) or is_below(dst, src):
            return False
        s, d = self.rel(src), self.rel(dst)
        if self.too_long(d, self.room()):  # dropped: the push protects the new name (``_within_room``)
            return False
        entry = self.state.get(s)
        s_parent, _, s_name = s.rpartition("/")
        d_parent, _, d_name = d.rpartition("/")
        if entry is None or any(is_below(p, src) for p in (*self.protected, *self.refetch, *self.held)):
            return False
        if d_parent and not is_dir(self.state.get(d_parent)):
            # A directory the same push makes (``mkdir n; mv f n/``): made here first; the push's
            # own step for it then sets its mode (or, had it been replaced, removes it).
            try:
                make_parent(self.directory, self.directory / d, self.owner)
                parent = d_parent
                while parent and not is_dir(self.state.get(parent)):
                    self.state[parent] = entry_of(os.lstat(self.directory / parent))
                    parent = parent.rpartition("/")[0]
            except OSError:
                return False
        unlinked = self.linked_at(d)  # a hard-linked file losing this name: its others are read again
        fds: list[int] = []
        try:
            fds.append(open_beneath(self.directory, s_parent))
            fds.append(open_beneath(self.directory, d_parent))
            if entry_of(os.lstat(s_name, dir_fd=fds[0])) != entry:
                return False
            moved = rename_at(s_name, d_name, fds[0], fds[1])  # (two names of one file: one left)
        except OSError:
            return False
        finally:
            for fd in fds:
                os.close(fd)
        self._forget(d)  # what ``dst`` held is replaced
        self.protected = {p for p in self.protected if not is_below(p, dst)}
        kept = {p for p in self.kept if not is_below(p, dst)}  # ... and the sandbox's own paths move
        self.kept = {dst + p[len(src) :] if is_below(p, src) else p for p in kept}
        if entry[KIND] == "d":
            prefix = s + "/"
            for key in [k for k in self.state if k.startswith(prefix)]:
                self._rename_key(key, d + key[len(s) :])
        self._rename_key(s, d)
        self.state[d] = now = entry_of(moved)  # a rename changes the ctime the pull compares
        if now[KIND] == "f" and moved.st_nlink > 1:  # ... of every name of the file
            self.take_in({now[INO]: now})
        if unlinked:
            self.reread(unlinked, refetch=True, but=(d,))
        return True

    def take_in(
        self,
        files: dict[int, Entry],
        chunks: dict[int, list[str]] | None = None,
        rewritten: Collection[int] = (),
    ) -> None:
        """Every name of each of ``files`` (entries by inode) takes in its entry: a link, a rename or a
        write changes a file's ctime, which the pull compares, for all its names (one pass). ``chunks``:
        the chunk lists of those just written whole (large files), which every name then holds too (a
        pull reading a renamed name against a stale one would send its bytes again). ``rewritten``:
        those whose content a write changed; a name of one with no list in ``chunks`` forgets its own
        (a later push of it as chunks would take the stale list as what the file holds, and fetch
        none of the chunks it lacks)."""
        for key, held in self.state.items():
            if held[KIND] == "f" and held[INO] in files:
                self.state[key] = files[held[INO]]
                if chunks is not None and held[INO] in chunks:
                    self.chunks[key] = list(chunks[held[INO]])
                elif held[INO] in rewritten:
                    self.chunks.pop(key, None)
                    self.prints.pop(key, None)

    def linked_at(self, rel: str) -> set[int]:
        """Inodes of files seen with several names (``linked``) held at or below ``rel``."""
        return linked_at(self.state, self.linked, rel)

    def refetch_elsewhere(
        self, rel: str, before: dict[str, Entry] | None = None, *, kept: bool = False
    ) -> None:
        """Before the mirror drops ``rel`` to fetch it again: the names its linked files have elsewhere
        are fetched again too, so the push links them as the workspace has them (before: the dropped
        name came as a new file, its other names kept the old one: s50/h7). ``before``: the state
        the workspace last agreed with (a refused removal: gone from the state now); ``kept``: ``rel``
        stays (a conflict's file, written into): only a file it held before and no longer counts."""
        inodes = linked_at(before, self.linked, rel) if before is not None else set()
        if kept:
            inodes -= self.linked_at(rel)
        else:
            inodes |= self.linked_at(rel)
        for other in names_elsewhere(self.state, inodes, rel):
            self.refetch.add(self.workspace_path(other))

    def reread(self, inodes: set[int], *, refetch: bool = False, but: Collection[str] = ()) -> None:
        """The names of ``inodes`` the mirror holds are read again (an lstat each): removing or
        replacing one name of a hard-linked file changes the others' ctime with no event in their
        directories (a stale entry fails a later workspace rename: fetched whole, a new file).
        ``refetch``: the workspace removed or replaced the name, perhaps written first (its log names
        that there only): the others but ``but`` are fetched again (before, ``write t; rm t`` left
        ``f`` stale in the sandbox: s50/h7)."""
        for key, entry in list(self.state.items()):
            if entry[KIND] == "f" and entry[INO] in inodes:
                with contextlib.suppress(OSError):
                    self.state[key] = entry_of(os.lstat(self.directory / key))
                if refetch and key not in but:
                    self.refetch.add(self.workspace_path(key))

    def move_or_drop(self, src: str, dst: str) -> bool:
        """:meth:`move`, or else drop ``src`` and ask for ``dst`` again whole (``refetch``). A file (or
        link) the mirror holds at ``dst`` is removed too, as the rename replaced it in the workspace:
        the new name then comes as a new file, never written into that one (a hard link of another
        name, whose bytes it would change; a conflict's refetch, by contrast, keeps its file and is
        written into, so a program holding it open follows the workspace's version)."""
        if self.move(src, dst):
            return True
        self.refetch_elsewhere(self.rel(src))
        remove_beneath(self.directory, self.rel(src))
        self._forget(self.rel(src))
        if self.protected:  # what the workspace kept out there moved too (its new name comes again)
            self.protected = {p for p in self.protected if not is_below(p, src)}
        d = self.rel(dst)
        held = self.state.get(d)
        if held is not None and held[KIND] != "d" and _strictly_below(dst, self.root):
            unlinked = self.linked_at(d)
            remove_beneath(self.directory, d)
            self._forget(d)
            if unlinked:
                self.reread(unlinked, refetch=True)
        self.refetch.add(dst)
        return False

    def _rename_key(self, old: str, new: str) -> None:
        self.state[new] = self.state.pop(old)
        lifts = self.lifts
        if lifts.locked and old in lifts.locked:
            lifts.locked[new] = lifts.locked.pop(old)
            if old in lifts.lifted:
                lifts.lifted.discard(old)
                lifts.lifted.add(new)
        if old in self.chunks:
            self.chunks[new] = self.chunks.pop(old)
        if old in self.prints:
            self.prints[new] = self.prints.pop(old)

    def unwatch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None


@dataclass
class PullPlan:
    """What a run changed, before any file's bytes are read (see :meth:`Mirror.pages`)."""

    files: list[tuple[str, Entry]] = field(default_factory=list)  # (relative path, entry)
    dirs: list[MirrorDir] = field(default_factory=list)
    symlinks: list[MirrorSymlink] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (relative path, first name's path)
    # Files of ``files`` the program wrote through (not replaced) that have other names: written
    # through the workspace's node, every name (``MirrorFile.same``, ``_held_links.share_names``).
    same: set[str] = field(default_factory=set)
    # ... the workspace paths of each one's other names (changed with it: listed as pulled with it).
    shared: dict[str, list[str]] = field(default_factory=dict)
    # Filled by ``Mirror.pages``: the chunk hashes of each large file it sent as chunks.
    chunk_lists: dict[str, list[str]] = field(default_factory=dict)
    # ... and the fast fingerprints of those chunks (``Mirror.prints``).
    chunk_prints: dict[str, list[int]] = field(default_factory=dict)
    # Paths left in the mirror only, with the reason (names the workspace cannot hold, FIFOs…).
    unsyncable: dict[str, str] = field(default_factory=dict)
    # The mtimes (ms) of directories a change was made in that the plan does not make (workspace paths),
    # and the nanoseconds past them where not 0 (``SyncPull.dir_sub_ns``).
    dir_times: dict[str, int] = field(default_factory=dict)
    dir_sub_ns: dict[str, int] = field(default_factory=dict)
    # Large files that continue another name's file (see ``Mirror.chunk_sources``); None: not asked yet.
    sources: dict[str, str] | None = None
    # The new entries a walk refused past the entry cap, never collected (``_mirror_walk``, ``_entry_cap``).
    overflow: Overflow | None = None
    # A program's directory renames, (old, new) workspace paths in order (``_pull_moves``).
    renames: list[tuple[str, str]] = field(default_factory=list)

    def time_dir(self, path: str, ns: int) -> None:
        """Keep the time ``ns`` read in the mirror of the directory ``path`` (``dir_times``)."""
        self.dir_times[path], sub = store_time(ns)
        if sub:
            self.dir_sub_ns[path] = sub
        else:
            self.dir_sub_ns.pop(path, None)

    def add_symlink(self, path: str, target: str, mtime: int | None = None, sub_ns: int = 0) -> bool:
        """The symlink ``path`` to ``target`` (as ``readlink`` decoded it), or, when the target is not
        UTF-8, left in the mirror with its reason (False). Before, such a target (``ln -s $'\\xff' x``)
        failed the pull with ``UnicodeEncodeError``: the run's every change was lost, and every later
        run's too."""
        if not is_utf8(target):
            self.unsyncable[path] = BAD_TARGET
            return False
        self.symlinks.append(MirrorSymlink(path, target, mtime, sub_ns))
        return True

    def too_long(self, path: str, limit: int) -> None:
        """``path`` is past what syncs (``limit`` bytes: see ``MirrorBase.room``): left in the mirror,
        reported."""
        self.unsyncable[path] = TOO_LONG.format(limit)

    def empty(self) -> bool:
        return not (self.files or self.dirs or self.symlinks or self.deleted or self.links or self.dir_times)

    def size(self) -> int:
        return sum(entry[SIZE] for _, entry in self.files)


NOT_UTF8 = "the name is not UTF-8: the workspace cannot hold it (it stays in the sandbox only)"
SPECIAL = "not a regular file, directory or symlink (FIFO, socket or device): never synced"
BAD_TARGET = (
    "a symlink whose target is not UTF-8: the workspace cannot hold it (it stays in the sandbox only)"
)
LOCKED_OUT = (
    "not readable by the sync: a directory above it locks this process out and is not its own to "
    "open; kept as last synced (it stays in the sandbox only)"
)
TOO_LONG = "path too long: a sandbox syncs paths of up to {} bytes (it stays in the sandbox only)"
TARGET_TOO_LONG = (
    "a symlink whose target is over 4,095 bytes: a sandbox cannot make it (only the workspace has it)"
)
TOO_LONG_KEPT = "path too long: a sandbox syncs paths of up to {} bytes (only the workspace has it)"
_PATH_MAX = 4095  # a path a system call takes, in bytes (PATH_MAX counts the NUL)


def was_dir(state: dict[str, Entry], now: dict[str, Entry], rel: str) -> bool:
    old = state.get(rel) or now.get(rel)
    return old is not None and old[KIND] == "d"


def is_below(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def _strictly_below(path: str, root: str) -> bool:
    return path != root and is_below(path, root)
