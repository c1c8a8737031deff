"""The commands of a live sandbox (see ``_live``): each started by the init as its own process group
with pipes the host made, its output read until it exits (then drained), killed with its group on a
timeout or when its reader goes, and what stays open after its exit (a background process holding
the pipes) read into the run's background log. A part of :class:`~computer.runtime._live.LiveSandbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from ._backend import MAX_CHUNK_BYTES, ExecContext, OutputChunk
from ._cgroups import ControlFile, count_in
from ._live_parts import BackgroundLog, Job, ReadRate, command_line, drain, feed, is_eof
from ._options import BACKGROUND_SUFFIX
from ._output_dir import make_output_dir, own_caller
from ._process import TIMEOUT_EXIT_CODE, ProcessOutcome, SandboxProcess
from ._standby import write_all
from ._tasks import in_thread, run_to_completion

__all__ = ["BACKGROUND_LOG_DIR", "LiveJobs", "LiveSandboxError", "LiveStartError", "background_log"]

log = logging.getLogger("computer.runtime._live")

_PACKET = 1 << 16
# Jobs started ahead remembered after their run for the listing (the most recent).
_TAKEN = 256
# How long a killed job may take to be reported dead before the sandbox is ended instead.
_KILL_GRACE = 5.0
# Pipes of background processes a sandbox's host side reads at most (two a run, while its background
# processes hold them); past it the oldest go to the init, which reads and drops what comes (see
# ``LiveJobs._adopt``).
MAX_ADOPTED = 64
# Bytes of background logs a tick writes at most (each write is a whole log, up to a MiB); the rest
# are written by the next ticks, the least recently written first.
FLUSH_BYTES = 2 << 20
_TURNS = itertools.count(1)  # when a log was last written (``BackgroundLog.turn``), in order
# What a background log says when its pipes went to the init.
LET_GO = (
    b"\n[the sandbox's background processes hold too many runs' output pipes: what this run's "
    b"print from now on is dropped]\n"
)

BACKGROUND_LOG_DIR = "/.computer/output"


def background_log(exec_id: str) -> str:
    """Where what a run's background processes print after it returned is kept (workspace path)."""
    return f"{BACKGROUND_LOG_DIR}/{exec_id}{BACKGROUND_SUFFIX}"


class LiveSandboxError(RuntimeError):
    """The live sandbox ended under a run (its init died, it was ended, or it could not start)."""


class LiveStartError(LiveSandboxError):
    """The init could not start a command: the sandbox is at its process limit (EAGAIN) or out of
    memory (ENOMEM), e.g. a fork bomb left running in the background."""


class LiveJobs:
    """Starting and reading the commands of a live sandbox (fields and the channel: ``LiveSandbox``)."""

    workspace_id: str
    ctx: ExecContext
    loop: asyncio.AbstractEventLoop
    process: SandboxProcess
    host_ids: tuple[int, int] | None
    jobs: dict[str, Job]
    taken: dict[str, Job]
    background: dict[str, BackgroundLog]
    _adopted: dict[int, BackgroundLog]  # pipes read into background logs, oldest first
    _rate: ReadRate | None = None  # how fast its background logs are read, all together
    _oom_control: ControlFile | None  # ``memory.oom_control``, kept open
    kills_at_end: int  # ``oom_kills()`` when the sandbox ended
    # Moves on whenever a job starts that runs a user's code, or a run takes a job started ahead: a
    # job started ahead is trusted to wait only within the turn it started in (``Job.trusted``).
    job_turn: int = 0

    def _send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        raise NotImplementedError  # the channel's (``LiveSandbox``)

    def _lost(self, why: str) -> None:
        raise NotImplementedError

    def stirring(self) -> bool:
        raise NotImplementedError  # the sandbox's (``LiveSandbox``)

    def oom_kills(self) -> int:
        """Out-of-memory kills the sandbox's memory group counted so far (0 unknown)."""
        control = self._oom_control
        return count_in(control.read() if control is not None else None, "oom_kill")

    async def start_job(
        self,
        run: str,
        argv: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        stdin: bytes | None,
        fds: Sequence[int] = (),
        hold_stdin: bool = False,
        ahead: bool = False,
    ) -> Job:
        """Start ``argv`` in the sandbox as its own process group; its output is read with :meth:`output`.
        ``fds`` are the command's descriptors 3, 4… (this call closes them). ``hold_stdin``: our end of
        its stdin is kept open in ``job.stdin`` (a job started ahead: its run's input comes later).
        ``ahead``: a job started ahead of its run (a shell or a guest that waits), trusted to wait
        (``Job.trusted``) when nothing else runs as it starts and until a job of a user's code starts
        or a run takes one: a process of the user's may have made it run its own code (a write into its
        pipe through ``/proc/<pid>/fd/3``, ``ptrace``), and it did so unseen, every sync unfrozen."""
        job = Job(run, self.loop.create_future(), self.loop.create_future(), line=command_line(argv))
        if not ahead:
            self.job_turn += 1
        elif not self.stirring():
            job.trusted = self.job_turn
        pipes = [os.pipe() for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], *fds]
        ours_in = pipes[0][1]
        if self.host_ids is not None:  # reopened as /dev/stdout by a program: owner checked
            for fd in theirs:
                with contextlib.suppress(OSError):
                    os.fchown(fd, *self.host_ids)
        job.fds = {pipes[1][0]: "stdout", pipes[2][0]: "stderr"}
        message: dict[str, Any] = {"op": "run", "id": run, "fds": len(fds)}
        fields = {"argv": list(argv), "cwd": cwd, "env": env}
        spec = json.dumps(fields).encode()
        spec_w: int | None = None
        if len(spec) < _PACKET - 256:
            message.update(fields)
        else:  # too large for one packet: through a pipe the init reads whole
            spec_r, spec_w = os.pipe()
            theirs.append(spec_r)
            message["spec"] = True
        self.jobs[run] = job
        try:
            self._send(message, theirs)
        except BaseException:
            self.jobs.pop(run, None)
            for fd in (*job.fds, ours_in, *([spec_w] if spec_w is not None else [])):
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        if spec_w is not None:
            in_thread(lambda: write_all(spec_w, spec), "sending a large command line", daemon=True)
        if hold_stdin:
            job.stdin = ours_in
        elif stdin:
            in_thread(lambda: feed(ours_in, stdin), "feeding a run's stdin", daemon=True)
        else:
            os.close(ours_in)
        return job

    async def output(
        self,
        job: Job,
        outcome: ProcessOutcome,
        *,
        timeout: float | None,  # noqa: ASYNC109 - a deadline for the program
    ) -> AsyncGenerator[OutputChunk, None]:
        """The job's output until it exits, then ``outcome``; closed early, the job's process group is
        killed. What stays open after its exit (a background process holding the pipes) is adopted
        into the run's background log."""
        loop = self.loop
        chunks: list[OutputChunk] = []
        wake = asyncio.Event()
        paused: set[int] = set()
        open_fds = dict(job.fds)

        def readable(fd: int) -> None:
            name = open_fds.get(fd)
            if name is None:  # no longer this run's (drained, closed, or handed to the background log)
                loop.remove_reader(fd)
                return
            data = read_some(fd)
            if data is None:
                return
            if not data:
                loop.remove_reader(fd)
                open_fds.pop(fd, None)
                with contextlib.suppress(OSError):
                    os.close(fd)
            else:
                chunks.append(OutputChunk(name, data))  # type: ignore[arg-type]
                if len(chunks) >= 8:  # back-pressure: stop reading until the consumer caught up
                    loop.remove_reader(fd)
                    paused.add(fd)
            wake.set()

        for fd in open_fds:
            os.set_blocking(fd, False)
            loop.add_reader(fd, readable, fd)
        oom_before = self.oom_kills()
        deadline = None if timeout is None else loop.time() + timeout
        timed_out = False
        finished = False
        job.exited.add_done_callback(lambda _: wake.set())
        try:
            while True:
                while chunks:
                    yield chunks.pop(0)
                for fd in list(paused):
                    if fd in open_fds:
                        loop.add_reader(fd, readable, fd)
                paused.clear()
                if job.exited.done():
                    break
                wake.clear()
                wait = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    # Not ``wait_for``: on 3.11 it drops a cancellation (``kill``) that comes as the
                    # event is set (gh-86296), and a program printing every 0.5 ms was never killed.
                    async with asyncio.timeout(wait):
                        await wake.wait()
                except TimeoutError:
                    timed_out, deadline = True, None
                    self.signal_job(job)
                    await self._await_exit(job)
            try:
                code, error = job.exited.result()
            except LiveSandboxError:
                # The sandbox ended under the run. Out of memory, its files still fill the group once
                # the command is killed, and the init is killed next where it cannot be made immune
                # (no CAP_SYS_RESOURCE: a Ray worker, a container): the run died of its memory.
                outcome.out_of_memory = self.kills_at_end > oom_before
                raise
            # Everything the program wrote before it exited is in the pipes: drain it now.
            for fd in list(open_fds):  # no reader may pop a stream while the drain yields
                loop.remove_reader(fd)
            for fd, name in list(open_fds.items()):
                for chunk in drain(fd, name):
                    yield chunk
            for fd in [fd for fd, _ in list(open_fds.items()) if is_eof(fd)]:
                os.close(fd)
                open_fds.pop(fd)
            finished = True
            if error:
                outcome.exit_code = code
                raise (LiveStartError if code == 126 else LiveSandboxError)(error)
            if timed_out:
                code = TIMEOUT_EXIT_CODE
            elif code < 0:
                code = 128 - code
            outcome.exit_code, outcome.timed_out = code, timed_out
            # The kernel's choice may be another process of the sandbox: the run was killed for its
            # memory only when it died of SIGKILL while the group counted a kill.
            kills = self.oom_kills() - oom_before
            outcome.out_of_memory = code == 137 and kills > 0
            outcome.others_killed = max(0, kills - int(outcome.out_of_memory))
        finally:
            for fd in open_fds:
                with contextlib.suppress(Exception):
                    loop.remove_reader(fd)
            if not finished:

                async def stop() -> None:
                    self.signal_job(job)
                    await self._await_exit(job)

                await run_to_completion(stop())
            self.jobs.pop(job.id, None)
            if job.run and job.run != job.id:
                # Started ahead: processes its shell forked keep its name and its command line (a
                # background subshell, or a child not yet exec'd): listed as its run's after it too.
                self.taken[job.id] = job
                while len(self.taken) > _TAKEN:
                    del self.taken[next(iter(self.taken))]
            if open_fds:  # background processes still hold them
                self._adopt(job.run or job.id, open_fds)

    def signal_job(self, job: Job, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(LiveSandboxError):
            self._send({"op": "signal", "id": job.id, "sig": int(sig)})

    async def _await_exit(self, job: Job) -> None:
        try:
            async with asyncio.timeout(_KILL_GRACE):
                await asyncio.shield(job.exited)
        except TimeoutError:
            log.warning("live sandbox of %s: a killed job did not end; ending the sandbox", self.workspace_id)
            self._lost("a killed command did not end")
        except Exception:
            pass

    def _adopt(self, run: str, fds: dict[int, str]) -> None:
        """Keep reading what a run's background processes print, into its background log."""
        if self._rate is None:
            self._rate = ReadRate()
        logged = self.background.setdefault(run, BackgroundLog(self._rate))

        def readable(fd: int) -> None:
            data = read_some(fd)
            if data is None:
                return
            if data:
                logged.append(data)
                pause = logged.pause_after(len(data))
                if pause > 0:  # over its rate: the printer waits on its full pipe meanwhile
                    self.loop.remove_reader(fd)
                    self.loop.call_later(pause, resume, fd)
                return
            self.loop.remove_reader(fd)
            os.close(fd)
            self._adopted.pop(fd, None)
            logged.open -= 1

        def resume(fd: int) -> None:
            if fd in self._adopted:  # not closed meanwhile (the sandbox's end closes what it adopted)
                self.loop.add_reader(fd, readable, fd)

        for fd in fds:
            self._adopted[fd] = logged
            logged.open += 1
            self.loop.add_reader(fd, readable, fd)
        while len(self._adopted) > MAX_ADOPTED:
            self._let_go(next(iter(self._adopted)))

    def _let_go(self, fd: int) -> None:
        """Hand the adopted pipe ``fd`` to the init, which reads and drops what comes. A process that
        opened ``/proc/<pid>/fd/1`` of every run kept each run's two pipes open (its first message,
        one loop of the sandbox's): the host held two descriptors and up to a log's MiB per run for
        as long as the sandbox lived, toward the descriptor limit of a process serving every
        workspace. Closing the pipe instead would end its writers (SIGPIPE): a server of an older run
        keeps running, its log no longer growing."""
        logged = self._adopted.pop(fd)
        with contextlib.suppress(Exception):
            self.loop.remove_reader(fd)
        with contextlib.suppress(Exception):
            self._send({"op": "drop"}, [fd])
        os.close(fd)
        logged.open -= 1
        if not logged.let_go:
            logged.let_go = True
            logged.append(LET_GO)

    async def flush_logs(self, limit: int | None = FLUSH_BYTES) -> None:
        """Write the background logs that grew since their last write (a tick's), the least recently
        written first, until ``limit`` bytes are written (None: all; at least one log a call): each
        write is the whole log, so 32 printers left running (``yes &``) had every tick write 32 MiB,
        a quarter of the host's loop and half a core for as long as they ran. Let a log's bytes go
        once written with every pipe it reads closed. Before the first write, its directory is made
        a directory of its own (``make_output_dir``): made again when gone (``rm -r
        /.computer/output``: it was made once per sandbox, and no log of that sandbox was written
        again), and a file or a link a python program put there moved aside, which every log still
        held says (before, a file failed every tick's write and the logs were lost at the end; a link
        took them where it pointed; a link at a log's name that the write cannot follow is removed). A
        log whose write failed is written again by the next flush,
        and the others are written all the same (the first failure raised after them: a directory
        made at one log's path, by a careless caller or a python program's ``workspace`` calls,
        stopped every later log of the sandbox from being written)."""
        failed: Exception | None = None
        spent = 0
        ready = False
        for run, logged in sorted(self.background.items(), key=lambda item: item[1].turn):
            if logged.dirty and (limit is None or spent < limit):
                if not ready:
                    ready = True
                    try:
                        note = await make_output_dir(own_caller(self.ctx), BACKGROUND_LOG_DIR)
                    except Exception as exc:  # the logs stay dirty: tried again by the next flush
                        failed = exc
                        break
                    if note is not None:  # the logs written before went with what replaced it
                        for held in self.background.values():
                            if held.data or held.open:
                                held.append(f"\n[computer: {note}]\n".encode())
                spent += len(logged.data)
                logged.turn = next(_TURNS)
                logged.dirty = False
                logged.written = True  # named by ``processes`` from now on: never pruned under its write
                data = {"path": background_log(run), "data": logged.content()}
                try:
                    await self._write_log(data)
                except Exception as exc:
                    logged.dirty = True
                    failed = failed or exc
                    continue
                except BaseException:
                    logged.dirty = True
                    raise
            if not logged.open and not logged.dirty:  # written, and nothing more comes: let it go
                logged.data = bytearray()
        if failed is not None:
            raise failed

    async def _write_log(self, data: dict[str, Any]) -> None:
        """Write a background log, as the runtime's own call (``own_caller``: a program's calls may
        not change ``/.computer``); a link at its name (put there through the owner's API) whose
        target the write may not change (the journal) is removed, and the write made again."""
        call = own_caller(self.ctx)
        try:
            await call("write_file", data)
        except Exception as exc:
            try:
                await call("readlink", {"path": data["path"]})
            except Exception:
                raise exc from None  # no link there: the write's own failure
            await call("rm", {"path": data["path"]})
            await call("write_file", data)


def read_some(fd: int) -> bytes | None:
    """What the non-blocking pipe ``fd`` holds (at most a chunk); ``b""`` at its end (or on an error),
    None when nothing is there yet."""
    try:
        return os.read(fd, MAX_CHUNK_BYTES)
    except BlockingIOError:
        return None
    except OSError:
        return b""
