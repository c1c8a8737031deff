"""Files a live sandbox's processes write through shared memory mappings (``mmap`` with
``MAP_SHARED``: ``numpy.memmap``, LMDB, a program's own ring buffer).

Such a write moves neither the file's mtime nor its ctime on tmpfs (the mirror's scratch by
default: a page written once stays writable, so only its first write after the mapping is seen), and
no inotify event names it. A live sandbox's pulls go by events and ``lstat``: before, a background
program's second write through its mapping never reached the workspace, not at the next tick, not at
the sandbox's end (the workspace kept ``v1`` for good while the file said ``v2``).

:class:`MappedFiles` (one per live sandbox) looks at its processes' mappings at each sync (their
``/proc/<pid>/maps``: shared, writable, a file of the mirror's filesystem) and remembers those files
with a fingerprint of their content; a file whose fingerprint moved since the last look (or that is
newly mapped) is forced into the next pull (``Mirror.force``). A file no longer mapped is looked at
once more and then forgotten: any later write to it goes through ``write`` and moves its times.

Bounded: ``MAPS_BYTES`` of each process's maps are read, ``MAPS_LOOKED`` of all of them (a process with 65,000 mappings is cut
short: it only hides its own files from its own workspace), and ``MAX_FILES`` files are followed; a
sync's look (``paced``) comes at most every ``PERIOD`` (1 s) and takes at most a tenth of the time,
as the walk of an unwatched tree (~36 µs a process with no mapping, ~0.1 ms with ten; 100 MB
mapped: 60-180 ms on a loaded machine); the end's always comes.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable

from xxhash import xxh3_128

from ._beneath import HOLE, BeneathReader
from ._entry import INO, KIND
from ._mirror import Mirror

__all__ = [
    "FDINFO_BYTES",
    "FDS_LOOKED",
    "MAPS_BYTES",
    "MAPS_LOOKED",
    "MAX_FILES",
    "PERIOD",
    "MappedFiles",
    "read_only_held",
    "shared_writable",
]

MAPS_BYTES = 1 << 20
# What one ``read_only_held`` looks at, every process of the sandbox together (see there): a look
# within both takes ~30 ms at most.
FDS_LOOKED = 8192
MAPS_LOOKED = 8 << 20
LOCKED_KEPT = 4096  # files a live sandbox's processes were seen locking, kept at most
MAX_FILES = 256
# What ``_reader`` reads of a descriptor's fdinfo: its position, flags, mount and inode lines (~60
# bytes) and its first ``lock:`` line (~60 more).
FDINFO_BYTES = 512
# A lock's line in a descriptor's fdinfo (the kernel lists flock, then POSIX and OFD locks, leases last).
# Not a lease: a write into a leased file waits for its break, and the push's new file spares that.
_LOCK_LINE = re.compile(rb"^lock:\s*[0-9]+: (?:FLOCK|POSIX|OFDLCK) ", re.M)
PERIOD = 1.0


def _maps_of(dev: int, perms: bytes) -> re.Pattern[bytes]:
    """A ``/proc/<pid>/maps`` line of a file on the device ``dev`` mapped with ``perms`` (a regex of
    the four permission letters); its group is the inode."""
    return re.compile(rb"^\S+ %s \S+ %02x:%02x ([1-9][0-9]*) " % (perms, os.major(dev), os.minor(dev)), re.M)


def _maps(pid: int) -> bytes | None:
    """``pid``'s ``/proc/<pid>/maps`` (its first :data:`MAPS_BYTES`); None when it is gone meanwhile."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return f.read(MAPS_BYTES)
    except OSError:
        return None


def shared_writable(pids: Iterable[int], dev: int) -> set[int]:
    """Inodes of the files on the device ``dev`` that one of ``pids`` maps shared and writable; the maps
    of every process together read at most ``MAPS_LOOKED`` (the processes past it not looked at: they
    only hide their own writes from their own workspace). Before (s67), ``MAPS_BYTES`` a process: a
    sandbox's 256 processes each holding ~30,000 small mappings (no memory: ``mmap`` untouched) had
    each look read 256 MiB of maps the kernel writes out: ~29 ms one such process here (load 15), so
    ~7 s a look of a host core for 256 (``tests/security/test_attacks10``)."""
    line = _maps_of(dev, rb".w.s")
    found: set[int] = set()
    left = MAPS_LOOKED
    for pid in pids:
        if left <= 0:
            break
        data = _maps(pid)
        if data is not None:
            left -= len(data)
            found.update(int(inode) for inode in line.findall(data))
    return found


def read_only_held(pids: Iterable[int], dev: int, locked: set[int] | None = None) -> set[int]:
    """Inodes of the files on the device ``dev`` that one of ``pids`` holds open or maps for reading
    and none holds open or maps for writing, a descriptor at the file's end and a file someone locks
    apart (``_reader``): a push writes the workspace's version of such a file as a
    new file (``MirrorPush.apply``), so a reader in the middle of it reads the old one whole, where a
    write into the file it reads tore it. A descriptor's access mode is its ``/proc/<pid>/fd`` link's
    mode (``r-x``: read only). Each process's maps are read once, for both kinds of mapping.

    Bounded: at most ``FDS_LOOKED`` descriptors and ``MAPS_LOOKED`` bytes of maps in all; past either,
    none (nothing known: every file is written in place, as before this look, and a reader may read
    one torn; a writer missed would have had its file replaced under it, its later writes lost).
    Before, every descriptor was looked at: a program's 40 processes holding 19,000 copies of one
    descriptor each (``dup``, no memory) made every push of a file the workspace wrote ~20 s of two
    system calls a descriptor, on a core of the host, the sandbox frozen through it. Then the bound's
    8,192 descriptors were still looked at before it gave up: ~70-90 ms a push, 0.2-0.6 s on a loaded
    host; now the kernel's count of each process's descriptors (``_descriptors``, one ``stat`` a
    process) says first whether they are past it.

    ``locked``: the files a process was seen locking, kept by the caller for the sandbox's life (at
    most ``LOCKED_KEPT``) and never in the answer: a process that opened a lock file and has not asked
    for the lock yet shows none (``_reader``), so a push landing in that window replaced the file, and
    the process then locked the old inode while the next writer locked the new one (s66: two
    ``flock``-ed writers, 599 of 600 increments, one run in three). Sticky, only that window of a file
    no process was ever seen locking is left."""
    pids = list(pids)
    if _descriptors(pids) > FDS_LOOKED:
        return set()  # past the bound: known from one ``stat`` a process, before any is looked at
    shared, readable = _maps_of(dev, rb".w.s"), _maps_of(dev, rb"r...")
    readers: set[int] = set()
    writers: set[int] = set()
    fds_left, maps_left = FDS_LOOKED, MAPS_LOOKED
    for pid in pids:
        data = _maps(pid)
        if data is None:
            continue  # gone meanwhile, or not ours to look at
        maps_left -= len(data)
        if maps_left < 0:
            return set()
        writers.update(int(inode) for inode in shared.findall(data))
        readers.update(int(inode) for inode in readable.findall(data))
        try:
            fds = os.scandir(f"/proc/{pid}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:  # read a page of names at a time: never the whole list past the bound
                fds_left -= 1
                if fds_left < 0:
                    return set()
                try:
                    link, st = fd.stat(follow_symlinks=False), os.stat(fd.path)
                except OSError:
                    continue
                if st.st_dev != dev:
                    continue
                if link.st_mode & 0o200:
                    writers.add(st.st_ino)
                    continue
                at_end, locks = _reader(pid, fd.name, st.st_size)
                if locks:
                    writers.add(st.st_ino)  # written in place, as for a writer (see ``_reader``)
                    if locked is not None and len(locked) < LOCKED_KEPT:
                        locked.add(st.st_ino)
                elif not at_end:
                    readers.add(st.st_ino)
    return readers - writers - (locked or set())


def _reader(pid: int, fd: str, size: int) -> tuple[bool, bool]:
    """Whether ``pid``'s descriptor ``fd`` of a file of ``size`` bytes is at its end, and whether it
    holds a lock (both from its ``/proc/<pid>/fdinfo``: its ``pos`` and its ``lock:`` lines, the
    ``flock``, POSIX and OFD locks taken through it; a lease is none, as before).

    At its end: a reader that has read the file whole and waits for more, ``tail -f``, ``less +F``, a
    log shipper. Such a reader is none a push replaces the file for: it has nothing of the old version
    left to read, and written in place the file is what it follows on any disk (truncated, then
    grown). Replaced, it followed the old inode for good (s65: the workspace emptied a log ``tail -f``
    followed, and the lines appended after reached the new file, never ``tail``). A reader in the
    middle of the file, or one whose position is not known, still gets the old one.

    A lock: the file is written in place even when only readers hold it. A lock file is opened for
    reading only (``flock(1)``, ``fcntl.flock`` on an ``open(path)``), and the lock is the inode's.
    Replaced, the process holding the lock kept the old inode while the next writer locked the new
    one: two ``flock``-ed writers of one counter, the workspace writing the lock file meanwhile, both
    in their critical section at once (s65: 796 of 800 increments kept). A process blocked on the lock
    waits for one a process of the sandbox holds, which its descriptor shows; a process that opened the
    file and has not asked for the lock yet is not seen (a window of a few system calls).

    Decision: the descriptor's own ``fdinfo``, not ``/proc/locks``. That is every lock of the host, one
    text the kernel makes under its lock lists' locks, and a program holds as many as its memory allows
    (POSIX locks on ranges of one file cost no descriptor): read whole it cost each push that (30,000
    locks: ~1.5 MB), read in part (its first MiB, as before) a lock past the part was not seen, so any
    program of the host, another workspace's too, holding ~25,000 locks ahead of it made this
    workspace's lock files replaced under their holders again (``tests/security/test_attacks8``)."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
            head = f.read(FDINFO_BYTES)
    except OSError:
        return False, False  # closed meanwhile: its locks went with it
    found = re.match(rb"pos:\s*([0-9]+)", head)
    return found is not None and int(found.group(1)) >= size, _LOCK_LINE.search(head) is not None


def _descriptors(pids: list[int]) -> int:
    """How many descriptors ``pids`` hold in all, as far as the kernel counts them cheaply: the size of
    ``/proc/<pid>/fd`` (Linux 6.2 on; 0 before, where the bounded look finds out instead). Stops
    counting once past ``FDS_LOOKED``."""
    held = 0
    for pid in pids:
        try:
            held += os.stat(f"/proc/{pid}/fd").st_size
        except OSError:
            continue  # gone meanwhile, or not ours to look at
        if held > FDS_LOOKED:
            break
    return held


class MappedFiles:
    """The files of one live sandbox's mirror its processes map shared and writable (see the module)."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.prints: dict[str, int] = {}  # relative path -> fingerprint of its content at the last look
        self.due = 0.0  # a paced look waits until then (monotonic)
        try:
            self.dev: int | None = os.stat(mirror.directory).st_dev
        except OSError:
            self.dev = None

    def look(self, pids: Iterable[int] | None, paced: bool = False) -> int:
        """Fingerprint the files mapped now (``pids``: the sandbox's processes, None: none known) and
        those mapped at the last look; force each one that changed into the next pull. How many."""
        started = time.monotonic()
        if paced and started < self.due:
            return 0
        try:
            return self._look(pids)
        finally:
            ended = time.monotonic()
            self.due = ended + max(PERIOD, 9 * (ended - started))

    def _look(self, pids: Iterable[int] | None) -> int:
        mirror, dev = self.mirror, self.dev
        mapped: set[str] = set()
        if pids is not None and dev is not None:
            inodes = shared_writable(pids, dev)
            if inodes:
                mapped = {rel for rel, e in mirror.state.items() if e[KIND] == "f" and e[INO] in inodes}
        forced = 0
        with BeneathReader(mirror.directory) as reader:
            for rel in sorted(mapped | set(self.prints))[:MAX_FILES]:
                digest = _fingerprint(reader, rel)
                if digest is None or digest != self.prints.get(rel):
                    forced += mirror.force(rel)
                if rel in mapped and digest is not None:
                    self.prints[rel] = digest
                else:
                    self.prints.pop(rel, None)  # not mapped any more: its next write moves its times
        return forced


def _fingerprint(reader: BeneathReader, rel: str) -> int | None:
    """The file ``rel``'s content as one number; a whole chunk in a hole (``BeneathReader.chunks``'
    :data:`HOLE`) is a tag, its zeros never hashed. Every chunk but the last is a whole one, so the
    tags and pieces spell one file only. Before (s67), a program mapping a page of each of
    ``MAX_FILES`` sparse files of 4 GiB (``RLIMIT_FSIZE``; free on its tmpfs) had each look hash 1 TiB
    of zeros: ~54 s of a host core at the sandbox's end, a tenth of one all its life
    (``tests/security/test_attacks10``)."""
    try:
        digest = xxh3_128()
        for piece in reader.chunks(rel):
            if piece is HOLE:
                digest.update(b"H")
            else:
                digest.update(b"D")
                digest.update(piece)
    except OSError:
        return None
    return digest.intdigest()
