"""``SandboxLimits`` and how they become rlimits: set with ``prlimit`` on a bubblewrap sandbox
process (see ``_admission``), or by a bash launcher before it execs the program (no bubblewrap).

Decisions:

- no ``RLIMIT_AS`` where the run has a memory cgroup: address space is not memory (each thread
  reserves its stack, a JVM reserves its heap up front), and a 1 GiB cap stopped a program at ~14
  threads and any JVM from starting; the cgroup bounds what the run really uses. Without a memory
  cgroup ``RLIMIT_AS`` is the only bound there is, and stays;
- ``RLIMIT_NPROC`` is counted per user namespace on Linux >= 5.14 (each bubblewrap sandbox has its
  own: measured, two sandboxes of one host uid under ``ulimit -u 6`` and 20 do not see each
  other's processes), per host uid before and without bubblewrap (shared by every sandbox of the
  uid, so it would fail runs under their own limit; since s63 each mirror's sandboxes have a uid of
  their own, ``_uid_lease``, so it counts one sandbox there too): there it is left to the ``pids``
  cgroup when one exists. It binds only for an unprivileged sandbox user (host root is exempt). Beside a
  ``pids`` cgroup it is ``NPROC_MARGIN`` above the cgroup's cap, so that the cgroup refuses first
  and counts it (``pids.events``): a live sandbox ends a fork bomb left in the background by that
  count; at the same number the rlimit refused first, counted nowhere, and the bomb was caught only
  by its task count at the run's end, which a loaded host read below the threshold (the full suite
  left a bomb of 218 processes running);
- file size and core limits always;
- queued signals (``RLIMIT_SIGPENDING``, at most ``SIGPENDING_CAP``) and POSIX message queue bytes
  (``RLIMIT_MSGQUEUE``, at most ``MSGQUEUE_CAP``) in a user namespace of the sandbox's own: the
  kernel counts them per user namespace, and then again, for every sandbox of the host uid together,
  against the limit the namespaces' creator had (bubblewrap's: this process's, 96,367 signals and
  800 KiB here; raising it takes ``CAP_SYS_RESOURCE``). Under the creator's own limit one program took
  them all: another workspace's ``timer_create`` (coreutils ``timeout``), ``sigqueue`` and real-time
  ``kill`` failed (EAGAIN), its ``mq_open`` too (EMFILE), until the program ended. Each sandbox now
  holds at most its cap: 1,024 signals (a POSIX timer holds one; 94 sandboxes to take them all) and
  200 KiB of queues (two of the default 10 x 8 KiB; 4 sandboxes to take them all, as few as an
  ordinary program's queues allow);
- this process's soft descriptor limit is raised toward its hard one (at most ``NOFILE_TARGET``) by
  :func:`raise_descriptor_limit`, as Ray does for its workers: a live sandbox holds 14 host
  descriptors, and a host started under ``ulimit -n 1024`` (a login shell's default) refused its 73rd
  (EMFILE). Programs in the sandbox keep the limit the process was started with, at most their
  share of the sandbox's descriptor budget (``max_open_files``, ``_fd_budget``).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._fd_budget import descriptor_limit, in_force

__all__ = [
    "MAX_PTYS",
    "MSGQUEUE_CAP",
    "NPROC_MARGIN",
    "SIGPENDING_CAP",
    "Rlimit",
    "SandboxLimits",
    "can_limit_others",
    "described",
    "has_capability",
    "launcher",
    "limit_self",
    "overrides_modes",
    "raise_descriptor_limit",
    "rlimits",
    "set_limits",
]

log = logging.getLogger(__name__)

NOFILE_TARGET = 65536
# This process's descriptor limit (soft, hard) before :func:`raise_descriptor_limit` raised it: the
# sandboxes' programs get it back (None: never raised).
_started_nofile: tuple[int, int] | None = None

Rlimit = tuple[int, int, int]  # (resource, soft, hard)


# How far ``RLIMIT_NPROC`` stays above a ``pids`` cgroup's cap (see the module's decisions).
NPROC_MARGIN = 16
# What one sandbox may hold of the budgets every sandbox of the host uid shares (see the decisions).
SIGPENDING_CAP = 1024
MSGQUEUE_CAP = 200 * 1024
# The default ``SandboxLimits.max_ptys``: a terminal multiplexer's windows and a few ``script`` or
# ``expect`` sessions; 48 sandboxes at their cap to take the host's default 3,071 (``_ptys``).
MAX_PTYS = 64


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What one sandbox may use (a live one's every process together). Descriptors: the budget
    ``max_open_files`` (default a tenth of this host's ``fs.file-max``, at least 1,024 a process and
    256 processes, see ``_fd_budget``) becomes each process's hard ``RLIMIT_NOFILE`` and may lower
    ``max_processes`` past 256: here 256 processes x 1,024 descriptors = 262,144 of 2,466,239. A
    program past its share gets ``EMFILE``."""

    memory_mb: int | None = 1024
    max_processes: int | None = 256
    cpu_seconds: int | None = None
    # RLIMIT_FSIZE: the largest file the program may write, rounded down to whole KiB (the unit of
    # `ulimit -f`, so a shell in the sandbox reports the same limit): 1,500 bytes enforce 1,024
    max_file_bytes: int | None = 4 * 1024**3
    # Pseudo-terminals the sandbox may hold at once (a devpts instance of its own, ``_ptys``; None:
    # the host's count, shared with every other sandbox). Past it ``open("/dev/ptmx")`` fails ENOSPC.
    max_ptys: int | None = MAX_PTYS
    # The sandbox's descriptor budget (``_fd_budget``): the most files all its processes together may
    # hold open, a hard ``RLIMIT_NOFILE`` each times the process cap (lowered when the budget needs
    # it). "host": a tenth of the ``fs.file-max`` of the host the sandbox runs on, with floors of
    # 1,024 descriptors a process and 256 processes (here 2,466,239: 256 x 1,024 = 262,144); None: no
    # budget (the limits this process started with, its process count the only other bound).
    max_open_files: int | Literal["host"] | None = "host"


def rlimits(
    limits: SandboxLimits,
    *,
    memory_cgroup: bool = True,
    pids_cgroup: bool = True,
    own_user_namespace: bool = True,
) -> list[Rlimit]:
    """``limits`` as (resource, soft, hard): what both :func:`set_limits` and the launcher set, given
    which cgroups bound the run (see the module's decisions)."""
    wanted: list[Rlimit] = []
    limits = in_force(limits)
    if limits.memory_mb and not memory_cgroup:
        wanted.append((resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024, limits.memory_mb * 1024 * 1024))
    if limits.max_file_bytes:
        size = max(1, limits.max_file_bytes // 1024) * 1024  # whole KiB: what ``ulimit -f`` can say
        wanted.append((resource.RLIMIT_FSIZE, size, size))
    if limits.cpu_seconds:  # the soft limit sends SIGXCPU, the hard one a second later SIGKILL
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1))
    if limits.max_processes and (not pids_cgroup or (own_user_namespace and _nproc_per_namespace())):
        nproc = limits.max_processes + (NPROC_MARGIN if pids_cgroup else 0)
        wanted.append((resource.RLIMIT_NPROC, nproc, nproc))
    wanted.append((resource.RLIMIT_CORE, 0, 0))
    if own_user_namespace:
        for kind, cap in (
            (resource.RLIMIT_SIGPENDING, SIGPENDING_CAP),
            (resource.RLIMIT_MSGQUEUE, MSGQUEUE_CAP),
        ):
            hard = resource.getrlimit(kind)[1]  # the sandbox's own (inherited), never raised
            cap = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
            wanted.append((kind, cap, cap))
    nofile = descriptor_limit(limits) or _started_nofile
    if nofile is not None:
        wanted.append((resource.RLIMIT_NOFILE, *nofile))
    return wanted


def described(wanted: Sequence[Rlimit], limits: SandboxLimits) -> list[str]:
    """What the rlimits ``wanted`` bound, in words (``Sandbox.isolation``)."""
    resolved = in_force(limits)
    budget, nofile = resolved.max_open_files, descriptor_limit(resolved)
    names = {
        resource.RLIMIT_AS: "address space",
        resource.RLIMIT_FSIZE: "file size",
        resource.RLIMIT_CPU: "cpu time",
        resource.RLIMIT_NPROC: "processes",
        resource.RLIMIT_NOFILE: f"open files ({nofile[1]:,} a process of a budget of {budget:,})"
        if budget and nofile
        else "open files",
        resource.RLIMIT_SIGPENDING: "queued signals",
        resource.RLIMIT_MSGQUEUE: "message queue bytes",
    }
    return [names[kind] for kind, _, _ in wanted if kind in names]


def raise_descriptor_limit() -> None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit, at most ``NOFILE_TARGET`` (see
    the module's decisions); once, and never lower."""
    global _started_nofile
    if _started_nofile is not None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_TARGET if hard == resource.RLIM_INFINITY else min(hard, NOFILE_TARGET)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return
    _started_nofile = (soft, hard)
    log.info("descriptor limit raised from %d to %d (live sandboxes hold 14 each)", soft, target)


def _nproc_per_namespace() -> bool:
    """Whether this kernel counts ``RLIMIT_NPROC`` per user namespace (Linux >= 5.14)."""
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return match is not None and (int(match[1]), int(match[2])) >= (5, 14)


def set_limits(pid: int, wanted: Sequence[Rlimit]) -> None:
    """``prlimit`` ``pid`` to ``wanted`` (from :func:`rlimits`), never above the hard limit it already
    has (raising one would need a capability)."""
    for kind, soft, hard in wanted:
        current = resource.prlimit(pid, kind)[1]
        if current != resource.RLIM_INFINITY:
            hard = min(hard, current)
            soft = min(soft, hard)
        resource.prlimit(pid, kind, (soft, hard))


_CAP_DAC_OVERRIDE = 1
_CAP_SYS_RESOURCE = 24


def has_capability(bit: int) -> bool:
    """Whether this process holds the capability ``bit`` (``CAP_*`` number) in its effective set."""
    try:
        with open("/proc/self/status") as f:
            caps = next(line for line in f if line.startswith("CapEff:"))
        return bool(int(caps.split()[1], 16) >> bit & 1)
    except (OSError, StopIteration, ValueError, IndexError):
        return False


@functools.cache
def overrides_modes() -> bool:
    """Whether this process reads and writes files whatever their modes say (``CAP_DAC_OVERRIDE``:
    root, unless a container took it away)."""
    return has_capability(_CAP_DAC_OVERRIDE)


def can_limit_others() -> bool:
    """Whether this process may ``prlimit`` a process of another user (``CAP_SYS_RESOURCE``; some
    containers run root without it)."""
    return has_capability(_CAP_SYS_RESOURCE)


# prlimit(1)'s option for a resource.
_PRLIMIT = {
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_SIGPENDING: "--sigpending",
    resource.RLIMIT_MSGQUEUE: "--msgqueue",
}


def limit_self(wanted: Sequence[Rlimit]) -> list[str]:
    """The argv prefix with which a program sets ``wanted`` on itself, then execs the rest of the
    command line (``prlimit`` of util-linux; lowering one's own limits needs no privilege). Run
    inside the sandbox, after bubblewrap made its user namespace, so ``RLIMIT_NPROC`` counts there."""
    return ["/usr/bin/prlimit", *(f"{_PRLIMIT[kind]}={soft}:{hard}" for kind, soft, hard in wanted), "--"]


# The launcher (without bubblewrap): a bash that joins the run's cgroups, sets the rlimits and ``exec``s
# the program. Doing this in a process of its own (rather than in a ``preexec_fn``) lets Python start it
# with vfork: a forked copy of a large process (a Ray worker) costs milliseconds of page-table copying,
# blocking the event loop, while vfork costs a fraction of one. Arguments: the cgroup.procs files,
# ``--``, argv.
_LAUNCHER = '''while [ "$1" != -- ]; do
  echo 0 > "$1" || { echo "sandbox: cannot join the cgroup $1" >&2; exit 125; }
  shift
done
shift
{limits}
exec "$@"'''


# bash's ``ulimit`` flag for a resource, and its unit in bytes (or seconds, or processes).
_ULIMIT = {
    resource.RLIMIT_AS: ("-v", 1024),
    resource.RLIMIT_FSIZE: ("-f", 1024),
    resource.RLIMIT_CPU: ("-t", 1),
    resource.RLIMIT_NPROC: ("-u", 1),
    resource.RLIMIT_CORE: ("-c", 1),
    resource.RLIMIT_NOFILE: ("-n", 1),
    resource.RLIMIT_SIGPENDING: ("-i", 1),
    resource.RLIMIT_MSGQUEUE: ("-q", 1),
}


def launcher(wanted: Sequence[Rlimit], groups: Sequence[Path]) -> list[str]:
    """The argv prefix that starts a command in ``groups`` under the rlimits ``wanted``."""
    lines = []
    for kind, soft, hard in wanted:
        flag, unit = _ULIMIT[kind]
        if soft == hard:
            lines.append(f"ulimit {flag} {soft // unit}")
        else:
            lines.append(f"ulimit -S {flag} {soft // unit} && ulimit -H {flag} {hard // unit}")
    script = _LAUNCHER.replace("{limits}", " &&\n".join(lines) + " || exit 125")
    return (
        ["/bin/bash", "--noprofile", "--norc", "-c", script, "sandbox-launcher"]
        + [str(g / "cgroup.procs") for g in groups]
        + ["--"]
    )
