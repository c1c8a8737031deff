"""Mirror I/O that never follows a link the sandbox made: reads of regular files by descriptor below
the mirror's directory (``O_NOFOLLOW`` at every component), ``lstat`` below it, parents made
without following links, and the creation flags and modes the mirror writes with."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ..storage import CHUNK_SIZE
from ._scratch import remove_below, remove_tree

__all__ = [
    "CREATE",
    "CREATED_MODE",
    "HOLE",
    "HOLE_DIGEST",
    "SAFE_BITS",
    "BeneathReader",
    "chmod_beneath",
    "cwd_problem",
    "hole_chunks",
    "lstat_beneath",
    "make_parent",
    "open_beneath",
    "read_beneath",
    "read_full",
    "readlink_beneath",
    "remove_node",
    "write_all",
    "write_sparse",
]


T = TypeVar("T")

# A whole chunk of a sparse file's hole (``truncate -s 4G``, a disk image): read as this one object
# (never from the file) and known by its hash, so a file's holes cost neither reads nor hashing in a
# pull nor memory in a push (a 3 GB sparse file took 3 GB of the mirror's tmpfs after a reopen).
HOLE = bytes(CHUNK_SIZE)
HOLE_DIGEST = hashlib.sha256(HOLE).hexdigest()


def hole_chunks(chunks: list[str], length: int) -> set[int]:
    """The indexes of a file's chunk list (``length`` bytes) that hold zeros only: :data:`HOLE`, and a
    short last chunk of zeros (``truncate -s 3000000``: before, its up to 512 KiB of zeros were fetched
    and written out by every push, the file's tail no hole in the mirror)."""
    holes = {i for i, digest in enumerate(chunks) if digest == HOLE_DIGEST}
    last, tail = len(chunks) - 1, length - (len(chunks) - 1) * CHUNK_SIZE
    if 0 < tail < CHUNK_SIZE and chunks[last] == _zeros_digest(tail):
        holes.add(last)
    return holes


@functools.lru_cache(maxsize=64)
def _zeros_digest(size: int) -> str:
    return hashlib.sha256(bytes(size)).hexdigest()


# As the kernel's path walk: at most this many symlinks followed for one path (``ELOOP`` past it).
_MAX_LINKS = 40


def read_beneath(directory: Path, rel: str) -> bytes:
    """Read the regular file ``rel`` below ``directory`` without following any symlink on the way.

    A running program may swap a file or a parent directory for a link to a host path between our
    look and our read; every component is opened with ``O_NOFOLLOW``, so the read stays in the mirror.
    """
    with BeneathReader(directory) as reader:
        return reader.read(rel)


_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_DIRS = 64  # directory descriptors a reader keeps open at most


class BeneathReader:
    """Reads many files below one directory as :func:`read_beneath` does, opening each directory on
    the way once (a pull of 1,000 new files in one directory opened it 1,000 times: 22 µs a file)."""

    def __init__(self, directory: Path) -> None:
        self._root = os.fspath(directory)
        self._dirs: dict[str, int] = {}  # relative directory -> descriptor ("" is the root)

    def __enter__(self) -> BeneathReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    close = __del__ = __exit__  # one not used in a ``with`` (a plan's) closes what it holds as it goes

    def readlink(self, rel: str) -> str:
        """The target of the symlink ``rel``, as :func:`readlink_beneath` (its parent opened once for
        all the links in it: 20,000 links at the end of a chain 2,000 deep opened a directory 40
        million times, one pull's plan taking hours in a thread of the owner's pool)."""
        parent, _, name = rel.rpartition("/")
        return os.readlink(name, dir_fd=self.dir(parent))

    def dir(self, rel: str) -> int:
        """The directory ``rel``'s descriptor, opened down from the nearest one held, one component
        at a time (a loop, not a recursion: a tree 1,000 levels deep raised ``RecursionError`` and
        its pull failed). The directories on the way are held while there is room; when none is
        left, every one but the start is closed."""
        dirs = self._dirs
        fd = dirs.get(rel)
        if fd is not None:
            return fd
        names: list[str] = []
        base = rel
        while base and base not in dirs:
            base, _, name = base.rpartition("/")
            names.append(name)
        held = dirs.get(base)
        if len(dirs) >= _OPEN_DIRS:  # all but the one to start from (a chain walked down: its last)
            for key in [key for key in dirs if key != base]:
                os.close(dirs.pop(key))
        if held is None:  # base is the root, not held yet
            held = dirs[""] = os.open(self._root, _NOFOLLOW | os.O_DIRECTORY)
        fd = held
        for name in reversed(names):
            try:
                child = os.open(name, _NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
            finally:
                if fd != held:
                    os.close(fd)
            base = f"{base}/{name}" if base else name
            if base == rel or len(dirs) < _OPEN_DIRS:
                dirs[base] = held = child
            fd = child
        return fd

    def _open_regular(self, rel: str) -> tuple[int, os.stat_result]:
        """A descriptor of the regular file ``rel`` (never a link followed, never blocking on a FIFO)."""
        parent, _, name = rel.rpartition("/")
        fd = os.open(name, _NOFOLLOW | os.O_NONBLOCK, dir_fd=self.dir(parent))
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(f"{rel} is not a regular file")
        return fd, st

    def chunks(self, rel: str) -> Iterator[bytes]:
        """The regular file ``rel`` in pieces of the storage's chunk size (one in memory at a time); a
        whole chunk inside a hole of the file (no data, ``SEEK_DATA``) is :data:`HOLE` itself, unread
        (one look per hole, not per chunk: a 4 GB sparse file is 8,192 of them)."""
        fd, st = self._open_regular(rel)
        size = st.st_size
        try:
            at = 0
            while True:
                data = _next_data(fd, at, size)
                while data - at >= CHUNK_SIZE:
                    at += CHUNK_SIZE
                    yield HOLE
                os.lseek(fd, at, os.SEEK_SET)
                piece = read_full(fd, CHUNK_SIZE)
                if piece:
                    yield piece
                if len(piece) < CHUNK_SIZE:
                    return
                at += CHUNK_SIZE
        finally:
            os.close(fd)

    def read(self, rel: str, most: int | None = None) -> bytes:
        """The regular file ``rel`` whole, at most ``most`` bytes of it: past them ``EAGAIN`` (a file the
        caller looked at as small grew since; read it at the next look, as a large one). Without the
        bound, a program that grew a file it had written small (``truncate -s 2G``: a hole, free on
        its tmpfs, outside its budgets) between the pull's look and its read had the owner read it whole
        into memory (``os.read`` of its size: zeros), or on and on while it kept growing."""
        fd, st = self._open_regular(rel)
        try:
            if most is not None and st.st_size > most:
                raise _grew(rel, st.st_size)
            data = os.read(fd, st.st_size + 1)
            if len(data) <= st.st_size:
                return data
            parts, held = [data], len(data)  # it grew since the fstat: read to the end
            while chunk := os.read(fd, 1 << 20):
                held += len(chunk)
                if most is not None and held > most:
                    raise _grew(rel, held)
                parts.append(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)


def _grew(rel: str, size: int) -> OSError:
    return OSError(errno.EAGAIN, f"grew to {size} bytes since it was looked at (read at the next look)", rel)


def read_full(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes: short only at the end of the file."""
    data = os.read(fd, size)
    if len(data) in (0, size):
        return data
    parts = [data]
    got = len(data)
    while got < size and (more := os.read(fd, size - got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# The granularity of a push's holes: the page, tmpfs's block (its ``st_blksize``) and the unit in
# which it allocates and reports data (``SEEK_DATA``).
BLOCK = 4096
_ZERO_BLOCK = bytes(BLOCK)
_STRIDE = BLOCK // 8
_SAMPLES_ZERO = bytes(8)


def write_sparse(fd: int, data: bytes, offset: int) -> None:
    """Write ``data`` at ``offset`` of ``fd``, leaving its all-zero blocks (:data:`BLOCK`, counted from
    ``offset``) unwritten where the file has a hole there (``SEEK_DATA``: past its end, an emptied or
    new file, a hole the copy held), so they stay holes; the file is made at least ``offset +
    len(data)`` long. Zeros over data the file holds are written (they replace it).

    Decision: a block of zeros a program wrote out explicitly (``dd if=/dev/zero``) is a hole in a
    mirror the push fills (after a reopen, or a workspace write): the same bytes, fewer allocated
    blocks (``st_blocks``, ``du``) than in the sandbox that wrote it. Before, a chunk (512 KiB) holding
    any data was written whole: a file with 4 KiB of data every MiB took 128 times its blocks.
    Cost: a piece with no run of zeros a block long (a dense file's) is one sampling slice and one
    write; else one ``startswith`` per block (~12-20 us per 512 KiB)."""
    size = len(data)
    whole = size - size % BLOCK
    starts = range(0, whole, BLOCK)
    tail = whole < size and data.count(0, whole) == size - whole  # a last short block of zeros
    view = memoryview(data)
    # Eight bytes of each block, 512 apart (one slice in C): a block of zeros has eight zeros in a row
    # there. Without them (a dense file's pieces) no block is looked at: one write.
    if not tail and _SAMPLES_ZERO not in data[_STRIDE - 1 : whole : _STRIDE]:
        _pwrite_all(fd, view, offset)
        return
    zero = [data.startswith(_ZERO_BLOCK, at) for at in starts]
    if whole < size:
        zero.append(tail)
    at, skipped = 0, False
    for empty, blocks in itertools.groupby(zero):
        end = min(size, at + BLOCK * sum(1 for _ in blocks))
        skipped = empty and _hole(fd, offset + at, offset + end)
        if not skipped:
            _pwrite_all(fd, view[at:end], offset + at)
        at = end
    if skipped and os.fstat(fd).st_size < offset + size:
        os.ftruncate(fd, offset + size)


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        wrote = os.pwrite(fd, view, offset)
        view, offset = view[wrote:], offset + wrote


def _hole(fd: int, start: int, end: int) -> bool:
    """Whether ``fd`` holds no data from ``start`` to ``end`` (a file system that cannot tell: data)."""
    try:
        return os.lseek(fd, start, os.SEEK_DATA) >= end
    except OSError as exc:
        return exc.errno == errno.ENXIO  # no data from ``start`` on (or past the end)


def lstat_beneath(directory: Path, rel: str) -> os.stat_result:
    """``lstat`` of ``rel`` below ``directory``, following no link on the way (ELOOP/ENOTDIR when a
    component is a link or not a directory: a link to ``/`` never reaches a host path)."""
    return _at_parent(directory, rel, lambda name, fd: os.lstat(name, dir_fd=fd))


def _at_parent(directory: Path, rel: str, call: Callable[[str, int], T]) -> T:
    """``call(name, parent_fd)`` for ``rel``'s last name and its parent opened beneath ``directory``."""
    parent, _, name = rel.rpartition("/")
    fd = open_beneath(directory, parent)
    try:
        return call(name, fd)
    finally:
        os.close(fd)


def readlink_beneath(directory: Path, rel: str) -> str:
    """The target of the symlink ``rel`` below ``directory``, following no link on the way (a parent
    swapped for a link to ``/proc/self`` read the host process's links into the workspace)."""
    return _at_parent(directory, rel, lambda name, fd: os.readlink(name, dir_fd=fd))


def chmod_beneath(directory: Path, rel: str, mode: int) -> os.stat_result:
    """Set the mode of the file or directory ``rel`` below ``directory`` (never a link's target, nor
    through a link on the way: a parent swapped for a link to a host directory made the host chmod
    a host file); its ``lstat`` after. Through ``/proc/self/fd`` of an ``O_PATH`` descriptor, which
    needs no read permission (a program's ``chmod 4000``)."""
    node = _at_parent(
        directory, rel, lambda name, fd: os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    )
    try:
        if stat.S_ISLNK(os.fstat(node).st_mode):
            raise OSError(errno.ELOOP, "a symlink", f"{directory}/{rel}")
        os.chmod(f"/proc/self/fd/{node}", mode)
        return os.fstat(node)
    finally:
        os.close(node)


def open_beneath(directory: Path, rel: str, flags: int = _NOFOLLOW | os.O_DIRECTORY) -> int:
    """A descriptor of ``rel`` below ``directory`` ("": itself), each name on the way opened with
    ``flags`` (by default: as a directory), no link followed on the way."""
    fd = os.open(directory, flags | os.O_DIRECTORY)
    for name in rel.split("/") if rel else ():
        try:
            child = os.open(name, flags, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# The mode ``open(O_CREAT, mode)`` gives a file under this process's umask: no fchmod when it matches.
CREATED_MODE = {mode: mode & ~_umask() for mode in range(0o1000)}

# A mode a mirror gives a file or directory: never setuid or setgid.
SAFE_BITS = 0o1777
# How a push creates a file: never opens what was there (it was unlinked), never follows a link.
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_parent(directory: Path, host: Path, owner: tuple[int, int] | None = None) -> list[Path]:
    """Make ``host``'s parents real directories below ``directory``; those that replaced something else.

    A link or file where a directory must go is removed: a run may have left a symlink pointing out of
    the mirror, and the host must never write through it.
    """
    replaced: list[Path] = []
    current = directory
    for name in host.relative_to(directory).parts[:-1]:
        current = current / name
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            current.mkdir()
            if owner is not None:
                os.chown(current, *owner)
            continue
        if not stat.S_ISDIR(st.st_mode):
            remove_node(current)
            current.mkdir()
            if owner is not None:
                os.chown(current, *owner)
            replaced.append(current)
    return replaced


def remove_node(host: Path) -> None:
    """Remove whatever is at ``host`` (a whole tree for a directory), never following a link."""
    try:
        st = os.lstat(host)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree(host)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(host)


def remove_beneath(directory: Path, rel: str) -> None:
    """:func:`remove_node` of ``rel`` below ``directory``, following no link on the way: when a
    parent is a link (a program planted it) or gone, nothing is removed (a path resolved from the
    top would have followed it to the host)."""
    parent, _, name = rel.rpartition("/")
    try:
        fd = open_beneath(directory, parent)
    except OSError:
        return
    try:
        st = os.lstat(name, dir_fd=fd)
        if stat.S_ISDIR(st.st_mode):
            remove_below(fd, name, f"{directory}/{rel}")
        else:
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _next_data(fd: int, at: int, size: int) -> int:
    """Where the data of ``fd`` at or after ``at`` starts, with the last partial chunk (from the last
    whole chunk boundary up to ``size``) always counted as data (read, however it is stored); ``at``
    when the file cannot tell."""
    end = size - size % CHUNK_SIZE  # whole chunks end here
    if at >= end:
        return at
    try:
        return min(os.lseek(fd, at, os.SEEK_DATA), end)
    except OSError as exc:
        return end if exc.errno == errno.ENXIO else at  # ENXIO: no data from ``at`` on


def cwd_problem(directory: Path, root: str, cwd: str) -> str | None:
    """Why a run cannot start in ``cwd`` (a canonical workspace path at or below the mount ``root``,
    which ``directory`` mirrors), or None. Links are followed as in the sandbox, where the mirror is
    mounted at ``root``: an absolute target names a sandbox path (the mirror's below ``root``), and a
    path may climb above ``root`` and come back (``up/workspace`` with ``up -> ..``). A cwd that ends
    out of the mount (``up -> ..``, ``out -> /secret``) is refused: the program ran in the sandbox's
    own ``/`` (or a missing path), where nothing it wrote was synced and nothing said so. Only
    directories already found are looked into (no link is followed on the host)."""
    top = [n for n in root.split("/") if n]
    at: list[str] = []  # the sandbox path so far, as names
    todo = cwd.split("/")[::-1]
    links = 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if at:
                at.pop()
            continue
        at.append(name)
        if at[: len(top)] != top[: len(at)]:
            return f"cwd {cwd} leads out of the mount root {root} through a symlink"
        if len(at) <= len(top):
            continue  # the mount root or a directory above it
        host = directory.joinpath(*at[len(top) :])
        try:
            st = os.lstat(host)
        except OSError:
            return f"cwd {cwd} is not a directory in the workspace"
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                return f"cwd {cwd}: too many levels of symbolic links"
            at.pop()
            target = os.readlink(host)
            if target.startswith("/"):
                at.clear()
            todo.extend(target.split("/")[::-1])
        elif not stat.S_ISDIR(st.st_mode):
            return f"cwd {cwd} is not a directory in the workspace"
    if len(at) < len(top):
        return f"cwd {cwd} leads out of the mount root {root} through a symlink"
    return None
