"""The push side of a mirror (see ``_mirror``): a page of the workspace's changes applied to the host
directory (never opening an existing node, never following a link), large files made ready for
their chunks and filled, the revision adopted once every page is in."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from ..storage import CHUNK_SIZE
from ..storage.paths import target_problem
from ._backend import MirrorFile, SyncPush, mirror_ns
from ._beneath import (
    CREATE,
    CREATED_MODE,
    SAFE_BITS,
    hole_chunks,
    make_parent,
    open_beneath,
    remove_beneath,
    remove_node,
    write_sparse,
)
from ._dir_times import set_dir_times
from ._entry import INO, KIND
from ._mirror_base import TARGET_TOO_LONG, TOO_LONG_KEPT, Entry, MirrorBase, entry_of, is_below
from ._scratch import remove_tree

__all__ = ["MirrorPush"]


class MirrorPush(MirrorBase):
    """Applying pushes to the mirror's directory (a part of :class:`~computer.runtime._mirror.Mirror`)."""

    written_into: set[int]  # (a ``Mirror`` field: see there)
    readers: Callable[[], set[int]] | None  # (likewise)
    _held: set[int] | None = None  # ``readers()`` as this page asked it (``_in_place``)

    def apply(self, push: SyncPush, *, first: bool = True) -> int:
        """Apply one page of a push; returns how many files were written. Everything made is owned by
        :attr:`owner` (the sandbox's host user) from the start: a chown afterwards would change the
        ctime the pull compares.

        ``first``: the push's first page (a full push then empties the mirror). Files whose content
        did not fit the page (``data is None``) are created empty and listed in :attr:`unfilled`: the
        caller fetches their bytes with :meth:`fill`. The mirror's ``rev`` is left to the caller,
        which sets it once every page is in (:meth:`finish_push`).

        An existing node is opened only to write a file the workspace wrote (``MirrorFile.same``) in
        place, without following a link or blocking, and only when it is that regular file; anything
        else where a file goes (a FIFO, a socket, a link a program left) is unlinked first and the file
        is created with ``O_EXCL | O_NOFOLLOW``, so a push never blocks on a FIFO nor writes through a
        link.
        """
        if not self.directory.is_dir():
            self.directory.mkdir(mode=0o755)
            self._own(self.directory)
        if push.full and first:
            self.unwatch()
            if self.lifts.active:  # a top a program locked (``_lifts``)
                self.lifts.lift(self.directory, "")
            for child in list(self.directory.iterdir()):
                remove_node(child)
            self.state.clear()
            self.chunks.clear()
            self.dir_times.clear()
            self.protected = set()
            self.reasons = {}
            self.lifts.forget_below_top()
        if self.lifts.locked:  # below a directory a program locked, as this process is not root
            self.lifts.lift_locked(self.directory, self._written(push))
        for src, dst in push.moves:
            self.move_or_drop(src, dst)  # one it cannot follow: the new name is fetched again, whole
        if first:
            self.unfilled = []
            self.written_into = set()
        self._held = None
        unlinked: set[int] = set()  # hard-linked files that lost a name here: the others are read again
        for path in push.deleted:
            rel = self.rel(path)
            unlinked |= self.linked_at(rel)
            remove_beneath(self.directory, rel)
            if path in self.protected or not push.full:
                self.protected = {p for p in self.protected if not is_below(p, path)}
        self._forget(*(self.rel(path) for path in push.deleted))
        self.protected.update(push.protected)
        self.reasons.update(push.reasons)
        push = self._within_room(push)
        # Directories made real in this page: a child's parents are not looked at again from the top
        # (a chain 1,359 levels deep took ~900,000 lstat calls of ever longer paths: 19 s).
        ready: set[str] = set()
        for d in push.dirs:
            host = self.host(d.path)
            rel = self.rel(d.path)
            if rel.rpartition("/")[0] not in ready:
                self._parent(host)
            if host.is_symlink() or (host.exists() and not host.is_dir()):
                remove_node(host)  # (a FIFO a program left: what the workspace holds below, whole)
                self.refetch.add(d.path)
            host.mkdir(exist_ok=True)
            self._own(host)
            os.chmod(host, self._given(rel, "d", d.mode))
            self.state[rel] = entry_of(os.lstat(host))
            ready.add(rel)
            if d.mtime is not None and rel:
                self.dir_times[rel] = mirror_ns(d.mtime, d.sub_ns)
        written = 0
        base = os.fspath(self.directory)
        relinked: dict[int, Entry] = {}  # files given a name here, by inode: their entry now
        rewritten: set[int] = set()  # ... of those, the ones written into (their content changed)
        for f in push.files:
            rel = self.rel(f.path)
            host = self.host(f.path)
            parent = rel.rpartition("/")[0]
            if parent not in ready:
                self._parent(host)
                ready.add(parent)
            if f.chunks is not None:
                replaced = self._prepare_chunked(host, f)
                if replaced is not None:
                    unlinked.add(replaced)
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
                # (Not one this push wrote into already, small or large, on any page: another
                # workspace file, linked to it by a program only, whose names were kept as conflicts:
                # a new file, s50/h7.)
                fresh = self._in_place(st)
                if (
                    fresh
                    and f.same
                    and f.link is None
                    and _rewrite_in_place(host, f, self._given(rel, "f", f.mode))
                ):
                    # The file the workspace wrote: written into, as a write does (every name of a
                    # hard-linked one shows it, a program holding it open writes on after it).
                    written_st = os.lstat(path)
                    self.state[rel] = entry_of(written_st)
                    if written_st.st_nlink > 1:
                        relinked[written_st.st_ino] = self.state[rel]
                        rewritten.add(written_st.st_ino)
                        self.written_into.add(written_st.st_ino)
                    written += 1
                    if f.data is None and f.length > 0:  # emptied; its pieces are fetched next
                        self.unfilled.append((f, None))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    unlinked |= self.linked_at(rel)
                    remove_tree(path)
                    ready = {p for p in ready if not is_below("/" + p, "/" + rel)}
                else:
                    if st.st_nlink > 1:
                        unlinked.add(st.st_ino)
                    os.unlink(path)
            if f.link is not None:
                now = self._link(self.rel(f.link), rel)
                if now is None:
                    self.refetch.add(f.path)  # its file is not here: fetched whole (one more round)
                else:
                    relinked[now[INO]] = now
                continue
            mode = self._given(rel, "f", f.mode)
            fd = os.open(path, CREATE, mode & 0o777)
            try:
                if self.owner is not None:
                    os.fchown(fd, *self.owner)
                if f.data:
                    write_sparse(fd, f.data, 0)
                if mode != CREATED_MODE.get(mode & 0o777):
                    os.fchmod(fd, mode)  # beyond what the umask left
                ns = mirror_ns(f.mtime, f.sub_ns)
                os.utime(fd, ns=(ns, ns))
                st = os.fstat(fd)
            finally:
                os.close(fd)
            written += 1
            if f.data is None and f.length > 0:
                self.unfilled.append((f, None))
            self.state[rel] = entry_of(st)
        if relinked:  # every name of a file linked or written here takes in its new ctime
            self.linked.update(relinked)
            self.take_in(relinked, rewritten=rewritten)
        if unlinked:  # (fetched again: the workspace may have written the name it removed)
            self.reread(unlinked, refetch=True, but={self.rel(f.path) for f in push.files})
        for link in push.symlinks:  # their parents too made real once a page (20,000 links 2,000 deep: hours)
            host = self.host(link.path)
            parent = self.rel(link.path).rpartition("/")[0]
            if parent not in ready:
                self._parent(host)
                ready.add(parent)
            remove_node(host)
            os.symlink(link.target, host)  # stored verbatim; only ever resolved inside the sandbox
            if self.owner is not None:
                os.lchown(host, *self.owner)
            if link.mtime is not None:  # the link's own time (``touch -h``, ``tar``, ``cp -a``)
                ns = mirror_ns(link.mtime, link.sub_ns)
                os.utime(host, ns=(ns, ns), follow_symlinks=False)
            self.state[self.rel(link.path)] = entry_of(os.lstat(host))
        return written

    def _parent(self, host: Path) -> None:
        """``make_parent``; where it replaced something the program left in the way (a FIFO over a
        directory the workspace kept whole: ``_special_dirs``), that directory is fetched whole."""
        for node in make_parent(self.directory, host, self.owner):
            self.refetch.add(self.workspace_path(os.fspath(node.relative_to(self.directory))))

    def _in_place(self, st: os.stat_result) -> bool:
        """Whether the workspace's write of the file ``st`` may go into it (``MirrorFile.same``): not
        one this push wrote into already, and not one of one name only a sandbox process holds for
        reading only: that one gets a new file, so the reader reads the old one whole (written into,
        a 3 MiB file read in the middle of a push was torn: old bytes, then new ones)."""
        if st.st_ino in self.written_into:
            return False
        if st.st_nlink > 1 or self.readers is None:
            return True  # (every name must show it: written in place, a reader may see it torn)
        if self._held is None:
            self._held = self.readers()
        return st.st_ino not in self._held

    def _within_room(self, push: SyncPush) -> SyncPush:
        """``push`` without the paths too long for the mirror (see ``room``): those are protected (the
        pull never touches them) with their reason, and every run lists them in ``skipped``."""
        room = self.room()
        quick = room // 4 + len(self.root)  # a workspace path this long fits (``too_long``)
        kinds = (push.dirs, push.files, push.symlinks)
        long = {
            x.path
            for xs in kinds
            for x in xs
            if len(x.path) > quick and self.too_long(self.rel(x.path), room)
        }
        # A target the storage refuses now (over what symlink(2) takes), kept from before it did.
        targets = {s.path for s in push.symlinks if target_problem(s.target) is not None}
        if not long and not targets:
            return push
        self.protected |= long | targets
        self.reasons.update(dict.fromkeys(long, TOO_LONG_KEPT.format(self.path_limit(room))))
        self.reasons.update(dict.fromkeys(targets, TARGET_TOO_LONG))
        long |= targets
        return dataclasses.replace(
            push,
            dirs=[d for d in push.dirs if d.path not in long],
            files=[f for f in push.files if f.path not in long],
            symlinks=[s for s in push.symlinks if s.path not in long],
        )

    def _given(self, rel: str, kind: str, mode: int) -> int:
        """The bits to set on ``rel`` for the workspace's ``mode`` (``_lifts``: lifted while the sync
        runs where they lock this process out)."""
        return self.lifts.given(rel, kind, mode & SAFE_BITS) if self.lifts.active else mode & SAFE_BITS

    def _written(self, push: SyncPush) -> list[str]:
        """Every mirror path ``push`` writes, removes, links from or renames (relative)."""
        paths = [*push.deleted, *(x.path for xs in (push.dirs, push.files, push.symlinks) for x in xs)]
        paths += [f.link for f in push.files if f.link is not None]
        paths += [p for move in push.moves for p in move[:2]]
        return [self.rel(p) for p in paths]

    def _link(self, existing: str, new: str) -> Entry | None:
        """Give the regular file the mirror holds at ``existing`` the name ``new`` (both parents opened
        below the mirror without following a link: one a program planted never links a file from
        elsewhere in); the file's entry now (its ctime changed), or None when it cannot."""
        fds: list[int] = []
        try:
            fds.append(open_beneath(self.directory, existing.rpartition("/")[0]))
            fds.append(open_beneath(self.directory, new.rpartition("/")[0]))
            name, other = existing.rpartition("/")[2], new.rpartition("/")[2]
            if not stat.S_ISREG(os.lstat(name, dir_fd=fds[0]).st_mode):
                return None
            os.link(name, other, src_dir_fd=fds[0], dst_dir_fd=fds[1], follow_symlinks=False)
            now = entry_of(os.lstat(other, dir_fd=fds[1]))
        except OSError:
            return None
        finally:
            for fd in fds:
                os.close(fd)
        self.state[existing] = self.state[new] = now
        return now

    def _prepare_chunked(self, host: Path, f: MirrorFile) -> int | None:
        """Make ready a large file that arrives as chunks. Only the chunks that differ from the copy
        the mirror holds are fetched when that copy is still exactly what was last synced (its chunk
        list known); else all of them. A file the workspace wrote (``same``) is written into the file
        the mirror holds, as a small one is (:func:`_rewrite_in_place`), unless this push wrote another
        workspace file into it already (``written_into``); anything else is a new file (a name the
        workspace replaced: the old file's other names keep its content), which starts as a copy of the
        held one when that is what was last synced, so the fetch stays the same."""
        rel = self.rel(f.path)
        assert f.chunks is not None
        old = self.chunks.pop(rel, None)
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            st = None
        synced = (
            old is not None
            and st is not None
            and stat.S_ISREG(st.st_mode)
            and self.state.get(rel) == entry_of(st)
        )
        # Not into a file this push wrote into already (see ``apply``: two workspace files a program
        # linked, both kept as conflicts; before, the second's chunks went into the first's file).
        fresh = st is not None and self._in_place(st)
        fd = _open_in_place(host) if f.same and fresh else None
        in_place = fd is not None
        replaced = None  # the inode of a hard-linked file this one replaces under its name
        if fd is None:
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                replaced = st.st_ino
            fd, synced = _new_file(host, f.mode, synced)
        elif not synced:
            os.ftruncate(fd, 0)  # every chunk comes again (into the same file): emptied first
        # Chunks of a hole (a sparse file's) are neither fetched nor written where the file has no
        # data yet (past the synced copy's end, or all of an emptied one): they stay holes.
        holes = hole_chunks(f.chunks, f.length)
        if synced:
            assert old is not None
            needed = [
                i
                for i, digest in enumerate(f.chunks)
                if (i >= len(old) and i not in holes) or (i < len(old) and old[i] != digest)
            ]
        else:
            needed = [i for i in range(len(f.chunks)) if i not in holes]
        try:
            if self.owner is not None:
                os.fchown(fd, *self.owner)
            os.ftruncate(fd, f.length)
            os.fchmod(fd, self._given(rel, "f", f.mode))
            ns = mirror_ns(f.mtime, f.sub_ns)
            os.utime(fd, ns=(ns, ns))
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self.state[rel] = entry_of(st)
        if in_place and st.st_nlink > 1:
            self.written_into.add(st.st_ino)
        if needed:
            self.unfilled.append((f, needed))
        else:
            self.chunks[rel] = list(f.chunks)
            self._filled(f)
        return replaced

    def fill_chunks(self, file: MirrorFile, pieces: dict[int, bytes], last: bool) -> None:
        """Write chunks (by index) of a large file :meth:`apply` made ready; ``last``: it is complete."""
        for index, data in pieces.items():
            self.fill(file, index * CHUNK_SIZE, data, done=False)
        if last and file.chunks is not None:
            self.chunks[self.rel(file.path)] = list(file.chunks)
            self._filled(file)

    def fill(self, file: MirrorFile, offset: int, data: bytes, *, done: bool = True) -> None:
        """Write ``data`` at ``offset`` of a file :meth:`apply` created empty (or emptied); the last
        piece (``offset + len(data) >= file.length`` or a short one) restores its mtime and records it
        (``done``: and, when it is, the file's other names take in its new ctime)."""
        host = self.host(file.path)
        parent = open_beneath(self.directory, self.rel(file.path).rpartition("/")[0])
        try:
            fd = os.open(host.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{file.path} is not a regular file in the mirror")
            write_sparse(fd, data, offset)  # its zero blocks stay holes where the file has one
            ns = mirror_ns(file.mtime, file.sub_ns)
            os.utime(fd, ns=(ns, ns))
            self.state[self.rel(file.path)] = entry_of(os.fstat(fd))
        finally:
            os.close(fd)
        if done and offset + len(data) >= file.length:
            self._filled(file)

    def _filled(self, file: MirrorFile) -> None:
        """A file written in place is complete: if it has other names, they take in its ctime."""
        rel = self.rel(file.path)
        entry = self.state.get(rel)
        if entry is not None and entry[KIND] == "f" and entry[INO] in self.linked:
            held = self.chunks.get(rel)
            self.take_in({entry[INO]: entry}, None if held is None else {entry[INO]: held}, {entry[INO]})

    def finish_push(self, rev: int, refetched: Iterable[str] = ()) -> None:
        """Every page is in: the mirror reflects ``rev`` (the first page's, a lower bound); revisions
        its own pulls made up to ``rev`` need no leaving out any more, nor the paths it ``refetched``."""
        self.unfilled = []
        if self.dir_times:
            # Last, once nothing more is made below them (each name made in a directory moves its
            # mtime): the workspace's times of the directories the push sent.
            set_dir_times(self.directory, self.dir_times)
            self.dir_times.clear()
        self.rev = rev
        self.own_revs = self.own_since(rev)
        self.refetch.difference_update(refetched)


def _open_in_place(host: Path) -> int | None:
    """A descriptor to write into the regular file at ``host``; None when ``host`` is anything else or
    cannot be opened for writing (a program runs it: ``ETXTBSY``). Opened without following a link and
    without blocking, and checked to be the file ``lstat`` saw."""
    try:
        st = os.lstat(host)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        fd = os.open(host, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    now = os.fstat(fd)
    if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
        os.close(fd)
        return None
    return fd


def _new_file(host: Path, mode: int, copy: bool) -> tuple[int, bool]:
    """Replace whatever is at ``host`` by a new empty file; with ``copy``, holding the old regular
    file's bytes first (copied in the kernel). Its descriptor, and whether the copy was made."""
    source = None
    if copy:
        try:
            source = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            if not stat.S_ISREG(os.fstat(source).st_mode):
                os.close(source)
                source = None
        except OSError:
            source = None
    try:
        remove_node(host)
        fd = os.open(host, CREATE, mode & 0o777)
        if source is None:
            return fd, False
        try:
            _copy_data(source, fd, os.fstat(source).st_size)
        except OSError:
            os.ftruncate(fd, 0)
            return fd, False
        return fd, True
    finally:
        if source is not None:
            os.close(source)


def _copy_data(source: int, fd: int, size: int) -> None:
    """Copy ``size`` bytes of ``source`` into the empty ``fd`` in the kernel, its data only: holes stay
    holes (``SEEK_DATA``/``SEEK_HOLE``; a plain copy wrote a sparse file's zeros out in full)."""
    at = 0
    while at < size:
        try:
            start = os.lseek(source, at, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            break  # only a hole from ``at`` on
        end = min(os.lseek(source, start, os.SEEK_HOLE), size)
        while start < end:
            done = os.copy_file_range(source, fd, end - start, start, start)
            if done == 0:
                end = start
                break
            start += done
        at = max(end, at + 1)
    os.ftruncate(fd, size)


def _rewrite_in_place(host: Path, f: MirrorFile, mode: int) -> bool:
    """Write ``f`` into the regular file at ``host`` (see :func:`_open_in_place`; one whose bytes come
    in pieces is emptied, and filled by :meth:`MirrorPush.fill`), giving it ``mode``; False when it
    cannot, and the caller replaces it."""
    fd = _open_in_place(host)
    if fd is None:
        return False
    try:
        os.ftruncate(fd, 0)
        write_sparse(fd, f.data or b"", 0)
        os.fchmod(fd, mode)
        ns = mirror_ns(f.mtime, f.sub_ns)
        os.utime(fd, ns=(ns, ns))
    finally:
        os.close(fd)
    return True
