"""``Mirror``: a host directory mirroring a workspace subtree for the shell backend.

A mirror remembers the workspace revision it reflects (``rev``) and the state of every entry it
wrote (inode, size, mtime, ctime, mode), so a push touches only what changed since, and after a run
a single directory walk tells what the program created, changed or deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import secrets
import stat
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from ..storage import CHUNK_SIZE
from ._backend import BIG_FILE, MirrorDir, MirrorFile, MirrorSymlink, SyncPull, SyncPush
from ._beneath import (
    CREATE,
    CREATED_MODE,
    SAFE_BITS,
    BeneathReader,
    make_parent,
    open_beneath,
    remove_node,
    write_all,
)
from ._scratch import remove_tree
from ._watch import TreeWatch

__all__ = [
    "Entry",
    "Mirror",
    "PullPlan",
    "entry_of",
]


class Entry(NamedTuple):
    """The change-detection key of one path of the mirror, from its ``lstat``: the program cannot
    forge ctime, so any write, chmod or touch is seen even when size and mtime come out the same."""

    kind: str  # "f" file, "d" directory, "l" symlink, "o" anything else (never synced)
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    mode: int  # permission bits (``stat.S_IMODE``)


class Closeable(Protocol):
    """Something kept ready for a mirror's next run (a prepared sandbox); closed when the mirror goes."""

    def close(self) -> None: ...


@dataclass
class Mirror:
    """One host directory reflecting ``root`` of a workspace at ``rev``."""

    directory: Path
    root: str
    rev: int | None = None
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
    # The chunk hashes of the content each large file of the mirror holds (by relative path), as last
    # synced: a push moves only the chunks that differ, a pull sends only chunks the store lacks.
    chunks: dict[str, list[str]] = field(default_factory=dict, repr=False)
    # The host uid/gid that must own what the mirror writes (the sandbox's user), or None.
    owner: tuple[int, int] | None = None
    # File bytes the mirror holds and when it went idle (for the process's scratch budget).
    held_bytes: int = 0
    idle_since: float = 0.0
    # Revisions after ``rev`` that the mirror's own pulls committed (a push leaves them out).
    own_revs: list[int] = field(default_factory=list)

    def host(self, path: str) -> Path:
        return self.directory / self.rel(path)

    def rel(self, path: str) -> str:
        if self.root == "/":
            return path[1:]
        return path[len(self.root) + 1 :]

    def workspace_path(self, rel: str) -> str:
        if not rel:
            return self.root
        return f"/{rel}" if self.root == "/" else f"{self.root}/{rel}"

    def invalidate(self) -> None:
        """Forget what the mirror holds: the next push is a full one."""
        self.rev = None
        self.unsettled = None
        self.own_revs = []
        self.unwatch()
        self.drop_standby()

    def take_standby(self) -> Closeable | None:
        standby, self.standby = self.standby, None
        return standby

    def drop_standby(self) -> None:
        standby = self.take_standby()
        if standby is not None:
            standby.close()

    # ------------------------------------------------------------------ push

    def apply(self, push: SyncPush, *, first: bool = True) -> int:
        """Apply one page of a push; returns how many files were written. Everything made is owned by
        :attr:`owner` (the sandbox's host user) from the start: a chown afterwards would change the
        ctime the pull compares.

        ``first``: the push's first page (a full push then empties the mirror). Files whose content
        did not fit the page (``data is None``) are created empty and listed in :attr:`unfilled`: the
        caller fetches their bytes with :meth:`fill`. The mirror's ``rev`` is left to the caller,
        which sets it once every page is in (:meth:`finish_push`).

        Nothing here opens an existing node: whatever stands where a file goes (a FIFO, a socket, a
        link a program left) is unlinked first and the file is created with ``O_EXCL | O_NOFOLLOW``,
        so a push never blocks on a FIFO nor writes through a link.
        """
        if not self.directory.is_dir():
            self.directory.mkdir(mode=0o755)
            self._own(self.directory)
        if push.full and first:
            self.unwatch()
            for child in list(self.directory.iterdir()):
                remove_node(child)
            self.state.clear()
            self.chunks.clear()
            self.protected = set()
            self.reasons = {}
        if first:
            self.unfilled = []
        for path in push.deleted:
            rel = self.rel(path)
            remove_node(self.directory / rel)
            self._forget(rel)
            if path in self.protected or not push.full:
                self.protected = {p for p in self.protected if not _within(p, path)}
        self.protected.update(push.protected)
        self.reasons.update(push.reasons)
        for d in push.dirs:
            host = self.host(d.path)
            make_parent(self.directory, host, self.owner)
            if host.is_symlink() or (host.exists() and not host.is_dir()):
                remove_node(host)
            host.mkdir(exist_ok=True)
            self._own(host)
            os.chmod(host, d.mode & SAFE_BITS)
            self.state[self.rel(d.path)] = _entry(os.lstat(host))
        written = 0
        base = os.fspath(self.directory)
        ready: set[str] = set()  # parent directories already made real in this page
        for f in push.files:
            rel = self.rel(f.path)
            host = self.host(f.path)
            parent = rel.rpartition("/")[0]
            if parent not in ready:
                make_parent(self.directory, host, self.owner)
                ready.add(parent)
            if f.chunks is not None:
                self._prepare_chunked(host, f)
                written += 1
                continue
            if self.chunks:
                self.chunks.pop(rel, None)
            path = f"{base}/{rel}"
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                st = None
            if st is not None:
                if f.link is None and f.data is not None and st.st_nlink > 1 and _rewrite_shared(host, f):
                    # One name of a hard-linked file: written in place, so every name shows it.
                    self.state[rel] = _entry(os.lstat(path))
                    written += 1
                    continue
                if stat.S_ISDIR(st.st_mode):
                    remove_tree(path)
                    ready = {p for p in ready if not _within("/" + p, "/" + rel)}
                else:
                    os.unlink(path)
            if f.link is not None:
                try:
                    os.link(self.host(f.link), host, follow_symlinks=False)
                except OSError:
                    continue  # the first name is gone: the next push carries this one whole
                self.state[self.rel(f.path)] = _entry(os.lstat(host))
                self.state[self.rel(f.link)] = _entry(os.lstat(self.host(f.link)))
                continue
            fd = os.open(path, CREATE, f.mode & 0o777)
            try:
                if self.owner is not None:
                    os.fchown(fd, *self.owner)
                if f.data:
                    write_all(fd, f.data)
                if f.mode & 0o7777 != CREATED_MODE.get(f.mode & 0o777):
                    os.fchmod(fd, f.mode & SAFE_BITS)  # beyond what the umask left
                ns = f.mtime * 1_000_000
                os.utime(fd, ns=(ns, ns))
                st = os.fstat(fd)
            finally:
                os.close(fd)
            written += 1
            if f.data is None and f.length > 0:
                self.unfilled.append((f, None))
            self.state[rel] = _entry(st)
        for link in push.symlinks:
            host = self.host(link.path)
            make_parent(self.directory, host, self.owner)
            remove_node(host)
            os.symlink(link.target, host)  # stored verbatim; only ever resolved inside the sandbox
            if self.owner is not None:
                os.lchown(host, *self.owner)
            self.state[self.rel(link.path)] = _entry(os.lstat(host))
        return written

    def _prepare_chunked(self, host: Path, f: MirrorFile) -> None:
        """Make ready a large file that arrives as chunks: the copy the mirror holds is kept (and only
        the chunks that differ are fetched) when it is still exactly what was last synced."""
        rel = self.rel(f.path)
        assert f.chunks is not None
        old = self.chunks.pop(rel, None)
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            st = None
        keep = (
            old is not None
            and st is not None
            and stat.S_ISREG(st.st_mode)
            and self.state.get(rel) == _entry(st)
        )
        if keep:
            assert old is not None
            fd = os.open(host, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            needed = [i for i, h in enumerate(f.chunks) if i >= len(old) or old[i] != h]
        else:
            remove_node(host)
            fd = os.open(host, CREATE, f.mode & 0o777)
            needed = list(range(len(f.chunks)))
        try:
            if self.owner is not None:
                os.fchown(fd, *self.owner)
            os.ftruncate(fd, f.length)
            os.fchmod(fd, f.mode & SAFE_BITS)
            ns = f.mtime * 1_000_000
            os.utime(fd, ns=(ns, ns))
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self.state[rel] = _entry(st)
        if needed:
            self.unfilled.append((f, needed))
        else:
            self.chunks[rel] = list(f.chunks)

    def fill_chunks(self, file: MirrorFile, pieces: dict[int, bytes], last: bool) -> None:
        """Write chunks (by index) of a large file :meth:`apply` made ready; ``last``: it is complete."""
        for index, data in pieces.items():
            self.fill(file, index * CHUNK_SIZE, data)
        if last and file.chunks is not None:
            self.chunks[self.rel(file.path)] = list(file.chunks)

    def fill(self, file: MirrorFile, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of a file :meth:`apply` created empty; the last piece
        (``offset + len(data) >= file.length`` or a short one) restores its mtime and records it."""
        host = self.host(file.path)
        parent = open_beneath(self.directory, self.rel(file.path).rpartition("/")[0])
        try:
            fd = os.open(host.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{file.path} is not a regular file in the mirror")
            os.pwrite(fd, data, offset)
            ns = file.mtime * 1_000_000
            os.utime(fd, ns=(ns, ns))
            self.state[self.rel(file.path)] = _entry(os.fstat(fd))
        finally:
            os.close(fd)

    def finish_push(self, rev: int) -> None:
        """Every page is in: the mirror reflects ``rev`` (the first page's, a lower bound)."""
        self.unfilled = []
        self.rev = rev

    def _own(self, host: Path) -> None:
        if self.owner is not None:
            os.lchown(host, *self.owner)

    def _forget(self, rel: str) -> None:
        prefix = rel + "/"
        for key in [k for k in self.state if k == rel or k.startswith(prefix)]:
            del self.state[key]
            self.chunks.pop(key, None)

    # ------------------------------------------------------------------ pull

    def scan(self) -> dict[str, Entry]:
        """Walk the directory: every entry below it, by relative path."""
        out: dict[str, Entry] = {}
        stack = [("", str(self.directory))]
        while stack:
            rel, host = stack.pop()
            try:
                it = os.scandir(host)
            except OSError:
                continue
            with it:
                for e in it:
                    child = f"{rel}/{e.name}" if rel else e.name
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out[child] = _entry(st)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append((child, e.path))
        return out

    def arm(self) -> None:
        """Start watching for the run's changes; events the push itself caused are dropped."""
        if self.watch is not None and self.watch.drain() is None:
            self.unwatch()
        if self.watch is None:
            try:
                self.watch = TreeWatch(self.directory)
            except OSError:
                self.watch = None  # no inotify here: every pull walks the tree

    def quiet(self) -> bool:
        """True when the watch saw no change since it was armed (so :meth:`collect` is trivial)."""
        return self.watch is not None and self.watch.pending() == 0

    def unwatch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def plan(self) -> tuple[PullPlan, dict[str, Entry]]:
        """What the program changed since the push (no file bytes read yet), and the new state to
        adopt after the pull. With a healthy watch only the touched paths are examined; otherwise the
        whole tree is walked."""
        touched = self.watch.drain() if self.watch is not None else None
        if touched is None:
            self.unwatch()
            now = self.scan()
            return self._plan(now, set(now) | set(self.state)), now
        if not touched:  # nothing changed: no copy of the state (10,000 entries: 0.3 ms)
            return PullPlan(), self.state
        now = dict(self.state)
        candidates = set(touched)
        base = os.fspath(self.directory)
        gone = self.watch.gone if self.watch is not None else set()
        for rel in sorted(touched, key=lambda r: r.count("/")):
            try:
                # A path whose last event removed it is gone: the program has exited, nothing can
                # have brought it back (1,000 lstat calls that fail cost 2 ms).
                st = None if rel in gone else os.lstat(f"{base}/{rel}")
            except OSError:
                st = None
            entry = _entry(st) if st is not None else None
            if entry is None or entry.kind != "d":
                prefix = rel + "/"
                below = [k for k in now if k.startswith(prefix)] if _was_dir(self.state, now, rel) else []
                for key in below:
                    del now[key]
                candidates.update(below)
            if entry is None:
                now.pop(rel, None)
            else:
                now[rel] = entry
        return self._plan(now, candidates), now

    def collect(self, max_bytes: int | None = None) -> tuple[SyncPull, dict[str, Entry]]:
        """:meth:`plan` with every changed file read, as one :class:`SyncPull` (small pulls, tests)."""
        plan, now = self.plan()
        return self.read_all(plan), now

    def read_all(self, plan: PullPlan) -> SyncPull:
        pages = list(self.pages(plan, budget=None))
        return pages[0] if pages else SyncPull(self.root, protected=sorted(self.protected))

    def _diff(self, now: dict[str, Entry], candidates: set[str], max_bytes: int | None = None) -> SyncPull:
        return self.read_all(self._plan(now, candidates))

    def _plan(self, now: dict[str, Entry], candidates: set[str]) -> PullPlan:
        plan = PullPlan()
        first_name: dict[int, str] = {}  # inode -> the first changed path naming it (hard links)
        for rel in sorted(candidates):
            old = self.state.get(rel)
            entry = now.get(rel)
            if old == entry:
                continue
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:  # a name the workspace cannot hold: leave it in the mirror only
                raw = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                plan.unsyncable[self.workspace_path(raw)] = NOT_UTF8
                continue
            path = self.workspace_path(rel)
            if entry is None:
                plan.deleted.append(path)
                continue
            kind = entry.kind
            if kind in "fd" and entry.mode & 0o6000:
                # setuid/setgid never survive, not even in the mirror (the sandbox's own user owns it,
                # but nobody gets a set-id program out of a run).
                with contextlib.suppress(OSError, NotImplementedError):
                    os.chmod(self.directory / rel, entry.mode & SAFE_BITS, follow_symlinks=False)
                    entry = now[rel] = _entry(os.lstat(self.directory / rel))
            if kind == "d":
                if old is None or old.kind != "d" or old.mode != entry.mode:
                    plan.dirs.append(MirrorDir(path, entry.mode))
            elif kind == "l":
                with contextlib.suppress(OSError):
                    plan.symlinks.append(MirrorSymlink(path, os.readlink(self.directory / rel)))
            elif kind == "f":
                ino = entry.ino
                if ino in first_name:
                    plan.links.append((rel, first_name[ino]))
                else:
                    first_name[ino] = path
                    plan.files.append((rel, entry))
            else:
                # Never synced, and nothing is lost for it either: a workspace file the program
                # replaced by a FIFO or socket stays in the workspace (reported in ``skipped``).
                plan.unsyncable[path] = SPECIAL
                continue
            if old is not None and old.kind != kind:
                plan.deleted.append(path)  # replaced by another kind: remove first
        self._other_names(plan, now, first_name)
        plan.dirs.sort(key=lambda d: d.path.count("/"))
        return plan

    def _other_names(self, plan: PullPlan, now: dict[str, Entry], first_name: dict[int, str]) -> None:
        """A changed file with other names the program did not touch (a write through one hard link
        changes them all): those names go in the pull as links of it, so the workspace agrees."""
        shared = []
        for rel, _ in plan.files:
            with contextlib.suppress(OSError):
                if os.lstat(self.directory / rel).st_nlink > 1:
                    shared.append(rel)
        if not shared:
            return
        by_ino: dict[int, list[str]] = {}
        for rel, entry in now.items():
            if entry.kind == "f":
                by_ino.setdefault(entry.ino, []).append(rel)
        listed = {rel for rel, _ in plan.links}
        for rel in shared:
            ino = now[rel].ino
            for other in by_ino.get(ino, ()):
                if other != rel and other not in listed and first_name.get(ino) != self.workspace_path(other):
                    plan.links.append((other, first_name[ino]))
                    listed.add(other)

    def pages(self, plan: PullPlan, budget: int | None) -> Generator[SyncPull, None, None]:
        """The pull, cut into pages of at most ``budget`` new bytes (None: one page).

        Removals, directories and links go on the first page (so a later page never lands in a tree
        the first one still has to clear); files fill pages in path order. A large file (at least two
        chunks) is read a chunk at a time and hashed: chunks the store already holds (the ones the
        mirror last synced for that path, or staged earlier in this pull) travel as their hash, new
        ones as bytes on the page's ``stage``, so a 4 KiB change in a 100 MB file moves one chunk and
        no page holds more than ``budget`` bytes whatever the file's size. Files the program changed
        into something else meanwhile are left out."""
        protected = sorted(self.protected)
        staging = secrets.token_hex(8)
        page = SyncPull(
            self.root,
            dirs=list(plan.dirs),
            symlinks=list(plan.symlinks),
            deleted=list(plan.deleted),
            protected=protected,
            staging=staging,
            done=False,
        )
        held = 0
        staged: set[str] = set()
        with BeneathReader(self.directory) as reader:
            for rel, entry in plan.files:
                path = self.workspace_path(rel)
                mtime = entry.mtime_ns // 1_000_000
                if entry.size >= BIG_FILE:
                    known = set(self.chunks.get(rel, ())) | staged
                    hashes: list[str] = []
                    size = 0
                    try:
                        for piece in reader.chunks(rel):
                            digest = hashlib.sha256(piece).hexdigest()
                            hashes.append(digest)
                            size += len(piece)
                            if digest in known:
                                continue
                            if budget is not None and held and held + len(piece) > budget:
                                yield page
                                page, held = (
                                    SyncPull(self.root, protected=protected, staging=staging, done=False),
                                    0,
                                )
                            page.stage.append(piece)
                            held += len(piece)
                            known.add(digest)
                            staged.add(digest)
                    except OSError:
                        continue
                    plan.chunk_lists[rel] = hashes
                    page.files.append(MirrorFile(path, None, entry.mode, mtime, size, None, hashes))
                    continue
                if budget is not None and held and held + entry.size > budget:
                    yield page
                    page, held = SyncPull(self.root, protected=protected, staging=staging, done=False), 0
                try:
                    data = reader.read(rel)
                except OSError:
                    continue
                held += len(data)
                page.files.append(MirrorFile(path, data, entry.mode, mtime))
        # Hard links last: their first name is on this page or an earlier one.
        for rel, first in plan.links:
            page.files.append(MirrorFile(self.workspace_path(rel), None, 0o644, 0, 0, first))
        yield dataclasses.replace(page, done=True, staging=staging if staged else None)

    def settle(
        self, now: dict[str, Entry], rev: int, skipped: Iterable[str], plan: PullPlan | None = None
    ) -> None:
        """Adopt the post-run state at ``rev``. Paths the pull left alone are removed from the mirror
        (their state forgotten), so the next push brings the workspace's version back: ``rev`` is
        then the run's base revision, before the workspace's change. ``plan``: the pull's, whose
        large files' chunk lists the mirror now holds (without it, those of changed files are
        forgotten: the next push of one fetches all its chunks)."""
        self.forget_chunks(plan)
        if plan is not None:
            self.chunks.update(plan.chunk_lists)
        self.state = now
        for path in skipped:
            if path == self.root or not _within(path, self.root) or path in self.kept:
                continue
            rel = self.rel(path)
            remove_node(self.directory / rel)
            self._forget(rel)
        self.rev = rev

    def forget_chunks(self, plan: PullPlan | None) -> None:
        """Forget the chunk lists of the files a run changed (their content is no longer that)."""
        if plan is None:
            return
        for rel, _ in plan.files:
            self.chunks.pop(rel, None)
        for rel, _ in plan.links:
            self.chunks.pop(rel, None)


@dataclass
class PullPlan:
    """What a run changed, before any file's bytes are read (see :meth:`Mirror.pages`)."""

    files: list[tuple[str, Entry]] = field(default_factory=list)  # (relative path, entry)
    dirs: list[MirrorDir] = field(default_factory=list)
    symlinks: list[MirrorSymlink] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (relative path, first name's path)
    # Filled by ``Mirror.pages``: the chunk hashes of each large file it sent as chunks.
    chunk_lists: dict[str, list[str]] = field(default_factory=dict)
    # Paths left in the mirror only, with the reason (names the workspace cannot hold, FIFOs…).
    unsyncable: dict[str, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.files or self.dirs or self.symlinks or self.deleted or self.links)

    def size(self) -> int:
        return sum(entry.size for _, entry in self.files)


NOT_UTF8 = "the name is not UTF-8: the workspace cannot hold it (it stays in the sandbox only)"
SPECIAL = "not a regular file, directory or symlink (FIFO, socket or device): never synced"


def entry_of(st: os.stat_result) -> Entry:
    """The change-detection key of one ``lstat`` result."""
    return _entry(st)


# What ``Entry(...)`` does minus its Python-level ``__new__``: a full scan builds one per path (10,000
# paths: Entry(...) cost ~10% of the walk).
_new_entry = tuple.__new__


def _entry(st: os.stat_result) -> Entry:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return _new_entry(Entry, ("d", 0, 0, 0, 0, mode))
    if stat.S_ISLNK(st.st_mode):
        return _new_entry(Entry, ("l", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode))
    if stat.S_ISREG(st.st_mode):
        return _new_entry(Entry, ("f", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode))
    return _new_entry(Entry, ("o", st.st_ino, 0, 0, 0, mode))  # fifos, sockets: never synced


def _was_dir(state: dict[str, Entry], now: dict[str, Entry], rel: str) -> bool:
    old = state.get(rel) or now.get(rel)
    return old is not None and old.kind == "d"


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def _rewrite_shared(host: Path, f: MirrorFile) -> bool:
    """Write ``f`` into the regular file at ``host`` in place when it has other names (hard links);
    False when ``host`` is anything else (then the caller replaces it). The descriptor is opened
    without following a link and without blocking, and checked to be that same regular file."""
    try:
        st = os.lstat(host)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return False
    fd = os.open(host, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
            return False
        os.ftruncate(fd, 0)
        write_all(fd, f.data or b"")
        os.fchmod(fd, f.mode & SAFE_BITS)
        ns = f.mtime * 1_000_000
        os.utime(fd, ns=(ns, ns))
    finally:
        os.close(fd)
    return True
