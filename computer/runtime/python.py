"""``PythonBackend``: Python source in a sandboxed ``python3 -I -S``, callable (SPEC section 6).

The program's working directory is a mirror of the workspace's ``mount_root`` (default ``/workspace``), so
``open``, ``os``, ``pathlib`` and ``subprocess`` read and write workspace files (SPEC section 10). By default
(``live=True``) runs of one workspace share a live sandbox, exactly as the shell backend's do (``_live_set``):
each run is a fresh guest interpreter started by the sandbox's init as its own process group, files sync both
ways while anything runs, a kill or timeout keeps what was written, and a process the program starts
(``subprocess.Popen``) outlives the run and is listed by ``processes``. Decision: what is per call is the
interpreter (globals, imported modules, ``sys.path`` changes start fresh every run); what lasts is the sandbox
(its processes, ``/tmp``, the mirror). With ``live=False`` every run has a sandbox of its own
(:class:`MirrorSync`: push before, pull after), and a guest started ahead over the mirror takes the
interpreter's start off the run.

The injected ``workspace`` module stays for direct access: its calls travel as msgpack frames over a
socket to the host, which answers each with ``ctx.fs_call`` on the authoritative workspace at once.
Decision: the two views meet at the syncs, as a shell run and a workspace write do: a path written
both through ``workspace`` and through ``open()`` in one interval keeps the ``workspace`` write (the
pull leaves a path the workspace changed meanwhile alone, and reports it in ``skipped``). A ``cwd``
outside the mount root runs with process cwd ``/tmp``. ``main(input)``'s return value is the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ..storage.paths import canonical, is_within
from ._backend import ExecContext, ExecEvent, ExecRequest, ExitEvent, SyncLimits
from ._backend_scratch import backend_scratch
from ._beneath import cwd_problem
from ._codec import ChannelLimits, pack_frame
from ._context import GUEST_OPS
from ._entry_cap import MAX_ENTRIES
from ._leftovers import could_live, guest_report
from ._live import LiveSandbox
from ._live_calls import LiveCalls
from ._live_set import JobSpec, LiveSandboxes
from ._mirror import Mirror
from ._mirror_pool import MirrorPool
from ._mount_root import check_mount_root
from ._process import out_of_memory_error, stream_process
from ._pychannel import (
    GUEST_FLAGS,
    AheadGuest,
    Guest,
    Session,
    guest_flags,
    guest_version,
    held_back,
    serve,
    stage_guest,
    start_env,
)
from ._reaper import reap_periodically
from ._sandbox import Bind, Sandbox, SandboxLimits
from ._staging import PYTHON_DIR, stage_python
from ._sync import MirrorSync
from ._tasks import offload, run_to_completion
from ._warm import PreparedSandbox, Ready, Warm, WarmSandboxes, prepare_sandbox
from .types import BackendInfo

__all__ = ["PythonBackend"]

_GUEST_DIR = "/opt/computer"  # the guest and msgpack; its interpreter runs GUEST_FLAGS (isolated, no site)


class PythonBackend(LiveCalls):
    """Runs Python source in a sandbox; ``import workspace`` reaches the workspace filesystem."""

    background_advice = ""  # said after what a run per call left running (``_leftovers``), as the shell's

    def __init__(
        self,
        *,
        id: str = "python",
        network: bool = False,
        memory_mb: int | None = 1024,
        max_processes: int | None = 256,
        cpu_seconds: int | None = None,
        cwd: str | None = None,
        python: str | None = None,
        warm_guests: int = 1,
        max_write_bytes: int = 64 * 1024 * 1024,
        unprivileged: bool = True,
        mount_root: str = "/workspace",
        max_file_bytes: int | None = None,
        max_files: int | None = None,
        max_sync_bytes: int = 32 * 1024 * 1024,
        max_entries: int | None = MAX_ENTRIES,
        scratch_dir: str | None = None,
        live: bool = True,
        live_idle: float = 60.0,
        live_lifetime: float = 3600.0,
        warm_sandboxes: int = 4,
    ) -> None:
        """``unprivileged``: as root, programs run as an unprivileged host user (see ``Sandbox``).
        ``mount_root`` is mirrored (the default cwd); ``live``, ``live_idle``, ``live_lifetime`` and the
        sync settings (``max_entries``…) are the shell's. ``warm_guests``: what is started ahead per mirror (a live
        sandbox, or with ``live=False`` a guest interpreter; 0: none), at most ``warm_sandboxes`` in all."""
        self.mount_root = check_mount_root(canonical(mount_root), (PYTHON_DIR, _GUEST_DIR))
        self.default_cwd = cwd or self.mount_root
        # What the host reads from the guest's channel (see ``_codec``); ``max_write_bytes`` is the
        # largest ``workspace.write_file`` (the host holds that much while the workspace stores it).
        self.limits = ChannelLimits(write_bytes=max_write_bytes)
        self.warm_guests = warm_guests
        self._ahead = 0  # guests started ahead in live sandboxes so far (their jobs' names)
        limits = SandboxLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_seconds=cpu_seconds)
        self.sandbox = Sandbox(network=network, limits=limits, unprivileged=unprivileged)
        self.live = live and could_live()
        if self.live:
            self.sandbox.cgroups.add("freezer")
        # A second one ahead did not help python runs back to back (two starting at once slowed each
        # other down), so a mirror keeps at most ``warm_guests``.
        self._warm: WarmSandboxes[Ready] = WarmSandboxes(
            warm_sandboxes, per_mirror=warm_guests, back_to_back=warm_guests
        )
        owner = self.sandbox.host_ids
        self.scratch = backend_scratch(scratch_dir, owner, "python", self)
        if self.live:  # what a dead sibling left (a frozen sandbox, mirrors): ``_reaper``
            reap_periodically(self.scratch.parent.parent)
        self.sync_limits = SyncLimits(
            max_file_bytes=max_file_bytes, max_files=max_files, max_sync_bytes=max_sync_bytes
        )
        self._sync = MirrorSync(MirrorPool(self.scratch, self.mount_root), self.mount_root, self.sync_limits)
        self._sync.owner, self._sync.max_entries, self._sync.leases = owner, max_entries, self.sandbox.leases
        limit = self.sandbox.limits.memory_mb
        self._sync.kept_limit = limit * 1024 * 1024 if limit else None
        self._lives = LiveSandboxes(
            sandbox=self.sandbox,
            sync=self._sync,
            limits=self.sync_limits,
            warm=self._warm,
            prepare=self._prepare,
            idle=live_idle,
            lifetime=live_lifetime,
        )
        base = os.path.realpath(python or getattr(sys, "_base_executable", None) or sys.executable)
        self._base = base
        # The interpreter, the guest script, their environment and binds: staged at the first spawn or
        # warm-up (``_mount``), never here (see ``_startup_ms``).
        self.python, self._guest = "", ""
        self._env: dict[str, str] = {}
        self._binds: list[Bind] = []
        startup = self._startup_ms()
        version = guest_version(base)
        self.info = BackendInfo(
            id=id,
            protocol="module",
            callable=True,
            language="python",
            network=network,
            startup_ms=round(startup, 1),
            modules=("python standard library", "workspace"),
            isolation=self.sandbox.isolation,
            description=(
                f"Runs Python {version} source in a sandbox. If it defines main(input), main is called with "
                "the input and its JSON-able return value is the result value. The working directory is "
                f"the workspace's {self.mount_root} (default cwd): open(), os, pathlib and subprocess read "
                "and write workspace files, saved back "
                + (
                    "while the program runs (within about a quarter of a second) and when it ends "
                    "(anything left out is listed in skipped with the reason). Each run is a fresh "
                    "interpreter that ends as a script does (no globals survive; threads that are not "
                    "daemon threads are waited for), but runs of this workspace share one sandbox: a "
                    "process started with subprocess.Popen keeps running after the run returns and "
                    "later runs reach it (on 127.0.0.1); killing a run or its timeout keeps what it wrote. "
                    if self.live
                    else "when the run ends (anything left out is listed in skipped with the reason). "
                    "Each run has a sandbox of its own: a process subprocess.Popen started ends with it "
                    "(its stderr names them). "
                )
                + "`import workspace` gives synchronous functions acting on the workspace at once: "
                + ", ".join(GUEST_OPS)
                + " (same errors as Python's: FileNotFoundError…; relative paths resolve from cwd; "
                "/.computer, the run journal and output logs, is read-only to them: PermissionError). "
                "The two views meet at the syncs: what open() or os wrote reaches workspace calls at the next "
                "(a directory os.makedirs made is not there yet for workspace.write_file: use workspace.mkdir); "
                "a path changed both ways keeps the workspace call's change. "
                "Modules in the workspace cwd are importable. Only the standard library is installed. "
                f"Network: {'on' if network else 'off'}. Startup cost about {startup:.0f} ms. "
                "Isolation: " + self.sandbox.isolation + "."
            ),
        )

    def _startup_ms(self) -> float:
        """The startup cost the description states: this sandbox's own start (``/bin/true`` in it) plus
        the interpreter's (``-I -S -c pass``, on the host), one run each, about 30 ms in all.

        Decision: measured without staging anything. Timing the staged interpreter in the sandbox, as
        a run starts it, meant staging the standard library (~3,200 links, 0.2-0.4 s, and as long
        again to remove them at exit) when the backend is built; a workspace that never runs python
        (a one-shot ``computer tool NAME exec`` on the shell) paid that for nothing. Staging happens
        at the first spawn or warm-up instead (``_mount``); the sum measured here is within a few ms
        of the staged start."""
        import subprocess
        import time

        start = time.perf_counter()
        subprocess.run([self._base, *GUEST_FLAGS, "-c", "pass"], capture_output=True, check=False)
        interpreter = (time.perf_counter() - start) * 1000
        return self.sandbox.probe_ms(runs=1) + interpreter

    def _mounts(self) -> tuple[str, str, dict[str, str], list[Bind]]:
        """The interpreter, the guest script, their environment and the binds, for the next spawn.

        Only staged trees are bound (see ``_staging``): the interpreter with its standard library at
        ``/opt/python``, the guest and msgpack at ``/opt/computer``, so no host path appears inside.
        Staged again if the process's scratch directory was released meanwhile. Without bubblewrap
        nothing is bound: the host interpreter runs the staged guest where it is. Called through
        :meth:`_mount`.
        """
        owner = self.sandbox.host_ids
        guest_stage = stage_guest(owner)
        if not self.sandbox.bwrap:
            return self._base, f"{guest_stage}/guest.py", {}, []
        staged = stage_python(self._base, owner)
        binds = [*staged.binds, Bind(guest_stage, _GUEST_DIR)]
        return staged.executable, f"{_GUEST_DIR}/guest.py", dict(staged.env), binds

    async def _mount(self) -> None:
        """Stage (or check) the interpreter and the guest before a spawn, in a thread: the first
        staging links the standard library (~0.3 s), which must not stall the event loop."""
        self.python, self._guest, self._env, self._binds = await offload(None, self._mounts)

    @property
    def mirrors(self) -> MirrorPool:
        """The pool of warm workspace mirrors."""
        return self._sync.mirrors

    async def _spawn_guest(self, env: dict[str, str], mirror: Mirror | None = None) -> Guest:
        """A sandboxed interpreter running the guest, waiting for its run on the returned socket;
        with ``mirror`` bound read-write at the mount root."""
        await self._mount()
        binds = list(self._binds)
        if mirror is not None:
            binds.append(Bind(str(mirror.directory), self.mount_root, writable=True))
        host_end, guest_end = socket.socketpair()
        try:
            full = {"LANG": "C.UTF-8", "HOME": "/tmp/home", "PATH": "/usr/bin:/bin", **self._env, **env}
            full["COMPUTER_CHANNEL_FD"] = str(guest_end.fileno())
            sp = await self.sandbox.spawn(
                [self.python, *guest_flags(env), "-u", self._guest],
                binds=binds,
                cwd="/tmp",
                env=start_env(full, env),
                pass_fds=[guest_end.fileno()],
                ids=mirror.owner if mirror is not None else None,
            )
        except BaseException:
            host_end.close()
            raise
        finally:
            guest_end.close()
        return Guest(sp, host_end)

    def _guest_env(self, env: dict[str, str]) -> dict[str, str]:
        return {"LANG": "C.UTF-8", "HOME": "/tmp/home", "PATH": "/usr/bin:/bin", **self._env, **env}

    def _setup(self, request: ExecRequest, chdir: str | None) -> dict[str, Any]:
        """The guest's setup frame; ``chdir``: the process's directory to change to (None: stay)."""
        cwd = request.cwd or self.default_cwd
        return {
            "source": request.source,
            "input": request.input,
            "cwd": cwd,
            "mirrored": is_within(cwd, self.mount_root),  # the program's cwd is the workspace's
            "chdir": chdir,
            "limits": dataclasses.asdict(self.limits),
            "environ": held_back(request.env),
            "leftovers": guest_report(self),  # with live=False: name what the run left running
        }

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """The run in the workspace's live sandbox, or (``live=False``) over a mirror of the workspace
        (the sync bracket around a guest), or without one when its cwd is outside the mount root."""
        cwd = request.cwd or self.default_cwd
        mirrored = is_within(cwd, self.mount_root)
        if self.live:
            async for event in self._run_live(request, ctx, cwd, mirrored=mirrored):
                yield event
            return
        if not mirrored:
            async for event in self._run_unmirrored(request, ctx):
                yield event
            return
        workspace_id = ctx.workspace_id
        mirror = self._sync.acquire(workspace_id, ctx)
        self._sync.remove_evicted()
        guest: Guest | None = None
        clean = killed = False
        try:
            push, pushed = await self._sync.push(mirror, ctx)
            problem = cwd_problem(mirror.directory, self.mount_root, cwd)
            if problem is not None:
                yield ExitEvent(None, pushed=pushed, error=problem)
                clean = True
                return
            guest = await self._take_guest(mirror, request) or await self._spawn_guest(request.env, mirror)
            # Reachable from another event loop should this one end under it (``_per_call``).
            self._sync.calls.hold(request.id, workspace_id, ctx, mirror, push.rev, guest.sp)
            session = Session()
            output = self._session(guest, request, ctx, session, chdir=cwd)
            try:
                async with contextlib.aclosing(output):
                    async for chunk in output:
                        yield chunk
            except GeneratorExit:
                # Closed: the guest is dead; what it wrote is kept (SPEC section 10).
                await self._sync.pull(mirror, ctx, push.rev, request.id, defer=False)
                clean = True
                raise
            except asyncio.CancelledError:
                killed = True  # ``kill``: the guest is dead; what it wrote is kept, and listed
            synced = await self._sync.pull(mirror, ctx, push.rev, request.id, defer=not killed)
            clean = True
            yield ExitEvent(
                None if killed else session.outcome.exit_code,
                value=session.result.get("value"),
                error=out_of_memory_error(self.sandbox.limits.memory_mb, self.mount_root)
                if session.outcome.out_of_memory
                else session.error(killed or session.outcome.timed_out),
                killed=killed or session.outcome.timed_out,
                pushed=pushed,
                pulled=synced.pulled,
                skipped=sorted(synced.skipped),
                skipped_reasons=synced.skipped,
                pending=synced.pending,
            )
        finally:
            self._sync.calls.let_go(request.id, mirror)
            if guest is not None:
                guest.host_end.close()
            if await self._sync.release(workspace_id, mirror, clean=clean):
                self._keep_warm(mirror)
            self._sync.remove_evicted()

    async def _take_guest(self, mirror: Mirror | None, request: ExecRequest) -> Guest | None:
        """A guest started ahead for ``mirror`` (None: runs without one), for a run without ``env``
        (the interpreter reads its locale variables once, at start)."""
        if request.env:
            return None
        taken = await self._warm.take(mirror)
        if taken is not None and not isinstance(taken, Guest):  # a live sandbox (not this mode)
            await run_to_completion(taken.discard())
            return None
        return taken

    def _keep_warm(self, mirror: Mirror) -> None:
        """Start the next run's guest over ``mirror`` in the background (a moment after this run):
        the guest waits with the mirror bound, so the workspace's next run skips the interpreter's
        start; it belongs to that mirror only, and ends with it."""
        self._warm.keep(mirror, lambda: self._spawn_guest({}, mirror))

    async def _run_unmirrored(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """Take a guest started ahead (or spawn one), run the request in it, report its value."""
        guest = await self._take_guest(None, request)
        try:
            if guest is None:
                guest = await self._spawn_guest(request.env)
            session = Session()
            output = self._session(guest, request, ctx, session, chdir=None)
            async with contextlib.aclosing(output):
                async for chunk in output:
                    yield chunk
            yield ExitEvent(
                session.outcome.exit_code,
                value=session.result.get("value"),
                error=session.error(session.outcome.timed_out),
                killed=session.outcome.timed_out,
            )
        finally:
            if guest is not None:
                guest.host_end.close()
            if not request.env:
                self._warm.keep(None, lambda: self._spawn_guest({}))

    async def _session(
        self, guest: Guest, request: ExecRequest, ctx: ExecContext, session: Session, *, chdir: str | None
    ) -> AsyncGenerator[ExecEvent, None]:
        """Send the run to ``guest``, answer its workspace calls and stream its output until it ends."""
        try:
            reader, writer = await asyncio.open_unix_connection(sock=guest.host_end)
        except BaseException:  # cancelled before stream_process owns the process: end it here
            await guest.sp.discard()
            raise
        writer.write(pack_frame(self._setup(request, chdir)))
        server = asyncio.create_task(serve(reader, writer, ctx, self.limits, session.result))
        try:
            output = stream_process(guest.sp, session.outcome, stdin=request.stdin, timeout=request.timeout)
            async with contextlib.aclosing(output):
                async for chunk in output:
                    yield chunk
            writer.close()
        finally:
            server.cancel()
            with contextlib.suppress(BaseException):  # cancelled just above; it answers its own errors
                await server

    # ------------------------------------------------------------------ live sandboxes

    async def _run_live(
        self, request: ExecRequest, ctx: ExecContext, cwd: str, *, mirrored: bool
    ) -> AsyncIterator[ExecEvent]:
        """One run in the workspace's live sandbox: a guest started by its init (ahead of the run, or
        now), its channel handed over as descriptor 3 (see ``_live_set``)."""
        sessions: list[Session] = []
        used: list[LiveSandbox] = []

        @contextlib.asynccontextmanager
        async def command(sandbox: LiveSandbox, start_cwd: str) -> AsyncIterator[JobSpec]:
            session = Session()
            sessions.append(session)
            used.append(sandbox)
            ahead = await self._take_ahead(sandbox, request)
            if ahead is not None:  # its process is in /tmp: the setup frame moves it
                host_end, fds, job = ahead.host_end, [], ahead.job
                setup = {**self._setup(request, start_cwd), "exec_id": request.id}
            else:
                host_end, guest_end = socket.socketpair()
                fds, job, setup = [guest_end.detach()], None, self._setup(request, None)
            try:
                reader, writer = await asyncio.open_unix_connection(sock=host_end)
            except BaseException:
                host_end.close()
                for fd in fds:
                    os.close(fd)
                raise
            writer.write(pack_frame(setup))
            server = asyncio.create_task(serve(reader, writer, ctx, self.limits, session.result))
            try:
                env = start_env({**self._guest_env(request.env), "COMPUTER_CHANNEL_FD": "3"}, request.env)
                yield JobSpec([self.python, *guest_flags(request.env), "-u", self._guest], env, fds, job)
            finally:
                writer.close()
                server.cancel()
                with contextlib.suppress(BaseException):  # cancelled just above
                    await server

        async for event in self._lives.run(request, ctx, cwd, command, mirrored=mirrored):
            if isinstance(event, ExitEvent) and sessions:
                session = sessions[-1]
                event = dataclasses.replace(
                    event, value=session.result.get("value"), error=event.error or session.error(event.killed)
                )
            yield event
        # The run's result is out: start the next run's guest in the sandbox, a moment from now.
        if used and used[-1].alive and used[-1].spare is None and self.warm_guests > 0:
            sandbox = used[-1]
            sandbox.spare = Warm.start(lambda: self._start_ahead(sandbox))

    async def _take_ahead(self, sandbox: LiveSandbox, request: ExecRequest) -> AheadGuest | None:
        """The guest started ahead in ``sandbox``, for a run without ``env`` (the interpreter reads
        its locale variables once, at start) or stdin (its stdin is already closed)."""
        spare = sandbox.spare
        if spare is None or request.env or request.stdin:
            return None
        sandbox.spare = None
        taken = await spare.take()
        if taken is not None and not isinstance(taken, AheadGuest):
            await run_to_completion(taken.discard())
            return None
        return taken

    async def _start_ahead(self, sandbox: LiveSandbox) -> AheadGuest:
        """Start a guest in ``sandbox`` that waits for the next run (its imports done meanwhile)."""
        self._ahead += 1
        name = f"ahead-{self._ahead}"
        host_end, guest_end = socket.socketpair()
        env = {**self._guest_env({}), "COMPUTER_CHANNEL_FD": "3", "COMPUTER_EXEC_ID": name}
        argv = [self.python, *GUEST_FLAGS, "-u", self._guest]
        try:
            job = await sandbox.start_job(
                name, argv, cwd="/tmp", env=env, stdin=None, fds=[guest_end.detach()], ahead=True
            )
        except BaseException:
            host_end.close()
            raise
        job.waiting = True
        ahead = AheadGuest(sandbox, job, host_end)
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(job.started)
        except BaseException:
            ahead.discard_now()
            raise
        return ahead

    async def _prepare(self, mirror: Mirror) -> PreparedSandbox:
        """A standby sandbox over ``mirror`` with the interpreter and the guest bound, and a fresh
        assets bridge directory (for a live sandbox's init)."""
        await self._mount()
        binds = [*self._binds, Bind(str(mirror.directory), self.mount_root, writable=True)]
        return await prepare_sandbox(self.sandbox, self.scratch, binds, init=self.live, ids=mirror.owner)
