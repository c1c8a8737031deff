"""Leases of host uids, one per sandbox's mirror (``_users``: why a uid per sandbox, and the range).

A lease is an exclusive ``flock`` on ``<directory>/<uid>`` (:data:`LEASE_DIR`, a root-only directory
every process of the host shares: the embedded service and each pool worker lease from the same
range, never the same uid at once). It is unique among every process of the host for as long as it is
held, and the kernel drops it when its process dies (a SIGKILL included): nothing to reap.

Held with the mirror (decision): a mirror's files are owned by the uid its sandboxes run as (a
program's files are its own), and a mirror outlives one run (a per-call run's warm mirror, a live
sandbox's), so the uid is leased when a mirror is first used (``MirrorSync.acquire``) and released
once the mirror is removed (``MirrorPool.discard``), never per run: re-owning a tree of a million
entries at each run is no option. A mirror the process still holds at its end keeps its lease until
then.

A clean release removes the file (under its lock; a taker checks that the file it locked is still the
one at the name), so the directory holds only the leases held and the stale ones. A stale lease (its
process killed, or ended with its mirror still warm): the file is left, saying ``held``. Taking such
a uid first kills whatever still runs as it
(``kill -9 -1`` as that uid: every process of ours or of a pid namespace below ours whose uid it is,
one atomic sweep, forks included), so a leftover of the dead holder (a sandbox process outside any
namespace, without bubblewrap) never shares the uid with the new sandbox, nor reaches its files. The
dead holder's mirror (its files that uid's) is in the dead process's scratch directory, 0710 of the
sandbox group, reaped by the next process that makes one in that base (``_scratch.reap_dead``);
inside a bubblewrap sandbox no host path is reachable at all.

``RLIMIT_NPROC`` (``_limits``): counted per user namespace under bubblewrap (Linux >= 5.14), and per
host uid without it: with a uid per sandbox, per sandbox either way (before, without bubblewrap, every
sandbox counted together, so it was left to the ``pids`` cgroup).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import subprocess
import threading
import weakref

from ._lifetime import process_tag
from ._users import drop_privileges

__all__ = ["LEASE_DIR", "RangeExhausted", "UidLease", "UidLeases"]

LEASE_DIR = "/run/computer-sandbox-uids"


class RangeExhausted(RuntimeError):
    """Every uid of the range is leased: a sandbox is refused rather than run as a shared uid."""


class UidLease:
    """One leased uid (with the sandbox group's gid) until :meth:`release`, or this object's end."""

    def __init__(self, uid: int, gid: int, fd: int, leases: UidLeases) -> None:
        self.uid, self.gid = uid, gid
        self._fd: int | None = fd
        self._leases = leases
        self._closer = weakref.finalize(self, os.close, fd)

    @property
    def ids(self) -> tuple[int, int]:
        return self.uid, self.gid

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the uid back (once; its file removed: its next holder sweeps nothing)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._leases.path(self.uid))  # still locked: a taker that opened it finds it gone
        self._closer()  # closing the descriptor drops the lock
        self._leases.forget(self.uid)

    def __repr__(self) -> str:
        return f"UidLease({self.uid}, {'held' if self.held else 'released'})"


class UidLeases:
    """Leases of uids ``first`` .. ``first + count - 1`` (gid ``gid``) through lock files in
    ``directory`` (made root-only when missing; refused when someone else could write it)."""

    def __init__(self, first: int, count: int, gid: int, directory: str = LEASE_DIR) -> None:
        if count < 1:
            raise ValueError("a lease range needs at least one uid")
        self.first, self.count, self.gid = first, count, gid
        self.directory = directory
        self._mine: set[int] = set()  # this object's held uids: skipped without a system call
        self._lock = threading.Lock()
        self._checked = False

    def take(self) -> UidLease:
        """The lowest uid no process of the host holds now (see the module for a stale one's sweep):
        a held one costs an ``open`` and a ``flock`` (~5 µs), so the lease files stay as few as the
        leases held at once, a stale one reused first.

        Raises :class:`RangeExhausted` when every uid is held, ``PermissionError`` when the lease
        directory is not this user's alone."""
        self._check_directory()
        for uid in range(self.first, self.first + self.count):  # the lowest free: few files, stale reused
            with self._lock:
                if uid in self._mine:
                    continue
            fd = self._try(uid)
            if fd is None:
                continue
            try:
                if os.pread(fd, 64, 0):  # left by a holder that ended without releasing it
                    sweep_uid(uid, self.gid)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"held {process_tag()}\n".encode(), 0)
            except BaseException:
                os.close(fd)
                raise
            with self._lock:
                self._mine.add(uid)
            return UidLease(uid, self.gid, fd, self)
        raise RangeExhausted(
            f"no sandbox uid is free: all {self.count} of {self.first}-{self.first + self.count - 1} are"
            f" leased (lock files in {self.directory}); a sandbox is not run as a shared uid. End other"
            " workspaces' sandboxes or give the sandbox user a larger subordinate range (/etc/subuid)"
        )

    def forget(self, uid: int) -> None:
        with self._lock:
            self._mine.discard(uid)

    def held(self, uid: int) -> bool:
        """Whether some process of the host holds ``uid`` now (a probe: locks the file, if any)."""
        try:
            fd = os.open(self.path(uid), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def path(self, uid: int) -> str:
        return os.path.join(self.directory, str(uid))

    def _try(self, uid: int) -> int | None:
        """The lock file of ``uid``, opened and locked; None when another holds it."""
        path = self.path(uid)
        for _ in range(3):  # a release removed the file between our open and our lock: open it anew
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                st = os.stat(path, follow_symlinks=False)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return None
                if exc.errno == errno.ENOENT:
                    continue
                raise
            locked = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (locked.st_dev, locked.st_ino):
                return fd
            os.close(fd)
        return None

    def _check_directory(self) -> None:
        if self._checked:
            return
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, 0o700)
        st = os.lstat(self.directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PermissionError(
                errno.EACCES,
                "the sandbox uid lease directory is not this user's alone (another user could hold or"
                " plant leases)",
                self.directory,
            )
        self._checked = True


def sweep_uid(uid: int, gid: int) -> None:
    """SIGKILL every process running as ``uid`` that this process can see (a stale lease's leftovers):
    ``kill -9 -1`` run as that uid (the kernel signals every process the sender may, itself aside)."""
    try:
        as_uid = drop_privileges(uid, gid)
    except RuntimeError:  # no setpriv: nothing can run as that uid either
        return
    argv = [*as_uid, shutil.which("kill") or "/bin/kill", "-9", "-1"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
