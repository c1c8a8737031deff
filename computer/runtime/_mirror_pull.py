"""The pull side of a mirror (see ``_mirror``): what a program changed (from the inotify watch, or a
walk), planned before any bytes are read, read into pages (large files as chunks), and the state the
mirror adopts afterwards."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import os
import secrets
from collections.abc import Generator, Iterable, Iterator, Sequence

from xxhash import xxh3_128_intdigest

from ._backend import BIG_FILE, PAGE_CHUNKS, PAGE_FILES, PAGE_PATHS, MirrorFile, SyncPull, fits, store_time
from ._beneath import HOLE, HOLE_DIGEST, BeneathReader, remove_beneath
from ._dir_times import mirror_dir, with_dir_times
from ._entry import INO, KIND, MODE, MTIME_NS, SIZE
from ._held_links import is_utf8, share_names, unheld_names
from ._mirror_base import NOT_UTF8, SPECIAL, Entry, PullPlan, entry_of, is_below, was_dir
from ._moves import moved_names
from ._pull_moves import PullRenames, first_renamed, rename_parents, translated
from ._pull_pages import keys_below, leading, path_order, removal_pages
from ._special_dirs import spare_below

__all__ = ["MirrorPull"]

# The key of the chunk fingerprints (``Mirror.prints``): xxh3-128 runs at memory speed (~100x
# SHA-256 here), and a key the sandboxed program never sees keeps it from crafting a chunk that
# fingerprints like the one it replaced (128 bits: an accidental match is out of reach).
_SEED = int.from_bytes(os.urandom(8), "little")
_HOLE_PRINT = xxh3_128_intdigest(HOLE, _SEED)
# Failures to read a file that say nothing of the file, only of the moment: a lease its program holds
# (``EAGAIN`` while the kernel asks it to let go: the pull's open never blocks, up to the host's
# ``lease-break-time``, 45 s), descriptors or memory run out (``EMFILE``, ``ENFILE``, ``ENOMEM``). Any
# other failure is the path changed under the pull (removed, a link or a FIFO swapped in), which its
# watch sees again. Before, both were left out alike and the file's entry adopted as synced: a file
# under a lease stayed out of the workspace, unsaid, until the program changed it again.
RETRY = frozenset({errno.EAGAIN, errno.EINTR, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class MirrorPull(PullRenames):
    """Finding and reading what changed in the mirror (a part of :class:`~computer.runtime._mirror.Mirror`)."""

    unread: set[str]  # files a pull could not read for a moment (:data:`RETRY`): the next one's

    def plan(self, *, paced: bool = False, cap: int | None = None) -> tuple[PullPlan, dict[str, Entry]]:
        """What the program changed since the push (no file bytes read yet), and the new state to
        adopt after the pull. With a healthy watch only the touched paths are examined; otherwise the
        whole tree is walked. A name the run made and removed (or where a file it made went again:
        the watch's ``passed``) may have been a hard link that changed a file no event names: every
        file is looked at again (``look_again``; ``paced``, a tick: at most a tenth of the time).
        ``cap``: the entry cap (``_entry_cap``): a walk past it refuses the new entries instead of
        collecting them (``PullPlan.overflow``); a watched pull is bounded by what a watch holds."""
        forced = self.forced
        touched = self.touched()  # what the watch saw, and the files forced (``_mapped``)
        moves = self.watch.moves if touched is not None and self.watch is not None else []
        moved, named = bool(moves), touched  # (a walk for moves reads the times events name: ``moved_times``)
        if moved and not self.watched_renames(moves):
            touched = None  # a directory's move the state cannot follow: walked (``_pull_moves``)
            named = (named or set()) | rename_parents(moves)
        if moved and touched is not None:  # a forced file below a moved directory: at its new name
            touched |= translated(forced, self.renaming)
            touched |= self.moved_parents(moves)  # (``a -> b -> a`` too: no pair left)
        denied: list[str] = []  # paths kept as last seen: a directory above stays locked (LOCKED_OUT)
        if touched is None:
            self.unwatched = self.unwatched or (self.watch is not None and self.watch.over)
            since = None if self.walk_times else self.armed_ns  # (no baseline: ``recent_dirs``)
            # A new watch first, then the walk (what changes after it is the next pull's): before, only
            # a push armed one, and a sandbox whose program moved a directory walked on every tick.
            self.unwatch()
            self.arm()
            walked: dict[str, int] = {}
            now = self.scan(walked, denied, cap)
            self.note_locks(now.items(), now)
            self.look_owed = False  # every path was lstat-ed
            renames = self.find_renames(now, denied)  # (the state re-keyed to their new names)
            plan = self._plan(now, set(now) | set(self.state), walked)
            plan.renames = [(self.workspace_path(a), self.workspace_path(b)) for a, b in renames]
            self.moved_times(plan, walked, named, since)  # a directory's time alone (no event names it)
            plan.overflow, self.overflow = self.overflow, None
            return self.locked_out(plan, denied), now
        if not touched and not self.look_due(paced):  # no copy of the state (10,000 entries: 0.3 ms)
            return PullPlan(), self.state
        state = self.state
        now = dict(state)
        candidates = set(touched)
        base = os.fspath(self.directory) + "/"
        gone = self.watch.gone if self.watch is not None else set()
        self.look_owed = self.look_owed or bool(self.watch is not None and self.watch.passed)
        # New directories the watch lstat-ed as it added them (while the run went on: those a later
        # event named, a chmod or a removal, are left out and lstat-ed here).
        known = self.watch.stats if self.watch is not None else {}
        lstat = os.lstat
        found: list[tuple[str, Entry | None]] = []
        times: dict[str, int] = {}  # directories' mtimes (ns) as lstat-ed
        replaced = False  # a directory of the state is something else now (or gone)
        for rel in touched:
            # A path whose last event deleted it is gone: the program has exited (or is frozen), nothing
            # brought it back (1,000 lstat calls that fail cost 2 ms; one moved away is lstat-ed).
            if rel in gone:
                entry = None
            else:
                st = known.get(rel)
                if st is None:
                    try:
                        st = lstat(base + rel)
                    except OSError as exc:  # past PATH_MAX (never synced), or below a locked directory
                        st = self.lstat_failed(rel, exc)
                        if st is None and exc.errno == errno.EACCES:  # a lock not ours to lift:
                            denied.append(rel)  # kept as last seen, never taken for removed
                            found.append((rel, state.get(rel)))
                            continue
                entry = entry_of(st) if st is not None else None
                if entry is not None and entry[KIND] == "d":
                    times[rel] = st.st_mtime_ns  # type: ignore[union-attr]
            found.append((rel, entry))
            if entry is None and rel not in state:
                self.look_owed = True  # made and removed: it may have been a hard link (see above)
            if entry is None or entry[KIND] != "d":
                old = state.get(rel)  # ``was_dir``: ``now`` is the state still
                replaced = replaced or (old is not None and old[KIND] == "d")
        if not replaced:
            # No entry leaves the state: each path's entry is its own (no sort by depth, ~0.15 ms
            # of 1,111 paths; the lstat calls come first, in any order, as the program has exited).
            for rel, entry in found:
                if entry is None:
                    now.pop(rel, None)
                else:
                    now[rel] = entry
        else:
            # Shallow paths first: what was below a directory that is gone leaves ``now`` with it.
            found.sort(key=lambda item: item[0].count("/"))
            ordered: list[str] = []  # ``now``'s paths sorted once (no path added later is below a later one)
            for rel, entry in found:
                if (entry is None or entry[KIND] != "d") and was_dir(state, now, rel):
                    ordered = ordered or sorted(now)
                    below = [k for k in keys_below(ordered, rel) if k in now]
                    for key in below:
                        del now[key]
                    candidates.update(below)
                if entry is None:
                    now.pop(rel, None)
                else:
                    now[rel] = entry
        if denied and self.renaming:  # kept as last seen below a moved directory: walked instead
            self.unrename()
            return self.plan(paced=paced, cap=cap)
        self.note_locks(found, now)
        self.look_again(now, candidates, paced)
        plan = self._plan(now, candidates, times, watched=True)
        if moved:
            plan.renames = [(self.workspace_path(a), self.workspace_path(b)) for a, b in self.renaming]
        return self.locked_out(plan, denied), now

    def collect(self, max_bytes: int | None = None) -> tuple[SyncPull, dict[str, Entry]]:
        """:meth:`plan` with every changed file read, as one :class:`SyncPull` (small pulls, tests)."""
        plan, now = self.plan()
        return self.read_all(plan), now

    def read_all(self, plan: PullPlan) -> SyncPull:
        pages = list(self.pages(plan, budget=None))
        return pages[0] if pages else SyncPull(self.root, protected=sorted(self.protected))

    def _diff(self, now: dict[str, Entry], candidates: set[str], max_bytes: int | None = None) -> SyncPull:
        return self.read_all(self._plan(now, candidates))

    def _plan(
        self,
        now: dict[str, Entry],
        candidates: set[str],
        times: dict[str, int] | None = None,
        *,
        watched: bool = False,
    ) -> PullPlan:
        """What changed among ``candidates`` between the state and ``now``, in path order.

        Per path it is a few dict look-ups (1,111 new directories: ~1 ms): names are checked for
        UTF-8 all at once (one per path only when some name is not), and workspace paths are the
        root's prefix plus the relative path. ``times``: the mtimes (ns) of directories among them as
        lstat-ed (else lstat-ed here); ``watched``: the candidates are what events named (a directory
        among them whose entry did not change had its times set: ``touch``, ``tar``)."""
        plan = PullPlan()
        first_name: dict[int, str] = {}  # inode -> the first changed path naming it (hard links)
        state = self.state
        ordered = path_order(candidates)  # (a sort holds the GIL: in slices)
        try:
            "\0".join(ordered).encode("utf-8")
            checked = True
        except UnicodeEncodeError:
            checked = False  # some name is not: each is checked below (and its file's other names)
            if self.look_at(now, candidates, unheld_names(now, candidates)):
                ordered = path_order(candidates)
        prefix = "/" if self.root == "/" else self.root + "/"
        room = self.room()
        quick = room // 4  # a path of at most this many characters fits (see ``too_long``)
        parents: set[str] = set()  # directories something changed in: their mtime moved
        made: dict[str, int] = {}  # directories new or of a new mode: index in ``plan.dirs``
        times = times or {}
        timed = 0  # of ``made``, those with a time in ``times``
        links = BeneathReader(self.directory)  # each symlink's parent opened once
        special_dirs: list[str] = []  # directories the program replaced by a FIFO or socket: kept whole
        for rel in ordered:
            old = state.get(rel)
            entry = now.get(rel)
            if old == entry:
                if watched and old is not None and old[KIND] == "d":
                    # An event named it: a ``touch`` of it, or ``rm -r a; mkdir a`` (s67: its parent's time).
                    parents.update((rel, rel.rpartition("/")[0]))
                elif old is None and not (len(rel) > quick and self.too_long(rel, room)):
                    parents.add(rel.rpartition("/")[0])  # a name made and removed: its directory's time moved
                continue
            if len(rel) > quick and self.too_long(rel, room):  # past what syncs: reported, never lost
                if entry is not None:  # (the workspace never had it: a removal is nothing to send)
                    plan.too_long(self.workspace_path(rel), self.path_limit(room))
                continue
            if not checked and not is_utf8(rel):  # a name the workspace cannot hold: the mirror's only
                if entry is not None:  # (gone: renamed or removed, nothing left to report)
                    raw = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                    plan.unsyncable[self.workspace_path(raw)] = NOT_UTF8
                continue
            path = prefix + rel if rel else self.root
            parents.add(rel.rpartition("/")[0])
            if entry is None:
                plan.deleted.append(path)
                continue
            kind = entry[KIND]
            if kind in "fd" and entry[MODE] & 0o6000:  # no set-id program out of a run, even in the mirror
                entry = now[rel] = self.setid_off(rel, entry)  # (a live tick's: at the run's end)
            if kind == "d":
                if old is None or old[KIND] != "d" or old[MODE] != entry[MODE]:
                    ns = times.get(rel)
                    timed += ns is not None
                    made[rel] = len(plan.dirs)
                    at = (None, 0) if ns is None else store_time(ns)  # (ms, the nanoseconds past it)
                    plan.dirs.append(mirror_dir(path, entry[MODE], *at))
            elif kind == "l":
                with contextlib.suppress(OSError):
                    if not plan.add_symlink(path, links.readlink(rel), *store_time(entry[MTIME_NS])):
                        continue  # a target the workspace cannot hold: left in the mirror only
            elif kind == "f":
                ino = entry[INO]
                if ino in first_name:
                    plan.links.append((rel, first_name[ino]))
                    self.linked.add(ino)
                else:
                    first_name[ino] = path
                    plan.files.append((rel, entry))
            else:
                # Never synced, and nothing is lost for it either: a workspace file or directory the
                # program replaced by a FIFO or socket stays in the workspace (listed in ``skipped``).
                plan.unsyncable[path] = SPECIAL
                if old is not None and old[KIND] == "d":
                    special_dirs.append(path)
                continue
            if old is not None and old[KIND] != kind:
                plan.deleted.append(path)  # replaced by another kind: remove first
        links.close()
        plan.deleted = spare_below(plan.deleted, special_dirs)
        self.linked.update(share_names(plan, state, now, first_name, self.directory, self.workspace_path))
        parents.update(path.rpartition("/")[0] for pair in self.renaming for path in pair)  # (their times)
        parents = parents if checked else set(filter(is_utf8, parents))  # (an event may name a bad one)
        with_dir_times(plan, self.directory, self.root, made, parents, timed)
        plan.dirs.sort(key=lambda d: d.path.count("/"))
        return plan

    def pages(
        self, plan: PullPlan, budget: int | None, *, reuse: bool = False
    ) -> Generator[SyncPull, None, None]:
        """:meth:`paged`, its first page with the plan's renames (``_pull_moves``)."""
        return first_renamed(self.paged(plan, budget, reuse=reuse), plan.renames)

    def paged(
        self, plan: PullPlan, budget: int | None, *, reuse: bool = False
    ) -> Generator[SyncPull, None, None]:
        """The pull, cut into pages of at most ``budget`` new bytes, ``PAGE_FILES`` files and ``PAGE_PATHS``
        characters of paths in a list (None: one). Removals past those first, on pages of their own
        (``_pull_pages.removal_pages``), then directories past ``PAGE_DIRS`` (with the other removals); the
        rest, directories and links on the next (no later page lands in a tree still to be cleared);
        files fill pages in path order. A large file (two chunks or more) is read a chunk at a time
        and hashed: chunks the store holds (the mirror's last sync of that path, or staged in this
        pull) travel as their hash, new ones as bytes on the page's ``stage``: a 4 KiB change in a
        100 MB file moves one chunk, and no page holds more than ``budget`` bytes. Files changed into
        something else meanwhile are left out. ``reuse``: a large file continuing another name's file
        (:meth:`chunk_sources`) is read against its chunks, which the first page keeps (``keep``)."""
        protected = sorted(self.protected)
        staging = secrets.token_hex(8)
        sources = self.chunk_sources(plan) if reuse else {}
        keep = sorted({digest for source in set(sources.values()) for digest in self.chunks[source]})
        deleted, paged = plan.deleted, budget is not None and not keep
        if paged and (fits(deleted, PAGE_FILES) < len(deleted) or self.removes_chunks(deleted) > PAGE_CHUNKS):
            pages = removal_pages(deleted, self.chunks_at, self.root, protected, staging)
            deleted, reuse = (yield from pages), False
        # Past a page's: directories, then symlinks, on pages of their own.
        dirs, links, deleted, came = yield from leading(plan, deleted, paged, self.root, protected, staging)
        reuse = reuse and not came
        page = SyncPull(
            self.root,
            dirs=list(dirs),
            dir_times=dict(plan.dir_times),
            dir_sub_ns=dict(plan.dir_sub_ns),
            symlinks=list(links),
            deleted=list(deleted),
            protected=protected,
            staging=staging,
            done=False,
            keep=keep,
        )
        held = names = 0
        fresh = functools.partial(SyncPull, self.root, protected=protected, staging=staging, done=False)
        staged: set[str] = set()
        kept = set(keep)  # chunks the first page keeps: named by hash on every page
        on_first = reuse  # still filling the first page (the only one that can keep)
        held_anywhere: set[str] | None = None  # every chunk of the mirror's large files
        lifting = self.lifts.active
        with BeneathReader(self.directory) as reader:
            for rel, entry in plan.files:
                if lifting and entry[MODE] & 0o600 != 0o600:  # the program locked it (``_lifts``)
                    self.lifts.lift(self.directory, rel)
                path = self.workspace_path(rel)
                mtime, sub = store_time(entry[MTIME_NS])
                small = entry[SIZE] < BIG_FILE
                names += len(path)  # ``PAGE_PATHS`` of the files' paths
                if budget is not None and (
                    len(page.files) >= PAGE_FILES or (page.files and names > PAGE_PATHS)
                    or (small and held and held + entry[SIZE] > budget)
                ):  # fmt: skip
                    yield page
                    on_first = False
                    page, held, names = fresh(), 0, len(path)
                if not small:
                    source = sources.get(rel, rel)
                    previous = self.chunks.get(source, [])
                    known = set(previous) | staged | kept
                    last = self.prints.get(source)
                    before = last[1] if last is not None and list(last[0]) == previous else []
                    hashes: list[str] = []
                    prints: list[int] = []
                    size = 0
                    try:
                        for piece in reader.chunks(rel):
                            index = len(hashes)
                            if piece is HOLE:  # a hole: neither read nor hashed
                                fingerprint, digest = _HOLE_PRINT, HOLE_DIGEST
                            else:
                                fingerprint = xxh3_128_intdigest(piece, _SEED)
                                if index < len(before) and before[index] == fingerprint:
                                    digest = previous[index]  # the bytes the last sync had there
                                else:
                                    digest = hashlib.sha256(piece).hexdigest()
                            prints.append(fingerprint)
                            hashes.append(digest)
                            size += len(piece)
                            if digest in known:
                                continue
                            if on_first:
                                # A chunk the mirror holds in another file (a copy, ``cp big c``): the
                                # first page keeps it by reference instead of sending its bytes.
                                if held_anywhere is None:
                                    held_anywhere = set().union(*self.chunks.values())
                                if digest in held_anywhere:
                                    keep.append(digest)
                                    kept.add(digest)
                                    known.add(digest)
                                    continue
                            if budget is not None and held and held + len(piece) > budget:
                                yield page
                                on_first = False
                                page, held, names = fresh(), 0, len(path)
                            page.stage.append(piece)
                            page.stage_digests.append(digest)  # (its name there: not hashed again)
                            held += len(piece)
                            known.add(digest)
                            staged.add(digest)
                    except OSError as exc:
                        self.unread_now(rel, exc)
                        continue
                    plan.chunk_lists[rel] = hashes
                    plan.chunk_prints[rel] = prints
                    page.files.append(
                        MirrorFile(path, None, entry[MODE], mtime, size, None, hashes, rel in plan.same, sub)
                    )
                    continue
                try:
                    data = reader.read(rel, BIG_FILE)  # grown since the plan's look: the next pull's
                except OSError as exc:
                    self.unread_now(rel, exc)
                    continue
                held += len(data)
                page.files.append(
                    MirrorFile(path, data, entry[MODE], mtime, same=rel in plan.same, sub_ns=sub)
                )
        # Hard links last: their first name is on this page or an earlier one. On pages of their own
        # past ``PAGE_FILES``: 20,000 names of one file on one page held the owner's loop 0.3 s.
        for rel, first in plan.links:
            path = self.workspace_path(rel)
            names += len(path) + len(first)
            if budget is not None and (len(page.files) >= PAGE_FILES or (page.files and names > PAGE_PATHS)):
                yield page
                page, held, names = fresh(), 0, len(path) + len(first)
            page.files.append(MirrorFile(path, None, 0o644, 0, 0, first))
        yield dataclasses.replace(page, done=True, staging=staging if staged or kept else None)

    def unread_now(self, rel: str, exc: OSError) -> None:
        """The file ``rel`` could not be read: read at the next pull when only the moment failed
        (:data:`RETRY`), left to the watch otherwise (the path changed under the pull)."""
        if exc.errno in RETRY:
            self.unread.add(rel)

    def settle(
        self,
        now: dict[str, Entry],
        rev: int,
        skipped: Iterable[str],
        plan: PullPlan | None = None,
        moves: Sequence[tuple[str, str, int]] = (),
        conflicts: Iterable[str] = (),
    ) -> None:
        """Adopt the post-run state at ``rev``. Paths the pull left alone are removed from the mirror
        (a regular file in ``conflicts``, one the workspace changed too, is kept for the push to write
        the workspace's version into), their state forgotten, and the next push
        brings the workspace's version of each back, whole
        (``refetch``): a directory refused for a change below it held other workspace files too,
        which changed nothing since and no incremental push would send again. ``plan``: the pull's, whose
        large files' chunk lists the mirror now holds (without it, those of changed files are
        forgotten: the next push of one fetches all its chunks). ``moves``: workspace renames the pull
        followed (``(old, new, rev)``, in order), done here first: each one the mirror follows it
        holds (``own_revs``); one it cannot is dropped and its new name fetched again whole."""
        self.renamed()  # (its renames done: nothing to put back)
        self.forget_chunks(plan)
        unlinked = self._unlinked(plan)
        if plan is not None:
            self.chunks.update(plan.chunk_lists)
            for rel, prints in plan.chunk_prints.items():
                self.prints[rel] = (tuple(plan.chunk_lists[rel]), prints)
        before, self.state = self.state, now
        unread, self.unread = self.unread, set()
        for rel in unread:  # (after the state: its entry taken as unknown, the path forced)
            self.force(rel)
        for src, dst, move_rev in moves:
            if self.move_or_drop(src, dst):
                self.own_revs.append(move_rev)
        keep = set(conflicts)
        refused = [p for p in skipped if p != self.root and is_below(p, self.root) and p not in self.kept]
        for path in refused:
            rel = self.rel(path)
            entry = now.get(rel)
            if entry is None or entry[KIND] != "f" or path not in keep:
                self.refetch_elsewhere(rel, before)
                remove_beneath(self.directory, rel)
            else:
                self.refetch_elsewhere(rel, before, kept=True)
        # A conflicting regular file stays, its state forgotten: the push writes the workspace's version
        # into it (a program holding it open keeps it), or replaces it. Nothing else refused is held.
        self._forget(*(self.rel(path) for path in refused))
        self.refetch.update(refused, moved_names(refused, moves))
        if unlinked:  # their other names' ctime changed with no event there: taken in now
            self.reread(unlinked)
        self.rev = rev

    def _unlinked(self, plan: PullPlan | None) -> set[int]:
        """Inodes of files seen with several names (``linked``) of which the run removed or replaced a
        name (read before the state is adopted)."""
        if plan is None or not self.linked:
            return set()
        found = set()
        # (a file written through, ``plan.same``, kept every name: its others took its entry)
        written = [rel for rel, _ in plan.files if rel not in plan.same]
        for rel in [self.rel(path) for path in plan.deleted] + written:
            old = self.state.get(rel)
            if old is not None and old[KIND] == "f" and old[INO] in self.linked:
                found.add(old[INO])
        return found

    def forget_chunks(self, plan: PullPlan | None) -> None:
        """Forget the chunk lists of the files a run changed (their content is no longer that) or
        removed, below a removed directory too (the store frees their chunks: a pull taking them as
        held when a program makes the same file there again would name chunks the store lacks)."""
        if plan is None:
            return
        for rel, _ in [*plan.files, *plan.links]:
            self.chunks.pop(rel, None)
            self.prints.pop(rel, None)
        if plan.deleted and self.chunks:
            gone = {self.rel(path) for path in plan.deleted}
            for rel in [r for r in self.chunks if any(a in gone for a in _self_and_ancestors(r))]:
                del self.chunks[rel]
                self.prints.pop(rel, None)


def _self_and_ancestors(rel: str) -> Iterator[str]:
    """``rel`` and each directory above it, up to the mirror's root ("")."""
    while True:
        yield rel
        if not rel:
            return
        rel = rel.rpartition("/")[0]
