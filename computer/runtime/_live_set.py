"""``LiveSandboxes``: the live sandboxes of one backend (one per workspace), and a run inside one.

Both built-in backends keep theirs here (SPEC section 10, "Live sandboxes": runs of one workspace on
one backend share one): the shell backend's jobs are ``bash -c source``, the python backend's are a
fresh guest interpreter (see ``python.py``). What a job is comes from the backend as a
:data:`Command`; everything else is shared: starting the sandbox (taking one started ahead from the
backend's :class:`~computer.runtime._warm.WarmSandboxes`), the run's sync before it starts and the
pull after it, its output, a kill or timeout (its process group; what it wrote is kept), the sandbox's
process limit and memory, the processes API, and the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from ._assets_bridge import SANDBOX_DIR
from ._backend import ExecContext, ExecEvent, ExecRequest, ExitEvent, OutputChunk, SyncLimits
from ._beneath import cwd_problem
from ._live import LiveSandbox, LiveSandboxError, LiveStartError
from ._live_launch import Launched, launch
from ._live_parts import Job, RunChanges
from ._mirror import Mirror
from ._process import ProcessOutcome, out_of_memory_error
from ._sandbox import Sandbox
from ._sync import MirrorSync
from ._tasks import on_loop, run_to_completion
from ._warm import PreparedSandbox, Ready, WarmSandboxes
from .types import ProcessInfo

__all__ = ["Command", "JobSpec", "LiveSandboxes"]

# Workspaces whose ended sandboxes left refusals for their next run (``LiveSandboxes._unreported``).
_UNREPORTED = 1000


def _keep_last(kept: dict[str, Any]) -> None:
    """Let the oldest of ``kept`` (in insertion order) go past its last ``_UNREPORTED``."""
    while len(kept) > _UNREPORTED:
        del kept[next(iter(kept))]


# Seconds a run waits for the workspace's sandbox that is still ending (its processes killed, what
# they wrote pulled) before it starts a fresh one anyway.
ENDING_WAIT = 30.0
# What a run says first on its stderr when the workspace's live sandbox was lost while no run was in
# progress (``LiveSandboxes._unsaid``).
UNSAID = (
    "computer: the workspace's live sandbox ended while no run was in progress ({lost}); "
    "its processes were ended (what they wrote is kept) and this command runs in a fresh one\n"
)

LOOP_ENDED = "the event loop it was started in has ended: one asyncio.run per call"
OTHER_LOOP = (
    "the workspace's live sandbox serves an event loop running in another thread of this process: "
    "run this workspace's commands from that loop"
)

LOOP_GONE = (
    "the workspace's live sandbox was started in an event loop that has ended (one asyncio.run per "
    "call), so its processes cannot be reached from this one; the next run ends them (end_sandbox() "
    "does it now): keep one event loop running while programs run in the background"
)


@dataclass
class JobSpec:
    """One run's command inside a live sandbox: ``argv`` with exactly ``env``; ``fds`` become its
    descriptors 3, 4… (handed over: closed by the start). ``job``: one the backend started ahead in
    this sandbox instead (a python guest waiting for its run), taken by this run."""

    argv: list[str]
    env: dict[str, str]
    fds: list[int] = field(default_factory=list)
    job: Job | None = None


# A run's command in a sandbox and a directory (inside it), made once per attempt (a run retried in a
# fresh sandbox makes it again) and kept open while the run streams (the python backend answers its
# guest's channel meanwhile).
Command = Callable[[LiveSandbox, str], AbstractAsyncContextManager[JobSpec]]


class LiveSandboxes:
    """The live sandboxes of one backend, by workspace id (see the module docstring)."""

    def __init__(
        self,
        *,
        sandbox: Sandbox,
        sync: MirrorSync,
        limits: SyncLimits,
        warm: WarmSandboxes[Ready],
        prepare: Callable[[Mirror], Awaitable[PreparedSandbox]],
        idle: float,
        lifetime: float,
    ) -> None:
        self.sandbox = sandbox
        self.sync = sync
        self.limits = limits
        self._limits_fields = dataclasses.asdict(limits)  # each run's ``synced_to`` (asdict: ~20 µs a run)
        self.warm = warm
        self.prepare = prepare  # a standby over a mirror, with the backend's binds
        self.idle, self.lifetime = idle, lifetime
        self.mount_root = sync.mount_root
        self._live: dict[str, LiveSandbox] = {}
        # One start at a time per workspace, with a lock per event loop (see ``_sandbox_of``).
        self._starting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        # What ended sandboxes' syncs refused with no run to tell (``LiveSandbox.unreported``), by
        # workspace: its next run's ``skipped`` (the oldest let go past _UNREPORTED workspaces).
        self._unreported: dict[str, dict[str, str]] = {}
        # Why a workspace's sandbox was lost while no run was in progress (``LiveSandbox.unsaid``):
        # its next run says so (the oldest let go past _UNREPORTED workspaces).
        self._unsaid: dict[str, str] = {}
        # Runs still in progress when their sandbox ended, with what its syncs made while they ran
        # (``end_stranded_run``), the last _UNREPORTED.
        self._stranded: dict[str, RunChanges] = {}

    # ------------------------------------------------------------------ a run

    async def run(
        self,
        request: ExecRequest,
        ctx: ExecContext,
        cwd: str,
        command: Command,
        *,
        mirrored: bool = True,
        retried: bool = False,
    ) -> AsyncIterator[ExecEvent]:
        """One run inside the workspace's live sandbox (started by the first run), in ``cwd`` (a
        workspace path below the mount root; ``mirrored=False``: ``/tmp``, never checked).

        A sandbox that cannot start the command at all (at its process limit or out of memory: a fork
        bomb left in the background) is ended with its processes (what they wrote is kept) and the
        command runs in a fresh one, saying so on stderr."""
        try:
            sandbox = await self._sandbox_of(ctx)
        except (OSError, LiveSandboxError, TimeoutError) as exc:
            yield ExitEvent(None, error=f"the sandbox could not start: {exc}")
            return
        lost = self._unsaid.pop(ctx.workspace_id, None)  # (``_sandbox_of`` waited for its end)
        if lost is not None:  # its background processes are gone: nothing else told the caller
            yield OutputChunk("stderr", UNSAID.format(lost=lost).encode())
        changes = sandbox.open_run(request.id, self._unreported.pop(ctx.workspace_id, None))
        finished = killed = False
        try:
            _, pushed = await sandbox.sync()  # the run starts from the workspace as it is now
            pushed, sandbox.pushed = pushed + sandbox.pushed, 0
            host_cwd = sandbox.mirror.host(cwd)
            problem = cwd_problem(sandbox.mirror.directory, self.mount_root, cwd) if mirrored else None
            if problem is not None:
                skipped = changes.skipped
                yield ExitEvent(
                    None, pushed=pushed, skipped=sorted(skipped), skipped_reasons=skipped, error=problem
                )
                finished = True
                return
            start_cwd = "/tmp" if not mirrored else cwd if self.sandbox.bwrap else str(host_cwd)
            outcome = ProcessOutcome()
            error = None
            refused, tasks = sandbox.forks_refused(), sandbox.tasks()
            # The user's code runs from here (a job started ahead is handed it as ``command`` opens):
            # no job started ahead is trusted to wait any more (``LiveSandbox.stirring``).
            sandbox.job_turn += 1
            try:
                async with command(sandbox, start_cwd) as spec:
                    if spec.job is not None:
                        job = spec.job
                        job.waiting, job.run = False, request.id
                    else:
                        job = await sandbox.start_job(
                            request.id,
                            spec.argv,
                            cwd=start_cwd,
                            env={**spec.env, "COMPUTER_EXEC_ID": request.id},
                            stdin=request.stdin,
                            fds=spec.fds,
                        )
                    output = sandbox.output(job, outcome, timeout=request.timeout)
                    async with contextlib.aclosing(output):
                        async for chunk in output:
                            yield chunk
            except LiveStartError as exc:
                await self.drop(sandbox, "it could not start a command")
                if not retried:
                    finished = True
                    note = (
                        f"computer: the live sandbox could not start this command ({exc}); it was ended "
                        "with its processes and the command runs in a fresh sandbox\n"
                    )
                    yield OutputChunk("stderr", note.encode())
                    again = self.run(request, ctx, cwd, command, mirrored=mirrored, retried=True)
                    async for event in again:
                        yield event
                    return
                error = str(exc)
            except LiveSandboxError as exc:  # the sandbox died under the run: what it wrote is pulled
                error = f"{exc}; the next run starts a fresh sandbox"
                if outcome.out_of_memory:  # killed with it (SIGKILL) for the memory it used
                    outcome.exit_code = 137
                    error = out_of_memory_error(self.sandbox.limits.memory_mb, self.mount_root) + (
                        f"; the live sandbox ended with it ({sandbox.dead}), the next run starts a fresh one"
                    )
                await self.drop(sandbox, "it ended under a run")
            except asyncio.CancelledError:
                killed = True  # ``kill``: its group is dead (``aclosing``); what it wrote is kept, and listed
            if sandbox.alive:
                await sandbox.sync(push=False)
            # A refused fork (``pids.events``), or, where refusals are counted nowhere, the run left
            # the sandbox at 90 % of its limit with more tasks than it found: a server's threads count
            # as tasks, and every run that ended while one held 90 % ended the sandbox with the
            # server, saying that run reached the limit; the run that started it too, once it waited
            # for the server to be ready (s65; nothing refused: the count alone tells).
            limit, now = self.sandbox.limits.max_processes, sandbox.tasks() or 0
            refused_now = sandbox.forks_refused()
            if refused_now is not None:
                reached = refused_now > (refused or 0)
            else:
                reached = limit is not None and now >= limit * 0.9 and now > (tasks or 0)
            if sandbox.alive and reached and await sandbox.busy():
                # The command ran into the sandbox's process limit and left processes behind (a fork
                # bomb in the background): nothing could start there any more. End it (what its
                # processes wrote is kept); the next run starts a fresh one.
                await self.drop(sandbox, "process limit reached")
                note = (
                    "computer: this command reached the sandbox's process limit and left processes "
                    "running; the live sandbox was ended with them (their files are kept)\n"
                )
                yield OutputChunk("stderr", note.encode())
            finished = True
            if outcome.others_killed and sandbox.alive:
                limit = self.sandbox.limits.memory_mb
                note = (
                    f"computer: the live sandbox reached its memory limit{f' ({limit} MiB)' if limit else ''}, "
                    f"shared by every process in it, during this run: the kernel killed "
                    f"{outcome.others_killed} other process(es) of the sandbox (see processes)\n"
                )
                yield OutputChunk("stderr", note.encode())
            if error is None and outcome.out_of_memory:
                # The mirror's files stay charged to the sandbox's memory group: end the sandbox (its
                # processes with it) so that the next run starts in a fresh one.
                error = out_of_memory_error(self.sandbox.limits.memory_mb, self.mount_root) + (
                    "; the live sandbox was ended with its processes, the next run starts a fresh one"
                )
                await self.drop(sandbox, "out of memory")
            # What the workspace keeps out of the sandbox is listed by every run, as per call.
            skipped = {**sandbox.mirror.left_out(), **changes.skipped}
            yield ExitEvent(
                None if killed else outcome.exit_code,
                pushed=pushed,
                pulled=sorted(changes.pulled),
                skipped=sorted(skipped),
                skipped_reasons=skipped,
                killed=killed or outcome.timed_out,
                error=error,
                live=sandbox.alive,
                synced_to=(
                    (
                        sandbox.mirror.rev,
                        self.mount_root,
                        {**self._limits_fields, "session": sandbox.mirror.session},
                    )
                    if sandbox.alive and sandbox.mirror.rev is not None
                    else None
                ),
            )
        finally:
            if not finished and sandbox.alive:  # killed: the job is dead; keep what it wrote
                with contextlib.suppress(Exception):
                    await run_to_completion(sandbox.sync(push=False))
            sandbox.close_run(request.id)

    # ------------------------------------------------------------------ start and end

    async def _sandbox_of(self, ctx: ExecContext) -> LiveSandbox:
        """The workspace's live sandbox, started when there is none (one start at a time)."""
        workspace_id, loop = ctx.workspace_id, asyncio.get_running_loop()
        lock = self._starting.get(workspace_id)
        if lock is None or lock[0] is not loop:  # (one left held by a task of an ended loop never frees)
            lock = self._starting[workspace_id] = (loop, asyncio.Lock())
        async with lock[1]:
            sandbox = self._live.get(workspace_id)
            if sandbox is not None and sandbox.alive and sandbox.loop is not loop:
                if sandbox.loop.is_running():
                    raise LiveSandboxError(OTHER_LOOP)
                # Started in an event loop that has ended (``asyncio.run`` once per call): every later
                # run failed "Event loop is closed". It ends from this loop, and this run says so.
                sandbox.ctx = ctx
                await self._abandon(sandbox)
            if sandbox is not None and sandbox.alive:
                sandbox.ctx = ctx
                if sandbox.bridge is not None:
                    sandbox.bridge.ctx = ctx
                return sandbox
            if sandbox is not None:
                # Still ending (idle, lost, ``end_sandbox``): its final pull first, so this run sees
                # what its processes wrote, and its mirror comes back warm. Before, the run started
                # in a fresh mirror pushed without it (a background writer's last file missing
                # there until a later sync), and the end's refusals and reason reached only the
                # run after.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(ENDING_WAIT):
                        await asyncio.shield(sandbox.ended.wait())
                self._note_unsaid(sandbox)  # (its end did, and forgot it, unless it is stuck)
                self._forget(sandbox)
            mirror = self.sync.acquire(workspace_id, ctx)
            self.sync.remove_evicted()
            clean = False
            started: LiveSandbox | None = None
            try:
                _, pushed = await self.sync.push(mirror, ctx)
                taken = await self.warm.take(mirror)
                for attempt in range(2):
                    try:
                        if isinstance(taken, Launched):  # started ahead: its init already waits
                            launched = taken
                        else:
                            if taken is not None:  # made for a sandbox per call (not this mode)
                                await run_to_completion(taken.discard())
                            launched = await self.launch(await self.prepare(mirror), mirror)
                        break
                    except (BrokenPipeError, ConnectionError, TimeoutError):  # died while it waited
                        taken = None
                        if attempt:
                            raise
                started = await LiveSandbox.start(
                    launched,
                    workspace_id=workspace_id,
                    mirror=mirror,
                    sync=self.sync,
                    ctx=ctx,
                    idle_end=self.idle,
                    lifetime=self.lifetime,
                    host_ids=mirror.owner,
                )
                clean = True
            finally:
                if not clean:
                    await self.sync.release(workspace_id, mirror, clean=False)
            assert started is not None
            started.pushed = pushed
            self._live[workspace_id] = started
            started.ended_callback = self._ended
            return started

    async def _abandon(self, sandbox: LiveSandbox, besides: Job | None = None) -> None:
        """End ``sandbox`` of an event loop that has ended, from this one (``LiveSandbox.abandon``);
        the workspace's next run says so (``LOOP_ENDED``) when a process of the user's was ended with
        it (``besides``: but the processes of a run being killed), not after each call of a script
        that starts nothing in the background."""
        quiet = sandbox.tasks() is not None and not await sandbox.busy(besides)
        await sandbox.abandon(LOOP_ENDED)
        if quiet:  # none of the user's processes was there: nothing lost, nothing to say
            self._unsaid.pop(sandbox.workspace_id, None)

    async def end_stranded_run(self, workspace_id: str, exec_id: str) -> RunChanges | None:
        """End the run ``exec_id`` whose event loop has ended (``Runtime.kill_exec`` from another
        loop: the run's own tasks never run again, and a cancel there raised "Event loop is closed"
        while the command ran on): the workspace's sandbox that holds it, of that loop, is ended from
        this one as a run finds it (``_abandon``: every process killed, what they wrote pulled).
        Returns what the sandbox's syncs pulled and refused while the run was in progress, the end's
        pull included (the caller settles the run with it: ``Runtime._kill``); None when no sandbox
        holds it (one ended with it already: what was known then)."""
        sandbox = self._live.get(workspace_id)
        if sandbox is None or exec_id not in sandbox.runs:
            return self._stranded.get(exec_id)
        if sandbox.loop is asyncio.get_running_loop() or sandbox.loop.is_running():
            return None
        job = next((j for j in sandbox.jobs.values() if exec_id in (j.id, j.run)), None)
        changes = sandbox.runs[exec_id]
        self._ended_with(exec_id, changes)
        await self._abandon(sandbox, job)
        sandbox.close_run(exec_id)
        return changes

    def _ended_with(self, run: str, changes: RunChanges) -> None:
        self._stranded[run] = changes
        _keep_last(self._stranded)

    async def launch(self, ready: PreparedSandbox, mirror: Mirror) -> Launched:
        """Start a live sandbox's init in the prepared sandbox ``ready`` over ``mirror`` (discarded if
        that fails)."""
        try:
            return await launch(
                ready.standby,
                ready.bridge_dir,
                inside_dir=SANDBOX_DIR if self.sandbox.bwrap else str(ready.bridge_dir),
                host_ids=mirror.owner,
            )
        except BaseException:
            await run_to_completion(ready.discard())
            raise

    def keep_warm(self, mirror: Mirror) -> None:
        """Start the next live sandbox over ``mirror`` ahead (its workspace's sandbox ended, or a
        mirror went idle)."""

        async def start() -> Launched:
            return await self.launch(await self.prepare(mirror), mirror)

        self.warm.keep(mirror, start)

    def _ended(self, sandbox: LiveSandbox) -> None:
        """A live sandbox ended (idle, lifetime, killed): forget it; its mirror stays warm, and what its
        syncs refused with no run to tell waits for the workspace's next run."""
        self._forget(sandbox)
        for run, changes in sandbox.runs.items():  # (a run of an ended loop, never closed: ended now)
            self._ended_with(run, changes)
        if sandbox.unreported:
            kept = self._unreported.pop(sandbox.workspace_id, {})
            self._unreported[sandbox.workspace_id] = {**kept, **sandbox.unreported}
            _keep_last(self._unreported)
        self._note_unsaid(sandbox)
        if sandbox.mirror.directory.is_dir() and sandbox.mirror in self.sync.mirrors.idle_mirrors(
            sandbox.workspace_id
        ):
            self.keep_warm(sandbox.mirror)

    def _note_unsaid(self, sandbox: LiveSandbox) -> None:
        """Why ``sandbox`` was lost while no run was in progress, for the workspace's next run (once)."""
        if sandbox.unsaid is not None:
            self._unsaid.pop(sandbox.workspace_id, None)
            self._unsaid[sandbox.workspace_id], sandbox.unsaid = sandbox.unsaid, None
            _keep_last(self._unsaid)

    def take_notices(self, workspace_id: str) -> tuple[str | None, dict[str, str]]:
        """What is kept here for the workspace's next run, taken (for a run that goes elsewhere: a pool
        worker hands it back): the note of a sandbox lost while no run was in progress (``UNSAID``),
        and what ended sandboxes' syncs refused (path -> reason)."""
        sandbox = self._live.get(workspace_id)
        if sandbox is not None and not sandbox.alive:
            self._note_unsaid(sandbox)  # still ending: its reason now
        lost = self._unsaid.pop(workspace_id, None)
        return None if lost is None else UNSAID.format(lost=lost), self._unreported.pop(workspace_id, {})

    def _forget(self, sandbox: LiveSandbox) -> None:
        if self._live.get(sandbox.workspace_id) is sandbox:
            del self._live[sandbox.workspace_id]

    async def drop(self, sandbox: LiveSandbox, why: str) -> None:
        """End ``sandbox`` (its processes killed, what they wrote pulled); the next run starts fresh,
        once that end is over (``_sandbox_of``): the end forgets it (``_ended``)."""
        await sandbox.end(why)

    # ------------------------------------------------------------------ the processes API

    def get(self, workspace_id: str) -> LiveSandbox | None:
        """The workspace's live sandbox while it lives."""
        sandbox = self._live.get(workspace_id)
        return sandbox if sandbox is not None and sandbox.alive else None

    def count(self, workspace_id: str | None = None) -> int:
        """Live sandboxes held (of ``workspace_id``, or all)."""
        return sum(
            1
            for key, sandbox in self._live.items()
            if sandbox.alive and (workspace_id is None or key == workspace_id)
        )

    async def processes(self, workspace_id: str) -> list[ProcessInfo]:
        sandbox = self._live.get(workspace_id)
        if sandbox is None or not sandbox.alive:
            return []
        return await on_loop(sandbox.loop, sandbox.processes, lambda: LiveSandboxError(LOOP_GONE))

    async def kill_process(self, workspace_id: str, pid: int) -> None:
        sandbox = self._live.get(workspace_id)
        if sandbox is None or not sandbox.alive:
            raise ProcessLookupError(f"no process {pid}: the workspace has no live sandbox")
        await on_loop(sandbox.loop, lambda: sandbox.kill_process(pid), lambda: LiveSandboxError(LOOP_GONE))

    async def end_sandbox(self, workspace_id: str) -> bool:
        sandbox = self._live.get(workspace_id)
        if sandbox is None:
            return False
        alive = sandbox.alive  # (one ending already: waited for, and none was live)
        await self.drop(sandbox, "ended by end_sandbox")
        return alive
