"""A sandbox's descriptor budget (``SandboxLimits.max_open_files``): the most open files all its
processes together may hold, made of a hard ``RLIMIT_NOFILE`` per process and its process cap.

Why: the kernel's open-file table (``fs.file-max``) is one count for the whole host, in no namespace,
and only processes with ``CAP_SYS_ADMIN`` are exempt; every sandbox of every workspace (any uid)
opens files against it. A sandbox was bounded only by processes x ``RLIMIT_NOFILE`` (272 x 20,000 here,
the host's own limit, inherited) and its memory group (a file is ~256 bytes of kernel memory: 1 GiB
holds ~4 million), so one run held 500,000 of this host's 2,466,239 in 1.5 s, and one holding them
all makes every other workspace's ``open`` fail ``ENFILE``.

Decisions (s64):

- the bound is the product of two limits the kernel enforces per sandbox: ``pids.max`` (the
  ``pids`` group, or ``RLIMIT_NPROC`` in the sandbox's user namespace) caps its fd tables, a hard
  ``RLIMIT_NOFILE`` what each may hold; a refusal is the program's own ``EMFILE`` (or ``EAGAIN`` of a
  fork past the process cap), never a kill or a hang. Weighed and left: a memory group's kmem limit
  (cgroup v1 ``memory.kmem.limit_in_bytes`` takes writes and ignores them on Linux >= 6.1, this
  host's 6.18 among them: measured), a watchdog (it can only kill, or lower a limit with ``prlimit``
  of another uid's process, which takes ``CAP_SYS_RESOURCE``, which this host's root lacks; and it
  comes after the fact: 33,000 opens per 100 ms);
- the default (``"host"``) is ``fs.file-max // FILE_MAX_SHARE`` of the host the sandbox runs on, read
  once per process (a pool worker reads its own node's): a tenth, so that one sandbox holds less than
  the eighth the attack test asks, and ten at their budget to fill the table; ``None``: no budget, the
  limits the process started with (as before); a host whose ``fs.file-max`` is the kernel's maximum
  (systemd's default since v240) has no table to protect: no budget;
- what real programs need comes first, threads before descriptors: the default never lowers the
  process cap below ``PIDS_FLOOR`` (256, the default cap: the pids group counts threads, and a
  thread refused crashes most programs: Go's runtime, the JVM, rustc's codegen, python's "can't start
  new thread"), and gives each process a hard limit of at least ``NOFILE_FLOOR`` (1,024: what the
  soft limit of most hosts is anyway, so a program that never raises it sees no difference; one
  that raises its soft limit to the hard one, as node and bundlers do, gets ``EMFILE`` at 1,024,
  which node's ``graceful-fs`` and most servers already wait out). The soft limit is the one the
  process started with, at most the hard one. When the budget can give more than the floors, each
  process gets ``budget // max_processes``. Here: file-max 2,466,239, a tenth 246,623, below 256 x
  1,024, so 256 processes x 1,024 = 262,144 open files at most (10.6 %; before 272 x 20,000). The
  kernel sizes the table by memory (~one file per 10 KiB): the floors hold more than a tenth below
  ~2.6 million (~26 GB of RAM), more than an eighth below ~2.1 million (~21 GB), where the attack
  test skips, saying so. Weighed and left (s64): 96 processes x 3,072 (a 64-thread program had 32
  tasks to spare, and ``go build``, a JVM or ``make -j`` of compilers reach 96 tasks);
- an explicit budget is kept as given: its processes go down first (to 1), then the descriptors;
- ``max_processes=None``: nothing bounds the fd tables, so the budget is each process's limit alone;
- the budget and the process cap in force are the sandbox's whole: a live sandbox's every process
  (background servers, runs) shares them, as its memory and pids groups.

Not bounded by this: files a process maps (``mmap`` keeps the file open after its descriptor is
closed: ``vm.max_map_count``, 65,530 a process, bounded only by the memory group).
"""

from __future__ import annotations

import dataclasses
import functools
import resource
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._limits import SandboxLimits

__all__ = [
    "FILE_MAX_SHARE",
    "NOFILE_FLOOR",
    "PIDS_FLOOR",
    "descriptor_limit",
    "host_file_max",
    "in_force",
]

FILE_MAX_SHARE = 10
NOFILE_FLOOR = 1024
PIDS_FLOOR = 256
# ``fs.file-max`` at or above this is no limit (the kernel's maximum is LONG_MAX).
_UNLIMITED = 1 << 62


@functools.cache
def host_file_max() -> int | None:
    """This host's ``fs.file-max`` (the open-file table every unprivileged process shares), or None
    when unreadable or unlimited; read once per process."""
    try:
        with open("/proc/sys/fs/file-max") as f:
            value = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None if value >= _UNLIMITED else value


def in_force(limits: SandboxLimits) -> SandboxLimits:
    """``limits`` with the budget resolved: ``max_open_files`` a number (the product in force, each
    process's share at most the hard limit this process started with) or None, ``max_processes``
    lowered where the budget needs it (see the module's decisions). Idempotent."""
    budget = limits.max_open_files
    derived = budget == "host"
    if derived:
        file_max = host_file_max()
        budget = None if file_max is None else max(1, file_max // FILE_MAX_SHARE)
    if not isinstance(budget, int):
        return dataclasses.replace(limits, max_open_files=None)
    if budget < 1:
        raise ValueError(f"max_open_files must be at least 1 (or None, or 'host'), not {budget}")
    wanted = limits.max_processes
    tasks = wanted or 1  # no process cap: the budget bounds each process alone
    if wanted and budget // wanted < NOFILE_FLOOR:
        fewer = budget // NOFILE_FLOOR
        tasks = min(wanted, max(min(wanted, PIDS_FLOOR), fewer) if derived else max(1, fewer))
    per = max(NOFILE_FLOOR, budget // tasks) if derived else budget // tasks
    hard = started_nofile()[1]
    if hard != resource.RLIM_INFINITY:
        per = min(per, hard)
    return dataclasses.replace(limits, max_processes=tasks if wanted else None, max_open_files=per * tasks)


def descriptor_limit(limits: SandboxLimits) -> tuple[int, int] | None:
    """The (soft, hard) ``RLIMIT_NOFILE`` each process of a sandbox under ``limits`` (in force) gets:
    its share of the budget, the soft limit the one this process started with at most; None without a
    budget."""
    budget = limits.max_open_files
    if not isinstance(budget, int):
        return None
    per = budget // (limits.max_processes or 1)
    soft = started_nofile()[0]
    return (per if soft == resource.RLIM_INFINITY else min(soft, per)), per


def started_nofile() -> tuple[int, int]:
    """The descriptor limit this process started with (before ``raise_descriptor_limit``)."""
    from . import _limits

    return _limits._started_nofile or resource.getrlimit(resource.RLIMIT_NOFILE)
