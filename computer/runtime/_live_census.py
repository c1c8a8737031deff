"""Who runs in a live sandbox (see ``_live``), by the kernel's count: its pids group's tasks and
processes, the forks its limit refused, whether a process of the user's runs (``busy``) and whether
any process could change the mirror under a sync (``stirring``). A part of
:class:`~computer.runtime._live.LiveSandbox`.
"""

from __future__ import annotations

from pathlib import Path

from ._cgroups import ControlFile, count_in, procs_of
from ._live_parts import Job
from .types import ProcessInfo

__all__ = ["LiveCensus"]


class LiveCensus:
    """The counts of a live sandbox's processes (fields: ``LiveSandbox``)."""

    jobs: dict[str, Job]
    job_turn: int
    _pids_current: ControlFile | None
    _pids_events: ControlFile | None
    _pids_group: Path | None
    _base_procs: frozenset[int]  # the init's and bubblewrap's host pids
    _baseline: int  # the tasks of those

    async def processes(self) -> list[ProcessInfo]:
        raise NotImplementedError  # the sandbox's (``LiveSandbox``)

    def forks_refused(self) -> int:
        """How many forks the sandbox's process limit refused so far (``pids.events``; 0 unknown)."""
        return count_in(self._pids_events.read() if self._pids_events is not None else None, "max")

    def tasks(self) -> int | None:
        """Tasks in the sandbox's pids group (its init and bubblewrap's included), or None."""
        text = self._pids_current.read() if self._pids_current is not None else None
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def _procs(self) -> set[int] | None:
        return procs_of(self._pids_group) if self._pids_group is not None else None

    async def busy(self) -> bool:
        """Whether a process of the user's runs (not the init, nor a guest started ahead that waits
        for its run). A sync's freeze never depends on it (:meth:`stirring`): a program can kill
        that guest, which counted here as waiting until a run took it: the freeze was skipped."""
        waiting = gone = 0
        for job in self.jobs.values():
            if job.waiting:
                if job.exited.done():
                    gone += 1  # killed while it waited: no process of its own any more
                else:
                    waiting += 1
        if len(self.jobs) - gone > waiting:
            return True
        tasks = self.tasks()
        if tasks is not None:
            return tasks > self._baseline + waiting
        return bool(await self.processes())

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
        procs = self._procs()
        return procs is None or not procs <= self._base_procs.union(waiting)
