"""bubblewrap: the command line of one sandbox, whether bubblewrap works here, the synthetic ``/etc``.

A sandbox gets new user (uid/gid 65534, no capabilities), pid, mount, ipc, uts and network namespaces
(always: with network the namespace reaches out through slirp4netns, ``_slirp``; the host's is never
shared), read-only system directories, a synthetic ``/etc``, fresh ``/proc``,
``/dev`` and ``/tmp``, and only the binds a backend asks for. bubblewrap mounts every bind ``nosuid``
and ``nodev`` (``/proc/self/mountinfo`` inside shows it). The seccomp filter (``_seccomp``) is passed by
``Sandbox.spawn`` with the other descriptors (``--seccomp FD``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from ._scratch import holds, process_scratch, remove_tree, shared_directory
from ._seccomp import filter_fd
from ._shared_copy import shared_copy
from ._slirp import RESOLVER

__all__ = [
    "NO_USERNS",
    "SANDBOX_UID",
    "Bind",
    "bwrap_argv",
    "bwrap_works",
    "python_prefixes",
    "remembered",
    "sandbox_etc",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

SANDBOX_UID = 65534
# /etc files a shell needs; nothing secret (no shadow, no keys).
_ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "alternatives",
    "bash.bashrc",
    "inputrc",
    "profile",
    "mime.types",
    "protocols",
    "services",
    "magic",
    "magic.mime",
)
# No user namespaces inside the sandbox (bubblewrap 0.8+, used where the probe says it works): a
# program making its own (``unshare -Ur``) got a uid 0 with every capability over its namespaces, the
# kernel surface behind most local privilege escalations, and nothing in a sandbox needs one. The
# seccomp filter refuses them too, on every bubblewrap (``_seccomp``: Ubuntu 22.04's 0.6.1 has no
# such option).
NO_USERNS = "--disable-userns"
# Bound live for a sandbox with network (CAs change). Its resolv.conf is its own: slirp4netns's DNS
# forwarder (the host's may name a resolver on the host's loopback, which the sandbox cannot reach).
NETWORK_ETC = ("ssl", "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf")
NETWORK_RESOLV_CONF = f"nameserver {RESOLVER}\n".encode()


@dataclass(frozen=True, slots=True)
class Bind:
    source: str
    dest: str
    writable: bool = False


def bwrap_argv(
    command: Sequence[str],
    *,
    binds: Sequence[Bind],
    cwd: str,
    network: bool,
    etc: Path,
    as_pid_1: bool = False,
    no_userns: bool = False,
    seccomp_fd: int | None = None,
    own_pts: Sequence[str] = (),
) -> list[str]:
    """bubblewrap's full command line for ``command`` (options, ``--``, the command); ``network``:
    the files of :data:`NETWORK_ETC` bound (the network itself is ``_slirp``'s, set up by the caller).

    ``no_userns``: the sandbox's programs may not make user namespaces of their own
    (``--disable-userns``, bubblewrap 0.8 or later; see :data:`NO_USERNS`). ``seccomp_fd``: a
    descriptor the caller passes, holding the seccomp filter (``_seccomp``). ``own_pts``: options
    put right after ``--dev`` (``_ptys.PTS_BIND``: a devpts instance of the sandbox's own, capped).

    ``as_pid_1`` (a live sandbox's init): the command is the pid namespace's first process, in place
    of bubblewrap's reaper. The kernel then drops every signal a process of the namespace sends it that
    it does not handle, SIGKILL and SIGSTOP included: the sandbox's programs run as the init's user,
    and ``pkill python3`` ended the init (and with it the sandbox and every background process);
    ``pkill -STOP python3`` hung every later run. Its end ends every process of the namespace."""
    args = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if no_userns:
        args.append(NO_USERNS)
    if as_pid_1:
        args.append("--as-pid-1")
    args += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    args += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{top}"]
    # One bind for all of /etc (18 single-file binds cost bubblewrap 2.4 ms of its 8 ms start).
    args += ["--ro-bind", str(etc), "/etc"]
    for name in NETWORK_ETC if network else ():
        if os.path.lexists(f"/etc/{name}") and os.path.lexists(etc / name):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]  # live: CAs change
    args += ["--proc", "/proc", "--dev", "/dev", *own_pts, "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    for bind in binds:
        args += ["--bind" if bind.writable else "--ro-bind", bind.source, bind.dest]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", cwd, "--"]
    return args + list(command)


@functools.cache
def bwrap_works(
    prefix: tuple[str, ...] = (), options: tuple[str, ...] = (), seccomp: bytes | None = None
) -> bool:
    """Whether bubblewrap can make a sandbox here, started behind ``prefix`` (the privilege drop of
    an unprivileged sandbox), with ``options`` besides the usual ones (:data:`NO_USERNS`) and the
    seccomp filter ``seccomp`` (``_seccomp``: a kernel without seccomp filters makes bubblewrap fail
    every run); probed once per process, prefix, options and filter, and once per machine state for
    every process after it (:func:`_probe_key`).

    Decision: only a success is remembered across processes. A probe that failed (bubblewrap timed
    out on a loaded machine, a sysctl forbade user namespaces for a while) is run again by the next
    process: a remembered failure would run every later program without namespaces. A remembered
    success that no longer holds can only make runs fail, never run them less isolated.
    """
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [
        *prefix,
        exe,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        *options,
    ]
    probe += ["--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/", "/"]
    tail = ["--", "/bin/true"]
    named = [] if seccomp is None else [f"seccomp={hashlib.sha256(seccomp).hexdigest()[:32]}"]
    key = _probe_key([*probe, *tail, *named])  # not the descriptor's number: it varies
    if _recalled(key) is True:
        return True
    fd = None if seccomp is None else filter_fd(seccomp)
    try:
        if fd is not None:
            probe += ["--seccomp", str(fd)]
        run = subprocess.run(
            [*probe, *tail],
            capture_output=True,
            timeout=10,
            check=False,
            pass_fds=() if fd is None else (fd,),
        )
        works = run.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        if fd is not None:
            os.close(fd)
    if works:
        _remember(key, True)
    return works


def remembered(argv: Sequence[str], measure: Callable[[], T]) -> T:
    """What ``measure()`` found about running ``argv`` (a JSON value), measured once per machine
    state (:func:`_probe_key`): an earlier process's result when there is one, else measured now
    and remembered for the next processes. For figures a backend reports about itself (its start-up
    time), not for anything isolation depends on (see :func:`bwrap_works`)."""
    key = _probe_key(argv)
    value = _recalled(key)
    if value is not None:
        return cast(T, value)
    measured = measure()
    _remember(key, measured)
    return measured


def _capabilities() -> list[str]:
    """This process's effective and bounding capability sets: root without ``CAP_SYS_ADMIN`` (a test
    or a service run under ``setpriv``) may not do what root with it did (``unshare --mount``)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return ["caps:-"]
    return [line for line in lines if line.startswith(("CapEff:", "CapBnd:"))]


def _probe_key(argv: Sequence[str]) -> str:
    """The name under which the result of running ``argv`` (a probe of bubblewrap) is remembered:
    a digest of everything the result depends on, as far as a process can tell: ``argv``, the
    identity of the files it names (path, device, inode, size, mtime: the executables), the kernel
    (release, build) and this boot, the user and pid namespaces this process is in, its effective
    user and capabilities, and the sysctls that allow or forbid unprivileged user namespaces."""
    parts: list[str] = [*argv, f"euid={os.geteuid()}", *os.uname(), *_capabilities()]
    for name in argv:
        if name.startswith("/"):
            try:
                st = os.stat(name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):  # an executable; not a directory (a bound one's mtime moves)
                parts.append(f"{name}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    for link in ("/proc/self/ns/user", "/proc/self/ns/pid"):
        try:
            parts.append(f"{link}:{os.stat(link).st_ino}")
        except OSError:
            parts.append(f"{link}:-")
    for name in _PROBE_SYSCTLS:
        try:
            parts.append(f"{name}={Path(name).read_text().strip()}")
        except OSError:
            parts.append(f"{name}:-")
    return "probe-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


_PROBE_SYSCTLS = (
    "/proc/sys/kernel/random/boot_id",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)


def _probes() -> Path | None:
    return shared_directory(tempfile.gettempdir())


def _recalled(key: str) -> object:
    """A probe result an earlier process remembered under ``key`` (None when there is none)."""
    directory = _probes()
    if directory is None:
        return None
    try:
        with open(directory / key, encoding="utf-8") as f:
            value = json.load(f)
            os.utime(f.fileno())  # used: kept by the reaper (``_scratch``)
    except (OSError, ValueError):
        return None
    return value


def _remember(key: str, value: object) -> None:
    """Remember a probe result for later processes (written beside, then renamed into place)."""
    directory = _probes()
    if directory is None:
        return
    stage = directory / f".stage-{secrets.token_hex(6)}"
    try:
        stage.write_text(json.dumps(value), encoding="utf-8")
        os.rename(stage, directory / key)
    except OSError as exc:
        log.debug("probe result %s not remembered: %s", key, exc)
        with contextlib.suppress(OSError):
            stage.unlink()


_ETC_LOCK = threading.Lock()
_ETC_DIRS: dict[tuple[bool, tuple[int, int] | None], tuple[Path, bool]] = {}


def sandbox_etc(network: bool, owner: tuple[int, int] | None = None) -> Path:
    """The sandbox's /etc for the network setting and the sandbox's host user ``owner`` (who must
    be able to reach it): who uid 65534 is, its hostname, loopback hosts, copies of the host's
    :data:`_ETC_FILES` (links kept as links), and for ``network`` slirp4netns's resolver
    (:data:`NETWORK_RESOLV_CONF`) and empty mount points for :data:`NETWORK_ETC`, bound live over
    them. Directories 0755, files 0644, this process's user's.

    Copies, not binds: bubblewrap spends ~0.13 ms per bind. Shared (decision): one copy per content
    serves every process of the user, in its :func:`~._scratch.shared_directory` of the scratch base,
    named by a digest of what it holds, made once (beside, then renamed into place) and held while
    the process runs (``_scratch``: the reaper removes a copy nobody holds nor used for a day).
    Building it was ~390 links (``/etc/alternatives``), 50-140 ms and as long again to remove at each
    process's exit; now a process reads the host's files to name the copy (a few ms) and builds it
    only when the host's files changed. A host file changed later (an ``ld.so.cache`` after
    installing a library) is seen by the next process, which names a new copy; the dynamic loader
    falls back to the default library paths meanwhile. Where the shared directory cannot be used
    (another user's name in the way), the copy is the process's own, in its scratch directory.
    """
    key = (network, owner)
    with _ETC_LOCK:
        known = _ETC_DIRS.get(key)
        if known is not None and (holds(known[0]) if known[1] else known[0].is_dir()):
            return known[0]
        scratch = process_scratch(None, owner)  # the base's reaping, once per process
        entries = _etc_entries(network)
        shared = shared_directory(scratch.parent, owner)
        root = _shared_etc(shared, entries) if shared is not None else None
        if root is None:
            root = scratch / ("etc-net" if network else "etc")
            if root.exists():
                remove_tree(root)
            _write_etc(root, entries)
        _ETC_DIRS[key] = (root, root.parent == shared)
        return root


# One entry of a sandbox's /etc: its path below /etc, and a directory (None), a link ("->", target)
# or a file (its bytes).
_Entry = tuple[str, tuple[str, str] | bytes | None]


def _etc_entries(network: bool) -> list[_Entry]:
    """What the sandbox's /etc holds, parents before their children."""
    entries: list[_Entry] = [
        (
            "passwd",
            f"root:x:0:0:root:/root:/bin/bash\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/tmp/home:/bin/bash\n".encode(),
        ),
        ("group", f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n".encode()),
        ("hostname", b"sandbox\n"),
        ("hosts", b"127.0.0.1 localhost sandbox\n::1 localhost\n"),
    ]
    for name in _ETC_FILES:
        _host_entries(Path("/etc") / name, name, entries)
    if network:
        entries.append(("resolv.conf", NETWORK_RESOLV_CONF))
    for name in NETWORK_ETC if network else ():
        source = Path("/etc") / name
        if source.is_dir():
            entries.append((name, None))
        elif source.exists():
            entries.append((name, b""))
    return entries


def _host_entries(source: Path, name: str, entries: list[_Entry]) -> None:
    """The host's ``source`` as entries named ``name`` (a tree for a directory; links kept as links)."""
    try:
        if source.is_symlink():
            entries.append((name, ("->", os.readlink(source))))
        elif source.is_dir():
            entries.append((name, None))
            for child in sorted(os.listdir(source)):
                _host_entries(source / child, f"{name}/{child}", entries)
        elif source.is_file():
            entries.append((name, source.read_bytes()))
    except OSError as exc:  # unreadable or vanished: the sandbox goes without it
        log.debug("sandbox /etc: %s not copied: %s", source, exc)


def _digest(entries: list[_Entry]) -> str:
    h = hashlib.sha256()
    for name, what in entries:
        if what is None:
            kind, data = "d", b""
        elif isinstance(what, tuple):
            kind, data = "l", what[1].encode()
        else:
            kind, data = "f", what
        h.update(f"{kind}{len(name)}:{name}{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:32]


def _shared_etc(shared: Path, entries: list[_Entry]) -> Path | None:
    """The shared copy holding ``entries``, made if no process made it yet, and held; None when it
    could be neither made nor held."""
    return shared_copy(
        shared, f"etc-{_digest(entries)}", lambda root: _fill_etc(root, entries), "the sandbox's shared /etc"
    )


def _write_etc(root: Path, entries: list[_Entry]) -> None:
    root.mkdir()
    os.chmod(root, 0o755)
    _fill_etc(root, entries)


def _fill_etc(root: Path, entries: list[_Entry]) -> None:
    for name, what in entries:
        path = root / name
        try:
            if what is None:
                path.mkdir()
                os.chmod(path, 0o755)
            elif isinstance(what, tuple):
                path.symlink_to(what[1])
            else:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                with os.fdopen(os.open(path, flags, 0o644), "wb") as f:
                    os.fchmod(f.fileno(), 0o644)  # whatever the umask said
                    f.write(what)
        except FileNotFoundError:  # below a directory that could not be made
            log.debug("sandbox /etc: %s not made", path)


def python_prefixes() -> list[str]:
    """Host directories the current interpreter needs, when they are outside /usr."""
    out: list[str] = []
    for prefix in {sys.base_prefix, sys.base_exec_prefix}:
        real = os.path.realpath(prefix)
        if not real.startswith("/usr/") and real not in out:
            out.append(real)
    return out
