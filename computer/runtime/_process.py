"""A sandboxed process (``SandboxProcess``: the launcher plus its cgroups, whole-tree kill) and
``stream_process``: its output chunks as they come, stdin fed, timeout."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._backend import MAX_CHUNK_BYTES, OutputChunk
from ._cgroups import count_in, remove_groups, sweep
from ._tasks import in_thread, offload, run_to_completion

__all__ = [
    "TIMEOUT_EXIT_CODE",
    "ProcessOutcome",
    "SandboxProcess",
    "close_transport",
    "drop_transport",
    "hand_over_pipes",
    "kill_late_arrival",
    "oom_kills",
    "out_of_memory_error",
    "stream_process",
]

log = logging.getLogger(__name__)

TIMEOUT_EXIT_CODE = 124
_QUEUE_CHUNKS = 8  # per run, both streams together: bounded memory, back-pressure on the program
# How long a kill waits for the launcher to be reaped and its pipes to close before closing them.
_REAP_TIMEOUT = 10.0


@dataclass
class SandboxProcess:
    """A launched program: the launcher process plus its cgroups."""

    proc: asyncio.subprocess.Process
    cgroups: list[Path] = field(default_factory=list)
    killed: bool = False
    # In its own pid namespace (bubblewrap): every process of the run ends when the launcher does.
    contained: bool = False
    # Its slirp4netns (``_slirp.NetworkLink``) with ``network=True``: a live sandbox watches it.
    network: Any = None

    def __post_init__(self) -> None:
        global _exit_hook
        if not _exit_hook:
            _exit_hook = True
            atexit.register(_at_exit)
        _LAUNCHED[self.proc.pid] = self

    async def kill_tree(self) -> None:
        """SIGKILL everything the run started, then reap the launcher.

        ``proc.wait()`` ends only once the launcher is reaped *and* its pipes reached EOF; a process
        out of reach (no cgroups, and a bubblewrap child that outlived its parent because the kill
        came before it armed its parent-death signal) could hold them forever, so after
        ``_REAP_TIMEOUT`` our ends of the pipes are closed instead.
        """
        self.killed = True
        loop_ended = drop_transport(self.proc)  # started in an event loop that has ended: no wait
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the launcher leads its group: it is in there
        except (ProcessLookupError, PermissionError):
            # Only then the launcher alone: Popen.send_signal polls (waitpid) first, reaping a child
            # asyncio's watcher then misses ("Unknown child process pid ..., returncode 255").
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self.cgroups:
            await offload(None, sweep, self.cgroups)
        if loop_ended:
            return
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=_REAP_TIMEOUT)
        except TimeoutError:
            log.warning(
                "sandbox launcher %s: its pipes stayed open after the kill; closing them", self.proc.pid
            )
            close_transport(self.proc)
            with contextlib.suppress(Exception):  # best-effort: the warning above says what went wrong
                await asyncio.wait_for(self.proc.wait(), timeout=1)
        except Exception:  # a kill must not fail on a process that is already gone
            pass

    async def discard(self) -> None:
        """Kill the tree, reap it and remove the cgroups, even if the caller is cancelled meanwhile."""

        async def discard() -> None:
            await self.kill_tree()
            await offload(None, self.cleanup)

        await run_to_completion(discard())

    def cleanup(self) -> None:
        """Kill leftovers in the cgroups and remove them (after the launcher exited; blocking)."""
        groups, self.cgroups = self.cgroups, []
        remove_groups(groups)

    def kill_now(self) -> None:
        """SIGKILL the launcher's process group and remove the cgroups, from any thread, without an
        event loop (blocking)."""
        self.killed = True
        drop_transport(self.proc)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.cleanup()


_LAUNCHED: weakref.WeakValueDictionary[int, SandboxProcess] = weakref.WeakValueDictionary()
_exit_hook = False  # _at_exit registered (once per process)


def _at_exit() -> None:
    """At interpreter exit, end the processes of event loops that have ended (a workspace used from
    ``asyncio.run`` and never closed): each left a traceback ("Event loop is closed", from its
    transport's collection) and a warning from asyncio's child watcher on every exit, and its cgroups
    behind. A process of a loop still open is that loop's to end."""
    while _LAUNCHED:
        _, sp = _LAUNCHED.popitem()
        with contextlib.suppress(Exception):  # best-effort, at exit
            if sp.proc._loop.is_closed():  # type: ignore[attr-defined]
                if sp.killed:
                    drop_transport(sp.proc)
                else:
                    sp.kill_now()


def close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close our ends of the process's pipes (asyncio offers no public way)."""
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):  # best-effort cleanup of a process already killed
            transport.close()


def kill_late_arrival(creation: asyncio.Task[asyncio.subprocess.Process]) -> None:
    """Kill and close what a spawn cancelled before its creation finished yields when it does."""
    if creation.cancelled() or creation.exception() is not None:
        return
    proc = creation.result()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()  # only then: it polls (waitpid) first, which asyncio's child watcher would miss
    close_transport(proc)


def drop_transport(proc: asyncio.subprocess.Process) -> bool:
    """Let go of the pipes of a process whose event loop has ended, without a call into that loop: the
    transport's own close schedules its callbacks there, and its collection printed a traceback
    ("Event loop is closed") for each sandbox started in an ``asyncio.run`` that returned. The
    warning asyncio's child watcher logs when it reaps such a process is left out too. Whether its
    loop has ended (else nothing is done: that loop closes it, the pipes registered there till then)."""
    loop = getattr(proc, "_loop", None)  # asyncio's private fields, as in 3.11-3.13
    if loop is None or not loop.is_closed():
        return False
    _UNWATCHED.add(proc.pid)
    if len(_UNWATCHED) == 1:
        logging.getLogger("asyncio").addFilter(_unwatched)
    transport = getattr(proc, "_transport", None)
    with contextlib.suppress(Exception):  # at worst that traceback again
        for proto in transport._pipes.values():  # type: ignore[union-attr]
            if proto is not None:
                proto.pipe._pipe.close()
        transport._closed = True  # type: ignore[union-attr]
    return True


_UNWATCHED: set[int] = set()  # pids of processes let go by :func:`drop_transport` (a pid is a few bytes)


def _unwatched(record: logging.LogRecord) -> bool:
    """asyncio's "Loop ... that handles pid ... is closed", for a process :func:`drop_transport` let go."""
    args = record.args
    if "that handles pid" in str(record.msg) and isinstance(args, tuple) and len(args) == 2:
        if args[1] in _UNWATCHED:
            _UNWATCHED.discard(args[1])
            return False
    return True


@dataclass(slots=True)
class ProcessOutcome:
    """How the process ended; filled in by :func:`stream_process` once its output is drained."""

    exit_code: int | None = None
    timed_out: bool = False
    # The kernel killed a process of the run for going over its memory cgroup's limit.
    out_of_memory: bool = False
    # A live sandbox's other processes the kernel killed for memory while the run lasted (its limit is
    # shared: the kernel's choice may be a background server rather than the run that allocated).
    others_killed: int = 0


async def stream_process(
    sp: SandboxProcess,
    outcome: ProcessOutcome,
    *,
    stdin: bytes | None,
    timeout: float | None,  # noqa: ASYNC109 - a deadline for the program, not for this call
) -> AsyncGenerator[OutputChunk, None]:
    """Yield the program's output, then fill ``outcome``. Closing the iterator early kills the whole tree."""
    proc = sp.proc
    queue: asyncio.Queue[OutputChunk | None] = asyncio.Queue(maxsize=_QUEUE_CHUNKS)

    async def read(stream: asyncio.StreamReader | None, name: Literal["stdout", "stderr"]) -> None:
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                while data := await stream.read(MAX_CHUNK_BYTES):
                    await queue.put(OutputChunk(name, data))
        await queue.put(None)  # not reached when cancelled: nobody listens then

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
            proc.stdin.close()

    tasks = [
        asyncio.create_task(read(proc.stdout, "stdout")),
        asyncio.create_task(read(proc.stderr, "stderr")),
        asyncio.create_task(feed()),
    ]
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    timed_out = False
    open_streams = 2
    finished = False
    try:
        while open_streams:
            wait = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(wait):  # not ``wait_for``: it may drop a kill (see ``_live_jobs``)
                    item = await queue.get()
            except TimeoutError:
                timed_out = True
                deadline = None
                await sp.kill_tree()
                continue
            if item is None:
                open_streams -= 1
                continue
            yield item
        if deadline is not None:
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
                await sp.kill_tree()
        code = await proc.wait()
        finished = True
        outcome.out_of_memory = _oom_killed(sp.cgroups)
        if timed_out:
            code = TIMEOUT_EXIT_CODE
        elif code < 0:
            code = 128 - code  # killed by a signal: the shell's convention
        outcome.exit_code, outcome.timed_out = code, timed_out
    finally:

        async def teardown() -> None:
            if not finished or proc.returncode is None:
                await sp.kill_tree()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):  # cancelled just above: only their end matters
                    await task
            if sp.cgroups:
                if finished and not timed_out and not sp.killed and sp.contained:
                    # The program exited by itself, and its pid namespace took every process of the run
                    # with it: the cgroups are empty and their removal need not delay the result.
                    _clean_later(sp)
                else:
                    await offload(None, sp.cleanup)

        # A second cancellation (a kill, then close) must not cut the kill, the reaping or the cgroup
        # removal short.
        await run_to_completion(teardown())


def out_of_memory_error(limit_mb: int | None, mount_root: str) -> str:
    """What a run killed for its memory says (files written under the mirror are memory on tmpfs)."""
    limit = f" ({limit_mb} MiB)" if limit_mb else ""
    return (
        f"out of memory: the run went over its memory limit{limit} and the kernel killed it; files "
        f"written under {mount_root} count against that limit while the run lasts (what was written "
        "before the kill is kept)"
    )


def _oom_killed(groups: list[Path]) -> bool:
    """Whether the run's memory cgroup (v1) counted an out-of-memory kill."""
    return oom_kills(groups) > 0


def oom_kills(groups: list[Path]) -> int:
    """How many out-of-memory kills the memory cgroup (v1) among ``groups`` counted (``oom_kill`` in
    ``memory.oom_control``, Linux 4.13+); 0 where that cannot be told."""
    for group in groups:
        if "memory" not in group.parts:
            continue
        try:
            return count_in((group / "memory.oom_control").read_text(), "oom_kill")
        except OSError:
            return 0
    return 0


def _clean_later(sp: SandboxProcess) -> None:
    """Sweep and remove ``sp``'s cgroups in a worker thread (0.35 ms less per run). Cgroups a crash
    leaves behind are removed when a later process first probes cgroups."""
    in_thread(sp.cleanup, "removing a run's cgroups")


def hand_over_pipes(proc: asyncio.subprocess.Process, uid: int, gid: int) -> None:
    """Give the program's stdio pipes to the sandbox's host user: a program that reopens them
    (``echo x > /dev/stdout``, ``tee /dev/stderr``) goes through ``/proc/self/fd``, which checks the
    pipe's owner and mode (0600, this process's user). asyncio keeps the pipes in its transport
    (private: no public way to reach the read ends)."""
    transport = getattr(proc, "_transport", None)
    for fd in (0, 1, 2):
        pipe = transport.get_pipe_transport(fd) if transport is not None else None
        handle = pipe.get_extra_info("pipe") if pipe is not None else None
        if handle is not None:
            with contextlib.suppress(OSError, ValueError):
                os.fchown(handle.fileno(), uid, gid)
