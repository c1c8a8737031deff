"""Who runs in a live sandbox (see ``_live``), by the kernel's count: its pids group's tasks and
processes, the forks its limit refused, whether a process of the user's runs (``busy``) and whether
any process could change the mirror under a sync (``stirring``). A part of
:class:`~computer.runtime._live.LiveSandbox`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from ._cgroups import ControlFile, count_in, procs_of
from ._live_parts import Job, command_line, host_pid, innermost
from .types import ProcessInfo

__all__ = ["LiveCensus", "in_session", "waiting_processes"]

# Processes looked at by their ``/proc`` files at most, to find the jobs started ahead among them.
_LOOK_AT = 64


class LiveCensus:
    """The counts of a live sandbox's processes (fields: ``LiveSandbox``)."""

    jobs: dict[str, Job]
    job_turn: int
    _pids_current: ControlFile | None
    _pids_events: ControlFile | None
    _pids_group: Path | None
    _base_procs: frozenset[int]  # the init's and bubblewrap's host pids
    _baseline: int  # the tasks of those

    processes: Callable[[], Awaitable[list[ProcessInfo]]]  # the init's listing (``LiveSandbox``'s)

    def forks_refused(self) -> int | None:
        """How many forks the sandbox's process limit refused so far (``pids.events``), None where that
        cannot be read. Where it can, it counts every refusal: the process rlimit stays
        ``NPROC_MARGIN`` above the group's cap (``_limits``), so the group refuses first."""
        text = self._pids_events.read() if self._pids_events is not None else None
        return None if text is None else count_in(text, "max")

    def tasks(self) -> int | None:
        """Tasks in the sandbox's pids group (its init and bubblewrap's included), or None."""
        text = self._pids_current.read() if self._pids_current is not None else None
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def _procs(self) -> set[int] | None:
        return procs_of(self._pids_group) if self._pids_group is not None else None

    async def busy(self, besides: Job | None = None) -> bool:
        """Whether a process of the user's runs: a run's job, or any process but the init (and
        bubblewrap) and the jobs started ahead that wait for their run (a shell, a python guest);
        ``besides``: a run's job whose processes (its session) do not count (one being killed).

        A waiting job is taken off only as the process it is, found among the group's processes
        (its host pid, or its command line and the init as its parent: the init's ``started`` may
        never be read, its event loop closed): one the init has not started yet is no process.
        Before, every waiting job was taken off the kernel's count: a shell sent to the init, not
        yet started, hid a user's background process, and a sandbox of an ended event loop was
        taken for quiet (``LiveSandboxes._sandbox_of``), its ``LOOP_ENDED`` note dropped. A sync's
        freeze never depends on this (:meth:`stirring`)."""
        if any(not j.waiting and j is not besides for j in self.jobs.values()):
            return True
        waiting = [j for j in self.jobs.values() if j.waiting]
        tasks = self.tasks()
        if tasks is None:  # no pids controller: the init's listing (it hides the waiting jobs)
            return bool(await self.processes())
        procs = self._procs()
        if procs is not None and self._base_procs:
            others = procs - self._base_procs
            others -= waiting_processes(others, waiting, self._base_procs)
            if others and besides is not None and besides.started.done() and not besides.started.cancelled():
                with contextlib.suppress(Exception):  # (its start failed: no session)
                    others -= in_session(others, besides.started.result())
            return bool(others)
        there = [j for j in waiting if j.started.done() and not j.exited.done()]  # (no host pids known)
        return tasks > self._baseline + len(there)

    def stirring(self) -> bool:
        """Whether any process but the init (and bubblewrap) is in the sandbox, by the kernel's count
        (True when unreadable): only such a process can change the mirror under a sync, and none
        starts while there is none (the init starts them, when asked). A job started ahead that still
        waits (a shell or a python guest, blocked on its pipe) does not count when its host pid is
        known and the group's processes are those and the init's alone: every run after a workspace
        write paused the sandbox for its push, for the shell waiting there (~0.6 ms). Only one started
        while nothing else ran, and since then no job of a user's code started nor was one taken
        (``Job.trusted``): a program that wrote a command into the waiting shell's pipe
        (``/proc/<pid>/fd/3``) and exited left it running that command uncounted, every sync unfrozen."""
        tasks = self.tasks()
        if tasks is None or tasks <= self._baseline:
            return tasks is None
        turn = self.job_turn
        waiting = [
            j.host_pid for j in self.jobs.values() if j.waiting and j.trusted == turn and not j.exited.done()
        ]
        if not waiting or None in waiting:
            return True
        if tasks <= self._baseline + len(set(waiting)):
            # Room for the waiting jobs alone (a shell is one task): what else could be there, no
            # process of the user's could have started (they are trusted), so the group's process
            # list (``cgroup.procs``, ~0.1 ms of a run's start) is not read.
            return False
        procs = self._procs()
        return procs is None or not procs <= self._base_procs.union(waiting)


def waiting_processes(others: set[int], waiting: Iterable[Job], base: Iterable[int]) -> set[int]:
    """The host pids among ``others`` that are the processes of the ``waiting`` jobs (started ahead):
    a job's host pid, found by its pid inside (``NSpid``) once the init reported its start (and kept:
    ``Job.host_pid``); a job whose start was not reported (its event loop closed first), a child of
    the init (one of ``base``) with the job's command line. At most :data:`_LOOK_AT` looked at; a job
    whose process is not found has none (not yet, or no more)."""
    found: set[int] = set()
    lines: list[str] = []
    for job in waiting:
        if job.exited.done():
            continue
        if job.host_pid is None and job.started.done():
            inner = 0 if job.started.cancelled() or job.started.exception() else job.started.result()
            job.host_pid = host_pid(others - found, inner, _LOOK_AT) if inner > 0 else None
        if job.host_pid is not None and job.host_pid in others:
            found.add(job.host_pid)
        elif not job.started.done():
            lines.append(job.line)
    parents = set(base)
    for pid in sorted(others - found)[:_LOOK_AT] if lines else ():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = command_line([w.decode(errors="surrogateescape") for w in f.read().split(b"\0")])
            parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent in parents and line in lines:
            lines.remove(line)
            found.add(pid)
            if not lines:
                break
    return found


def in_session(others: set[int], leader: int) -> set[int]:
    """The host pids among ``others`` (at most :data:`_LOOK_AT` looked at) in the session of the
    sandbox's process ``leader`` (its pid inside: a job's, whose process may have ended)."""
    return {pid for pid in sorted(others)[:_LOOK_AT] if innermost(pid, b"NSsid") == leader}
