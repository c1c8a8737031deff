"""``SandboxLimits`` and how they become rlimits: set with ``prlimit`` on a bubblewrap sandbox
process (see ``_admission``), or by a bash launcher before it execs the program (no bubblewrap)."""

from __future__ import annotations

import resource
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxLimits", "launcher", "rlimits", "set_limits"]


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    memory_mb: int | None = 1024
    max_processes: int | None = 256
    cpu_seconds: int | None = None
    max_file_bytes: int | None = 4 * 1024**3  # RLIMIT_FSIZE: the largest file the program may write


def rlimits(limits: SandboxLimits) -> list[tuple[int, int, int]]:
    """``limits`` as (resource, soft, hard): what both :func:`set_limits` and the launcher set."""
    wanted: list[tuple[int, int, int]] = []
    if limits.memory_mb:
        wanted.append((resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024, limits.memory_mb * 1024 * 1024))
    if limits.max_file_bytes:
        size = max(1, limits.max_file_bytes // 1024) * 1024  # whole KiB: what ``ulimit -f`` can say
        wanted.append((resource.RLIMIT_FSIZE, size, size))
    if limits.cpu_seconds:  # the soft limit sends SIGXCPU, the hard one a second later SIGKILL
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1))
    if limits.max_processes:
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes))
    wanted.append((resource.RLIMIT_CORE, 0, 0))
    return wanted


def set_limits(pid: int, limits: SandboxLimits) -> None:
    """``prlimit`` ``pid`` to ``rlimits(limits)``, never above the hard limit it already has (raising
    one would need a capability)."""
    for kind, soft, hard in rlimits(limits):
        current = resource.prlimit(pid, kind)[1]
        if current != resource.RLIM_INFINITY:
            hard = min(hard, current)
            soft = min(soft, hard)
        resource.prlimit(pid, kind, (soft, hard))


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
}


def launcher(limits: SandboxLimits, groups: Sequence[Path]) -> list[str]:
    """The argv prefix that starts a command in ``groups`` under ``limits``' rlimits."""
    lines = []
    for kind, soft, hard in rlimits(limits):
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
