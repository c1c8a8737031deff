"""Scratch directories of a process, and their removal at exit or by whoever starts after a crash.

Each process keeps what it writes on the host (mirrors, bridge directories, the sandbox's ``/etc``)
in one directory per base directory, :func:`process_scratch`: ``<base>/computer-<pid>-<start>``
(``-<uid>`` appended when it belongs to a sandbox user), where ``<start>`` is the process's start
time in clock ticks since boot (``/proc/<pid>/stat``, field 22). A pid alone is reused; a pid with its
start time names one process within one boot and one pid namespace, which a ``.owner`` file in the
directory records: :func:`reap_dead` removes exactly the directories of processes that are gone (or
of an earlier boot), never those of a live one, and leaves those of another pid namespace (a
container sharing ``/dev/shm``) alone.

Permissions (decision): mode 0700, this process's user's, unless sandboxes run as unprivileged host
users (``Sandbox.host_ids``, a uid per mirror: ``_uid_lease``): bubblewrap started as one must
search every directory on a bind source's path (its capabilities live in its own user namespace and
do not override the permissions of files of an unmapped user such as root), so it is then the
sandboxes' base's (``_users``: no sandbox runs as it), mode 0710 of the sandbox group: every sandbox
uid may search it, none list or change it, nobody else enter it. Root enters everything regardless.

Removal (decision): :func:`remove_tree` is iterative, keeps one directory descriptor open at a time
(a tree 5,000 deep exhausts neither the stack nor the descriptors; its paths are longer than
``PATH_MAX``, so everything is relative to a descriptor), never follows a symlink (every open is
``O_NOFOLLOW`` below a descriptor; going back up through ``..`` is checked against the recorded
identity of the parent) and makes read-only directories writable on its way.

A process removes its own at exit (``atexit``) or when :func:`release_process` is called (a Ray
actor's shutdown: Ray may end a worker without running ``atexit``); the first scratch directory a
process makes in a base reaps the dead processes' ones there, their ``computer-etc-*`` and
``computer-shell-*`` directories of earlier versions, and their cgroups.

Shared entries (decision): what every process would otherwise build alike (the sandbox's ``/etc``,
bubblewrap's probe results, see ``_bwrap``) is kept once per user and base in
:func:`shared_directory`, ``<base>/computer-shared-<uid>`` (``uid``: the sandbox's host user, else
this process's), mode 0700, or 0750 with the sandbox user's group: owned by this process's user,
nobody else can list, enter or change it. Its entries are content-keyed (the name carries a digest
of what is in them), appear only complete (built beside, then renamed into place) and are never
changed afterwards. A process using a directory entry holds a shared ``flock`` on it
(:func:`hold_shared`, released by :func:`release_process` or the process's end) and marks it used
(its mtime). Reaping: :func:`reap_dead` removes an entry that no process holds and that nobody
used for :data:`SHARED_UNUSED` seconds (a stale digest after the host's files changed, a stage a
crashed process left), taking the exclusive lock first and renaming the entry out of its name
before removing it, so a valid name never shows a half-removed tree.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import logging
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from pathlib import Path

from ._cgroups import remove_dead_groups, remove_own_groups
from ._lifetime import is_alive, process_tag
from ._limits import overrides_modes

__all__ = [
    "SHARED_UNUSED",
    "blocking_ancestor",
    "hold_shared",
    "holds",
    "host_mark",
    "process_scratch",
    "reap_dead",
    "release_process",
    "remove_below",
    "remove_tree",
    "shared_directory",
]

log = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME = re.compile(r"computer-(\d+)-(\d+)(?:-\d+)?\Z")
# Earlier versions: computer-shell-<pid>-<hex>, computer-etc-<uid>-<pid>-<random>.
_LEGACY = (re.compile(r"computer-shell-(\d+)-[0-9a-f]+\Z"), re.compile(r"computer-etc-\d+-(\d+)-\w+\Z"))
_SHARED = "computer-shared-"
SHARED_UNUSED = 24 * 3600.0  # seconds an unheld shared entry is kept after its last use


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` and, if it is a directory, everything below it (see the module's decisions).

    A missing ``path`` is not an error; a link is removed, never followed. Raises ``OSError`` (with
    the path) when something cannot be removed, after removing everything else it could.
    """
    top = os.fspath(path)
    parent_path, name = os.path.split(top.rstrip("/") or "/")
    if name in ("", ".", ".."):
        raise IsADirectoryError(21, "refusing to remove a root or relative directory by name", top)
    try:
        parent = os.open(parent_path or ".", _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        try:
            st = os.lstat(name, dir_fd=parent)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent)
            return
        remove_below(parent, name, top)
    finally:
        os.close(parent)


def remove_below(parent: int, name: str, top: str) -> None:
    """Remove the directory ``name`` of ``parent`` (a descriptor, left open) with all it holds.

    One descriptor is open at a time: down by name, back up through ``..`` (checked against the
    identity recorded on the way down). The first failure is raised once everything else is gone.
    """
    fd = _open_dir(parent, name)
    # A frame per level: the directory's name, its parent's identity, the parent's names left to do.
    stack: list[tuple[str, tuple[int, int], list[str]]] = []
    failed: OSError | None = None
    try:
        identity = _identity(fd)
        pending, failed = _clear_files(fd, failed)
        while pending or stack:
            if pending:
                child = pending.pop()
                try:
                    child_fd = _open_dir(fd, child)
                except FileNotFoundError:
                    continue
                except NotADirectoryError:  # replaced meanwhile: remove what is there now
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(child, dir_fd=fd)
                    continue
                except OSError as exc:
                    failed = failed or exc
                    continue
                stack.append((child, identity, pending))
                os.close(fd)
                fd, identity = child_fd, _identity(child_fd)
                pending, failed = _clear_files(fd, failed)
                continue
            child, identity, pending = stack.pop()
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            if _identity(fd) != identity:  # moved while we were below it: never walk out of the tree
                raise OSError(errno.EBUSY, f"a directory of {top} moved during its removal", top)
            try:
                os.rmdir(child, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.ENOTEMPTY and failed is None:  # added meanwhile: one more pass
                    pending.append(child)
                else:
                    failed = failed or exc
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as exc:
        failed = failed or exc
    if failed is not None:
        raise OSError(failed.errno, f"cannot remove all of {top}: {failed.strerror}", top) from failed


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_dir(parent: int, name: str) -> int:
    """Open the directory ``name`` below ``parent`` without following a link, making it readable,
    searchable and writable first if it is not (a read-only directory a program left)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        handle = os.open(name, _DIR_FLAGS | os.O_PATH, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)  # the descriptor's directory, never a link
        finally:
            os.close(handle)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    st = os.fstat(fd)
    if st.st_mode & 0o300 != 0o300 and not overrides_modes():
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o700)
    return fd


def _clear_files(fd: int, failed: OSError | None) -> tuple[list[str], OSError | None]:
    """Unlink every non-directory in ``fd``; the names of its subdirectories, and the first failure."""
    directories = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    directories.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                failed = failed or exc
    return directories, failed


# In each scratch directory: the boot and pid namespace its pid belongs to (see ``host_mark``).
_MARK = ".owner"
_LOCK = threading.Lock()
_MADE: dict[tuple[str, tuple[int, int] | None], Path] = {}
_REAPED: set[str] = set()


def process_scratch(base: str | os.PathLike[str] | None = None, owner: tuple[int, int] | None = None) -> Path:
    """This process's scratch directory in ``base`` (default the temp directory), owned by ``owner``
    (uid, gid: the sandboxes' base) mode 0710 when given, else by this process's user mode 0700.

    Made once per base and owner; removed by :func:`release_process` (at exit). The first call for a
    base reaps what dead processes left there (:func:`reap_dead`).
    """
    parent = Path(base if base is not None else _temp_base(owner))
    key = (os.path.abspath(parent), owner)
    with _LOCK:
        made = _MADE.get(key)
        if made is not None and made.is_dir():
            return made
        if key[0] not in _REAPED:
            _REAPED.add(key[0])
            reap_dead(parent)
        directory = parent / (f"computer-{process_tag()}" + (f"-{owner[0]}" if owner is not None else ""))
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700 if owner is None else 0o710)  # whatever the umask or an earlier one said
        if owner is not None:
            os.chown(directory, *owner)
        (directory / _MARK).write_text(host_mark())
        _release_at_exit()
        _MADE[key] = directory
        return directory


def _temp_base(owner: tuple[int, int] | None) -> str:
    """The temp directory, or, when the sandbox's host user ``owner`` cannot search its path (a
    private ``TMPDIR``, 0700, as ``mktemp -d`` makes), the first of ``/tmp``, ``/dev/shm``,
    ``/var/tmp`` it can: bubblewrap runs as that user and must reach every bind source (the
    sandbox's ``/etc``, staged trees, mirrors). None reachable: ``PermissionError`` naming them."""
    temp = tempfile.gettempdir()
    if owner is None:
        return temp
    candidates = [temp, *(d for d in ("/tmp", "/dev/shm", "/var/tmp") if d != temp)]
    for candidate in candidates:
        if os.path.isdir(candidate) and blocking_ancestor(candidate, owner) is None:
            if candidate != temp:
                log.info(
                    "sandbox user %d cannot reach %s: scratch directories go to %s", owner[0], temp, candidate
                )
            return candidate
    raise PermissionError(
        errno.EACCES,
        f"the sandbox user (uid {owner[0]}) cannot search the temp directory {temp} nor "
        f"{', '.join(candidates[1:])}: make one searchable (chmod o+x) or set TMPDIR to one",
        temp,
    )


def blocking_ancestor(directory: str, owner: tuple[int, int]) -> Path | None:
    """The first existing ancestor of ``directory`` (itself included) that user ``owner`` (uid, gid)
    may not search, or None when it can reach ``directory`` (bubblewrap, running as that user, must
    reach every bind source)."""
    path = Path(os.path.abspath(directory))
    uid, gid = owner
    for ancestor in [path, *path.parents]:
        try:
            st = os.stat(ancestor)
        except FileNotFoundError:
            continue
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return ancestor
    return None


def shared_directory(base: str | os.PathLike[str], owner: tuple[int, int] | None = None) -> Path | None:
    """This user's directory of shared entries in ``base`` (see the module's decisions), made if
    missing: for the sandbox's host user ``owner`` (uid, gid) mode 0750 with its group, else 0700.
    None when the name is taken by something this process must not trust (not a directory, another
    owner, writable or readable by others): the caller then keeps its own copy, as before sharing."""
    uid = owner[0] if owner is not None else os.geteuid()
    path = Path(base) / f"{_SHARED}{uid}"
    mode = 0o750 if owner is not None else 0o700
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    except OSError as exc:
        log.debug("shared directory %s not made: %s", path, exc)
        return None
    else:
        if owner is not None:
            os.chown(path, -1, owner[1])
        os.chmod(path, mode)  # whatever the umask said
    try:
        st = os.lstat(path)
    except OSError:
        return None
    trusted = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o027
    if not trusted or (owner is not None and st.st_gid != owner[1]):
        log.warning("%s is not this user's private directory: shared entries not used", path)
        return None
    return path


_HELD: dict[str, int] = {}  # a held shared entry's path -> the descriptor holding its shared lock


def hold_shared(path: str | os.PathLike[str]) -> bool:
    """Hold the shared entry ``path`` (a directory in a :func:`shared_directory`) for this process:
    a shared lock until :func:`release_process` or the process's end, so no reaper removes it while
    this process may bind it; and mark it used now. False when it is not there (a reaper removed it
    meanwhile, or nobody made it yet)."""
    key = os.fspath(path)
    with _LOCK:
        if key in _HELD:
            return True
        try:
            fd = os.open(key, _DIR_FLAGS)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.lstat(key)
            if (st.st_dev, st.st_ino) != _identity(fd):  # removed between the open and the lock
                raise FileNotFoundError(errno.ENOENT, "removed meanwhile", key)
            os.utime(fd)
        except OSError:
            os.close(fd)
            return False
        _HELD[key] = fd
        _release_at_exit()
        return True


@functools.cache
def _release_at_exit() -> None:
    atexit.register(release_process)


def holds(path: str | os.PathLike[str]) -> bool:
    """Whether this process holds the shared entry ``path`` (:func:`hold_shared`)."""
    return os.fspath(path) in _HELD


def release_process() -> None:
    """Remove this process's scratch directories and cgroups now (what happens at exit), and let go
    of the shared entries it holds (they stay for the next process).

    For a Ray pool worker's shutdown: Ray can end a worker without running ``atexit``. Safe to call
    more than once; a later :func:`process_scratch` makes a fresh directory.
    """
    with _LOCK:
        made = list(_MADE.values())
        _MADE.clear()
        held = list(_HELD.values())
        _HELD.clear()
    for fd in held:
        os.close(fd)
    for directory in made:
        try:
            remove_tree(directory)
        except OSError as exc:
            log.warning("scratch directory %s not removed: %s", directory, exc)
    remove_own_groups()


def reap_dead(base: str | os.PathLike[str] | None = None, *, groups: bool = True) -> list[Path]:
    """Remove what gone processes left in ``base`` (default the temp dir): their scratch directories,
    earlier versions' ``computer-shell-*``/``computer-etc-*``, their cgroups (unless ``groups`` is False),
    and this user's shared entries unheld and unused for :data:`SHARED_UNUSED` s; never a live one's."""
    parent = Path(base if base is not None else tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        names = []
    here_boot, _, here_namespace = host_mark().partition(" ")
    for name in names:
        if name.startswith(_SHARED):
            removed += _reap_shared(parent / name)
            continue
        owner = _owner(name)
        if owner is None:
            continue
        try:
            boot, _, namespace = (parent / name / _MARK).read_text().partition(" ")
        except OSError:  # earlier versions, or not written yet: judged by pid (and start) alone
            boot, namespace = here_boot, here_namespace
        if boot == here_boot and (namespace != here_namespace or is_alive(*owner)):
            continue  # alive, or a process of another pid namespace (a container sharing the base)
        try:
            remove_tree(parent / name)
        except OSError as exc:
            log.warning("a dead process's scratch directory %s not removed: %s", parent / name, exc)
            continue
        removed.append(parent / name)
    if groups:  # (the reaper removed them just before)
        remove_dead_groups()
    return removed


def reap_settled(since: float, within: float = 20.0) -> None:
    """:func:`reap_dead` once no live process's scratch directory made since ``since`` is left (waited
    for at most ``within`` s): for ``computer demo``, whose Ray workers exit after its ``ray.shutdown()``."""
    parent, deadline = Path(tempfile.gettempdir()), time.monotonic() + within
    while time.monotonic() < deadline and any(_young(parent / n, since) for n in os.listdir(parent)):
        time.sleep(0.1)  # a process's exit has no event this process could wait on
    reap_dead(parent)


def _young(path: Path, since: float) -> bool:
    owner = _owner(path.name)
    alive = owner is not None and owner[0] != os.getpid() and is_alive(*owner)
    try:
        return alive and path.stat().st_mtime >= since
    except OSError:  # removed meanwhile (its process exited)
        return False


def _reap_shared(directory: Path) -> list[Path]:
    """The entries of the shared directory ``directory`` that nobody holds nor used for
    :data:`SHARED_UNUSED` seconds, removed (only this user's own directory is looked into)."""
    try:
        st = os.lstat(directory)
        names = os.listdir(directory) if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() else []
    except OSError:
        return []
    removed = []
    unused_since = time.time() - SHARED_UNUSED
    for name in names:
        path = directory / name
        try:
            if os.lstat(path).st_mtime > unused_since:
                continue
            fd = os.open(path, _DIR_FLAGS) if path.is_dir() and not path.is_symlink() else None
        except OSError:
            continue
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live process holds it
            doomed = directory / f".removing-{secrets.token_hex(6)}"
            os.rename(path, doomed)
            remove_tree(doomed)
        except OSError as exc:
            log.warning("a shared entry %s not removed: %s", path, exc)
            continue
        finally:
            if fd is not None:
                os.close(fd)
        removed.append(path)
    return removed


def host_mark() -> str:
    """``<boot id> <pid namespace>`` of this process: a pid (and start time) means a process only there."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown-boot"
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = "unknown-namespace"
    return f"{boot} {namespace}"


def _owner(name: str) -> tuple[int, int | None] | None:
    """(pid, start time or None) of the process a scratch directory named ``name`` belongs to."""
    match = _NAME.match(name)
    if match is not None:
        return int(match[1]), int(match[2])
    for legacy in _LEGACY:
        match = legacy.match(name)
        if match is not None:
            return int(match[1]), None
    return None
