"""``LiveSandbox``: one long-lived sandbox per workspace and backend (SPEC section 10, "Live sandboxes").

The first run of a workspace starts it; later runs execute *inside* it: same mount, same network
namespace, same process tree. Its first program is a small init (``_live_init.py``, a child subreaper
that starts each command in its own process group with the host's pipes as its streams, over a
``SOCK_SEQPACKET`` socket). So

- a process started in the background (``setsid server &``, ``python -m http.server &``) keeps running
  after its call returns, and a later call reaches it (on loopback when the sandbox has no network);
  what it prints after the call returned goes to ``/.computer/output/<exec id>.background.log``
  (the last :data:`BACKGROUND_LOG_BYTES`);
- while any process besides the init runs, the mirror and the workspace are synced both ways every
  :data:`SYNC_INTERVAL` (a write on either side is visible on the other within ~250 ms): the sandbox's
  processes are frozen (cgroup v1 ``freezer``) for the few milliseconds a sync takes, so a pull never
  reads a half-replaced tree and a push never races a program swapping a directory for a symlink. The
  pull's rules are those of a run's pull (a path the workspace changed meanwhile keeps the workspace's
  version; it is reported as skipped);
- killing a run (or its timeout) kills that run's process group, as Ctrl-C does in a terminal; what it
  wrote is pulled; processes that left the group (``setsid``) keep running;
- limits (memory, processes) are the sandbox's, shared by everything running in it, not per call;
- each call has its own ``cwd`` and ``env`` (the backend's defaults plus the request's); a background
  process keeps those of the call that started it.

It ends after :attr:`idle_end` seconds with no process left besides the init, after :attr:`lifetime`
seconds in all (once no run is in progress), on ``end_sandbox``/``kill_process`` of everything, when
its workspace closes (hibernation) and when its process dies (a worker lost). Ending kills every
process, then pulls what they wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._assets_bridge import AssetsBridge
from ._backend import MAX_CHUNK_BYTES, ExecContext, OutputChunk
from ._cgroups import freeze, thaw
from ._live_launch import Launched
from ._live_parts import (
    BackgroundLog,
    Job,
    RunChanges,
    drain,
    fail,
    feed,
    has_changes,
    is_eof,
)
from ._mirror import Mirror
from ._process import TIMEOUT_EXIT_CODE, ProcessOutcome, SandboxProcess, oom_kills
from ._standby import write_all
from ._sync import MirrorSync, Synced
from ._tasks import in_background, run_to_completion
from .types import ProcessInfo

__all__ = ["SYNC_INTERVAL", "LiveSandbox", "LiveSandboxError", "LiveStartError", "background_log"]

log = logging.getLogger(__name__)

# Seconds between two looks at a busy sandbox (changes on either side).
SYNC_INTERVAL = 0.1
_PACKET = 1 << 16
# How long a killed job may take to be reported dead before the sandbox is ended instead.
_KILL_GRACE = 5.0


class LiveSandboxError(RuntimeError):
    """The live sandbox ended under a run (its init died, it was ended, or it could not start)."""


class LiveStartError(LiveSandboxError):
    """The init could not start a command: the sandbox is at its process limit (EAGAIN) or out of
    memory (ENOMEM), e.g. a fork bomb left running in the background."""


BACKGROUND_LOG_DIR = "/.computer/output"


def background_log(exec_id: str) -> str:
    """Where what a run's background processes print after it returned is kept (workspace path)."""
    return f"{BACKGROUND_LOG_DIR}/{exec_id}.background.log"


class LiveSandbox:
    """A running live sandbox of one workspace (see the module docstring). Use :meth:`start`."""

    def __init__(
        self,
        *,
        workspace_id: str,
        mirror: Mirror,
        sync: MirrorSync,
        process: SandboxProcess,
        channel: socket.socket,
        bridge_dir: Path,
        ctx: ExecContext,
        idle_end: float,
        lifetime: float,
        host_ids: tuple[int, int] | None,
    ) -> None:
        self.workspace_id = workspace_id
        self.mirror = mirror
        self.sync_ = sync
        self.process = process
        self.channel = channel
        self.bridge_dir = bridge_dir
        self.ctx = ctx  # the latest run's context (a pool worker's is tied to the owner it came from)
        self.idle_end = idle_end
        self.lifetime = lifetime
        self.host_ids = host_ids
        self.lock = asyncio.Lock()  # syncs, starts and the end, one at a time
        self.loop = asyncio.get_running_loop()
        self.created = time.monotonic()
        self.idle_since: float | None = time.monotonic()
        self.jobs: dict[str, Job] = {}
        self.runs: dict[str, RunChanges] = {}
        self.background: dict[str, BackgroundLog] = {}
        self._requests: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_ref = 0
        self.dead: str | None = None  # why the sandbox cannot take runs any more
        self.ended = asyncio.Event()
        self._ending: asyncio.Task[None] | None = None
        self.bridge: AssetsBridge | None = None
        self.pushed = 0  # files the start's push wrote: counted by the first run
        groups = {g.parts[-3]: g for g in process.cgroups if len(g.parts) >= 3}
        self._freezer = groups.get("freezer")
        self._pids = groups.get("pids")
        self._baseline = 0
        self._ticker: asyncio.Task[None] | None = None
        self._adopted: set[int] = set()  # pipes of background processes, read into their logs
        self._stderr: asyncio.Task[None] | None = None
        self._log_dir_made = False
        # Called once it ended (its backend forgets it and keeps the mirror warm).
        self.ended_callback: Callable[[LiveSandbox], None] | None = None

    # ------------------------------------------------------------------ start

    @classmethod
    async def start(cls, launched: Launched, **fields: Any) -> LiveSandbox:
        """A live sandbox over the init ``launched`` (see :func:`launch`); ``fields`` are the
        constructor's."""
        sandbox = cls(
            process=launched.process, channel=launched.channel, bridge_dir=launched.bridge_dir, **fields
        )
        sandbox._baseline = launched.baseline
        sandbox.loop.add_reader(launched.channel.fileno(), sandbox._readable)
        sandbox.bridge = AssetsBridge(sandbox.ctx, sandbox.mirror, launched.bridge_dir)
        await sandbox.bridge.__aenter__()
        sandbox._ticker = asyncio.create_task(sandbox._tick())
        sandbox._stderr = asyncio.create_task(sandbox._log_init_stderr())
        return sandbox

    async def _log_init_stderr(self) -> None:
        """What the init itself writes (a traceback if it ever crashes) goes to this process's log
        (read, so it never blocks on a full pipe)."""
        stream = self.process.proc.stderr
        if stream is None:
            return
        with contextlib.suppress(Exception):
            while line := await stream.readline():
                log.warning(
                    "live sandbox of %s: init: %s", self.workspace_id, line.decode(errors="replace").rstrip()
                )

    @property
    def alive(self) -> bool:
        return self.dead is None

    # ------------------------------------------------------------------ channel

    def _readable(self) -> None:
        while True:
            try:
                data = self.channel.recv(1 << 22)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost("its first process ended")
                return
            try:
                message = json.loads(data)
            except ValueError:
                log.warning("live sandbox of %s: unreadable message from its init", self.workspace_id)
                continue
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op in ("started", "exit"):
            job = self.jobs.get(str(message.get("id")))
            if job is None:
                return
            if op == "started":
                if not job.started.done():
                    job.started.set_result(int(message["pid"]))
                return
            if not job.started.done():
                job.started.set_result(0)
            if not job.exited.done():
                job.exited.set_result((int(message["code"]), message.get("error")))
        elif op in ("killed", "ps"):
            future = self._requests.pop(int(message.get("ref") or 0), None)
            if future is not None and not future.done():
                future.set_result(message)
        else:
            log.warning("live sandbox of %s: init says %s", self.workspace_id, message.get("error"))

    def _lost(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.channel.fileno())
        error = LiveSandboxError(f"the live sandbox ended: {self.dead}")
        fail([f for job in self.jobs.values() for f in (job.started, job.exited)], error)
        fail(list(self._requests.values()), error)
        self._requests.clear()
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())

    def _send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        if self.dead is not None:
            raise LiveSandboxError(f"the live sandbox ended: {self.dead}")
        data = json.dumps(message).encode()
        for _ in range(200):
            try:
                socket.send_fds(self.channel, [data], list(fds))
                return
            except BlockingIOError:
                time.sleep(0.001)
            except OSError as exc:
                self._lost(f"its init cannot be reached ({exc.strerror})")
                raise LiveSandboxError(f"the live sandbox ended: {self.dead}") from exc
        raise LiveSandboxError("the live sandbox's init does not read its messages")

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        self._next_ref += 1
        ref = self._next_ref
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._requests[ref] = future
        try:
            self._send({**message, "ref": ref})
            return await asyncio.wait_for(future, 10)
        finally:
            self._requests.pop(ref, None)

    # ------------------------------------------------------------------ processes

    def forks_refused(self) -> int:
        """How many forks the sandbox's process limit refused so far (``pids.events``; 0 unknown)."""
        if self._pids is None:
            return 0
        try:
            for line in (self._pids / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def tasks(self) -> int | None:
        """Tasks in the sandbox's pids group (its init and bubblewrap's included), or None."""
        if self._pids is None:
            return None
        try:
            return int((self._pids / "pids.current").read_text())
        except (OSError, ValueError):
            return None

    async def busy(self) -> bool:
        """Whether any process besides the init runs (so files may change under the mirror)."""
        if self.jobs:
            return True
        tasks = self.tasks()
        if tasks is not None:
            return tasks > self._baseline
        return bool(await self.processes())

    async def processes(self) -> list[ProcessInfo]:
        reply = await self._request({"op": "ps"})
        found = []
        for p in reply.get("processes", []):
            run = p.get("exec_id")
            found.append(
                ProcessInfo(
                    pid=int(p["pid"]),
                    command=str(p["command"]),
                    started=datetime.fromtimestamp(float(p["started"]), UTC),
                    cpu_seconds=float(p["cpu_seconds"]),
                    rss_bytes=int(p["rss_bytes"]),
                    ppid=int(p.get("ppid", 0)),
                    exec_id=run,
                    log=background_log(run)
                    if run in self.background and self.background[run].written
                    else None,
                )
            )
        return found

    async def kill_process(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal one process of the sandbox (its own pid); ``ProcessLookupError`` when it has none."""
        reply = await self._request({"op": "kill", "pid": int(pid), "sig": int(sig)})
        if reply.get("error"):
            raise ProcessLookupError(reply["error"])

    # ------------------------------------------------------------------ runs

    def open_run(self, run: str) -> RunChanges:
        self.idle_since = None
        changes = self.runs[run] = RunChanges()
        return changes

    def close_run(self, run: str) -> None:
        self.runs.pop(run, None)
        if not self.runs:
            self.idle_since = time.monotonic()

    async def start_job(
        self,
        run: str,
        argv: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        stdin: bytes | None,
        fds: Sequence[int] = (),
    ) -> Job:
        """Start ``argv`` in the sandbox as its own process group; its output is read with :meth:`output`.
        ``fds`` are the command's descriptors 3, 4… (this call closes them)."""
        job = Job(run, self.loop.create_future(), self.loop.create_future())
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
            in_background(asyncio.to_thread(write_all, spec_w, spec), "sending a large command line")
        if stdin:
            in_background(asyncio.to_thread(feed, ours_in, stdin), "feeding a run's stdin")
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
            try:
                data = os.read(fd, MAX_CHUNK_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
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
        oom_before = oom_kills(self.process.cgroups)
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
                    await asyncio.wait_for(wake.wait(), wait)
                except TimeoutError:
                    timed_out, deadline = True, None
                    self.signal_job(job)
                    await self._await_exit(job)
            code, error = job.exited.result()
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
            outcome.out_of_memory = code == 137 and oom_kills(self.process.cgroups) > oom_before
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
            if open_fds:  # background processes still hold them
                self._adopt(job.id, open_fds)

    def signal_job(self, job: Job, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(LiveSandboxError):
            self._send({"op": "signal", "id": job.id, "sig": int(sig)})

    async def _await_exit(self, job: Job) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(job.exited), _KILL_GRACE)
        except TimeoutError:
            log.warning("live sandbox of %s: a killed job did not end; ending the sandbox", self.workspace_id)
            self._lost("a killed command did not end")
        except Exception:
            pass

    def _adopt(self, run: str, fds: dict[int, str]) -> None:
        """Keep reading what a run's background processes print, into its background log."""
        logged = self.background.setdefault(run, BackgroundLog())

        def readable(fd: int) -> None:
            try:
                data = os.read(fd, MAX_CHUNK_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                logged.append(data)
                return
            self.loop.remove_reader(fd)
            os.close(fd)
            self._adopted.discard(fd)

        for fd in fds:
            self._adopted.add(fd)
            self.loop.add_reader(fd, readable, fd)

    # ------------------------------------------------------------------ sync

    async def sync(self, *, push: bool = True) -> tuple[Synced | None, int]:
        """One two-way sync (pull what the sandbox changed, then push what the workspace changed),
        with the sandbox frozen while it lasts when anything runs in it. Returns the pull (or None)
        and how many files the push wrote."""
        async with self.lock:
            return await self._sync_locked(push=push)

    async def _sync_locked(self, *, push: bool) -> tuple[Synced | None, int]:
        frozen = False
        if self._freezer is not None and await self.busy():
            frozen = await asyncio.to_thread(freeze, self._freezer)
            if not frozen:
                raise LiveSandboxError("the live sandbox could not be paused for a sync")
        try:
            synced = await self._pull()
            mirror, ctx = self.mirror, self.ctx
            pushed = 0
            if push:
                page = await ctx.sync_push(mirror.rev, self.sync_.mount_root, self.sync_.push_limits(mirror))
                if has_changes(page) or mirror.rev is None:
                    _, pushed = await self.sync_.push(mirror, ctx, first=page)
            return synced, pushed
        finally:
            if frozen and self._freezer is not None:
                thaw(self._freezer)

    async def _pull(self) -> Synced | None:
        """Bring what changed in the mirror to the workspace (nothing to do: None), and tell every
        run in progress; the sandbox must not be running unfrozen (the caller's job)."""
        mirror = self.mirror
        if mirror.quiet() or mirror.rev is None:
            return None
        synced = await self.sync_.pull(mirror, self.ctx, mirror.rev, "live", self.bridge, defer=False)
        if self.bridge is not None:  # its saves are in the workspace and the mirror now
            self.bridge.saved.clear()
            self.bridge.own_revs.clear()
        for changes in self.runs.values():
            changes.add(synced)
        return synced

    async def _tick(self) -> None:
        """While the sandbox lives: sync while anything runs, flush background logs, end when idle."""
        failures = 0
        while self.dead is None:
            await asyncio.sleep(SYNC_INTERVAL)
            if self.dead is not None:
                return
            try:
                busy = await self.busy()
                now = time.monotonic()
                if busy or self.runs:
                    self.idle_since = None
                elif self.idle_since is None:
                    self.idle_since = now
                # A process that wrote and exited since the last look leaves the mirror changed
                # with nothing running: pull that too (pushes matter only to a running process).
                if (busy or not self.mirror.quiet()) and not self.lock.locked():
                    await self.sync(push=busy)
                await self._flush_logs()
                failures = 0
            except LiveSandboxError:
                return
            except Exception as exc:  # the workspace unreachable for a moment: try again next tick
                failures += 1
                if failures in (1, 50):
                    log.warning("live sandbox of %s: sync failed: %r", self.workspace_id, exc)
            if not self.runs and (
                (self.idle_since is not None and now - self.idle_since >= self.idle_end)
                or now - self.created >= self.lifetime
            ):
                self.dead = "idle" if self.idle_since is not None else "lifetime reached"
                self._ending = asyncio.ensure_future(self._end())
                return

    async def _flush_logs(self) -> None:
        for run, logged in list(self.background.items()):
            if logged.dirty:
                if not self._log_dir_made:
                    await self.ctx.fs_call("mkdir", {"path": BACKGROUND_LOG_DIR, "recursive": True})
                    self._log_dir_made = True
                logged.dirty = False
                await self.ctx.fs_call("write_file", {"path": background_log(run), "data": logged.content()})
                logged.written = True

    # ------------------------------------------------------------------ end

    async def end(self, why: str = "ended") -> None:
        """Kill every process, pull what they wrote, let the mirror go (idempotent; waits for it)."""
        if self.dead is None:
            self.dead = why
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())
        await asyncio.shield(self._ending)

    async def _end(self) -> None:
        ticker = self._ticker
        if ticker is not None and ticker is not asyncio.current_task():
            ticker.cancel()
        if self._stderr is not None:
            self._stderr.cancel()
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.channel.fileno())
        error = LiveSandboxError(f"the live sandbox ended: {self.dead}")
        fail([f for job in self.jobs.values() for f in (job.started, job.exited)], error)
        async with self.lock:
            await self.process.kill_tree()
            clean = False
            try:
                await self._pull()  # the tree is dead: nothing to freeze
                clean = True
            except Exception as exc:
                log.warning("live sandbox of %s: the final pull failed: %r", self.workspace_id, exc)
            for fd in list(self._adopted):
                with contextlib.suppress(Exception):
                    self.loop.remove_reader(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._adopted.clear()
            with contextlib.suppress(Exception):
                await self._flush_logs()
            await asyncio.to_thread(self.process.cleanup)
            self.channel.close()
            if self.bridge is not None:
                with contextlib.suppress(Exception):
                    await self.bridge.__aexit__(None, None, None)
            await asyncio.to_thread(AssetsBridge.remove_directory, self.bridge_dir)
            with contextlib.suppress(Exception):
                await self.sync_.release(self.workspace_id, self.mirror, clean=clean)
        self.ended.set()
        if self.ended_callback is not None:
            self.ended_callback(self)
