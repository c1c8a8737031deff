"""cgroup v1 ``memory``, ``pids`` and ``cpu`` groups, one per run, under
``/sys/fs/cgroup/<controller>/computer-exec``.

The ``cpu`` group holds no limit: it makes a run's processes one scheduling entity (weight
``cpu.shares``, 1024, of ``computer-exec``, itself one entity of the host's), however many there are
and whatever sessions they make. Without it the kernel's autogroups (one per session) weighed each
``setsid`` of a program like a whole host session: 64 busy loops each started with ``setsid`` in one
live sandbox took the event loop of the process serving every workspace from ~0.7 to ~50 ms of lag
(median; p99 185 ms) and another workspace's ``echo`` from 8 to 171 ms.

Socket buffers: a run's memory group caps its TCP and UDP buffers too (``memory.kmem.tcp.limit_in_bytes``,
:func:`socket_cap`: a quarter of its memory limit, at most ``SOCKET_CAP_MB``). cgroup v1 counts no
socket buffer of a group without that limit (v2 counts them in the group's memory), and the kernel
counts them all against one host-wide budget (``net.ipv4.tcp_mem``/``udp_mem``: 2.2 GB here, in no
namespace): a program of a 1 GiB run held 372 MB queued unread on 100 connections of its own loopback
while its group said 11 MB (the host's available memory fell 300 MB), so a few runs together could
take every socket buffer of the host (its own TCP, Ray's, every other workspace's, pushed into memory
pressure, then refused). Capped, a run's sockets hold at most the cap (TCP under it only shrinks its
windows; the limit is apart from ``memory.limit_in_bytes``, so a run holds at most its memory limit
plus its cap). The cap counts sockets made after the group's limit is written: before the sandbox
starts. A kernel without the file (it is deprecated in v1) leaves them uncapped, as
``Sandbox.isolation`` then says.

A run's groups are made before its sandbox starts, joined by its first process (see ``_admission``),
swept with SIGKILL when the run ends and removed. Groups of processes that died without removing
theirs are removed by the next process that probes cgroups, and periodically by each process that
keeps live sandboxes (``_reaper``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._fd_budget import in_force
from ._lifetime import is_alive, process_tag
from ._limits import SandboxLimits

__all__ = [
    "CGROUP_PARENT",
    "CGROUP_ROOT",
    "CONTROLLERS",
    "ControlFile",
    "cgroup_writable",
    "count_in",
    "freeze",
    "make_groups",
    "procs_of",
    "remove_dead_groups",
    "remove_groups",
    "remove_own_groups",
    "socket_cap",
    "socket_capped",
    "sweep",
    "thaw",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "computer-exec"
# Every controller a run group may use: ``freezer`` only for live sandboxes (paused while they sync).
CONTROLLERS = ("memory", "pids", "freezer", "cpu")
# The most socket buffer memory one run holds (see the module's docstring): ten connections at the
# kernel's largest autotuned windows (6 MiB here), 36 runs at the cap to take the host's ``tcp_mem``.
SOCKET_CAP_MB = 64
_TCP_LIMIT = "memory.kmem.tcp.limit_in_bytes"


def socket_cap(limits: SandboxLimits) -> int:
    """The bytes of TCP and UDP buffers a run of ``limits`` may hold (see the module's docstring)."""
    share = limits.memory_mb // 4 if limits.memory_mb else SOCKET_CAP_MB
    return max(1, min(share, SOCKET_CAP_MB)) * 1024 * 1024


@functools.cache
def socket_capped() -> bool:
    """Whether this kernel's memory groups can cap socket buffers (cgroup v1's TCP limit is there)."""
    return (CGROUP_ROOT / "memory" / _TCP_LIMIT).exists()


class ControlFile:
    """One control file of a group read again and again (a live sandbox's ``pids.current`` and
    ``pids.events``, looked at around every run): through one descriptor, ``pread`` from offset 0 makes
    the kernel render it afresh, ~1 µs where opening it each time cost ~20 (three looks sat on each
    run's path). :meth:`read` gives None where the file cannot be read (the group gone) and once
    closed; close it before the group is removed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._closed = False

    def read(self) -> str | None:
        if self._closed:
            return None
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self._fd, 4096, 0).decode()
        except OSError:
            return None

    def close(self) -> None:
        self._closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def count_in(text: str | None, key: str) -> int:
    """The count a keyed control file (``pids.events``, ``memory.oom_control``: a ``key value`` line
    each) gives for ``key``; 0 where the text does not tell (None, no such line, not a number)."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
            return 0
    return 0


def make_groups(controllers: Iterable[str], limits: SandboxLimits) -> list[Path]:
    """Fresh groups for one run in each of ``controllers``, with ``limits`` written; a controller
    whose group cannot be made or limited is left out."""
    groups: list[Path] = []
    limits = in_force(limits)  # the process cap the descriptor budget leaves (``_fd_budget``)
    name = f"run-{process_tag()}-{secrets.token_hex(4)}"
    for controller in sorted(controllers):
        group = CGROUP_ROOT / controller / CGROUP_PARENT / name
        try:
            group.mkdir(parents=True)
            if controller == "memory" and limits.memory_mb:
                limit = str(limits.memory_mb * 1024 * 1024)
                (group / "memory.limit_in_bytes").write_text(limit)
                with contextlib.suppress(OSError):
                    (group / "memory.memsw.limit_in_bytes").write_text(limit)
            if controller == "memory":
                with contextlib.suppress(OSError):
                    (group / _TCP_LIMIT).write_text(str(socket_cap(limits)))
            if controller == "pids" and limits.max_processes:
                (group / "pids.max").write_text(str(limits.max_processes))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            continue
        groups.append(group)
    return groups


def procs_of(group: Path) -> set[int] | None:
    """The host pids of the processes in ``group`` now (its ``cgroup.procs``, opened afresh: v1 keeps
    a group's pid list per open file for a second, so a descriptor kept open reads back the list it
    first built), or None when unreadable."""
    try:
        with open(group / "cgroup.procs", "rb") as f:
            return {int(p) for p in f.read().split()}
    except (OSError, ValueError):
        return None


def sweep(groups: Sequence[Path]) -> None:
    """SIGKILL every process in ``groups`` (a few rounds: a process may fork while it is swept).
    The run's freezer group is thawed first, whichever controller's group is swept: a frozen process
    cannot die. (A pool worker killed while its live sandbox was frozen for a sync left the sandbox
    frozen; the next process removed the dead one's stale groups controller by controller, memory and
    pids before freezer, and spent every kill round of those two on processes that could not die,
    ~25 s in the restarted worker's constructor, before the freezer group's turn thawed them.)"""
    for group in groups:
        _thaw_run(group)
        for _ in range(20):
            pids = procs_of(group)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)


def _thaw_run(group: Path) -> None:
    """Thaw the freezer group of the run ``group`` belongs to (same name under ``freezer``), if any."""
    thaw(group.parent.parent.parent / "freezer" / group.parent.name / group.name)


def remove_groups(groups: Sequence[Path]) -> None:
    """Kill what is left in ``groups`` and remove them (blocking: call it from a worker thread on an
    event loop). A group that stays busy for 0.5 s is left to the stale-group sweep."""
    sweep(groups)
    for group in groups:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                sweep([group])
                time.sleep(0.01)


@functools.cache
def cgroup_writable(controller: str) -> bool:
    """Whether this process can make run groups under ``controller`` (probed once; the first probe
    also removes the stale groups of dead processes)."""
    parent = CGROUP_ROOT / controller / CGROUP_PARENT
    try:
        parent.mkdir(parents=True, exist_ok=True)
        test = parent / f"probe-{os.getpid()}"
        test.mkdir()
        test.rmdir()
    except OSError:
        return False
    remove_stale_groups(parent)
    return True


def remove_stale_groups(parent: Path) -> None:
    """Remove the run groups of processes that are gone (killed before they could remove them, e.g. a
    pool worker with standby sandboxes killed at shutdown); their programs died with them. Names are
    ``run-<pid>-<start>-<token>``, or ``run-<pid>-<token>`` from earlier versions."""
    try:
        groups = list(parent.glob("run-*-*"))
    except OSError:
        return
    for group in groups:
        parts = group.name.split("-")
        try:
            pid, start = int(parts[1]), (int(parts[2]) if len(parts) == 4 else None)
        except (IndexError, ValueError):
            continue
        if not is_alive(pid, start):
            remove_groups([group])


def remove_own_groups() -> None:
    """Remove every run group of this process (at its exit: its programs end with it)."""
    for controller in CONTROLLERS:
        parent = CGROUP_ROOT / controller / CGROUP_PARENT
        with contextlib.suppress(OSError):
            remove_groups(sorted(parent.glob(f"run-{process_tag()}-*")))


def remove_dead_groups() -> None:
    """Remove the run groups of dead processes in every controller."""
    for controller in CONTROLLERS:
        parent = CGROUP_ROOT / controller / CGROUP_PARENT
        if parent.is_dir():
            remove_stale_groups(parent)


def freeze(group: Path, timeout: float = 1.0, tries: int = 3) -> bool:
    """Freeze every process of the freezer ``group`` and wait until they all are (blocking; a few ms).
    A freeze still ``FREEZING`` after 10 ms is asked for again: now and then one stayed so for its
    whole second, the init in ``kernel_clone`` (a job forked as it froze), and failed the run whose
    sync it was; writing ``FROZEN`` again froze the group within 0.1 s each time (2 of 2). A freeze
    not done within ``timeout`` is let go (the group thawed) and tried again, ``tries`` times in all.
    False, with the group thawed, when none made it (a process stuck in the kernel): the caller must
    then not rely on the group standing still."""
    return any(_freeze_once(group, timeout) for _ in range(tries))


def _freeze_once(group: Path, timeout: float) -> bool:
    state = group / "freezer.state"
    try:
        state.write_text("FROZEN")
        asked = time.monotonic()
        deadline = asked + timeout
        while state.read_text().strip() != "FROZEN":
            now = time.monotonic()
            if now > deadline:
                state.write_text("THAWED")
                return False
            if now - asked > 0.01:  # a task forked as it froze stays running (v1): asked again
                state.write_text("FROZEN")
                asked = now
            time.sleep(0.0005)
    except OSError:
        return False
    return True


def thaw(group: Path) -> None:
    """Let the processes of the freezer ``group`` run again (nothing where there is no such group)."""
    with contextlib.suppress(OSError):
        fd = os.open(group / "freezer.state", os.O_WRONLY)  # never created where there is none
        try:
            os.write(fd, b"THAWED")
        finally:
            os.close(fd)
