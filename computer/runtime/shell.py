"""``ShellBackend``: real ``bash`` over a mirror of the workspace, in a sandbox (SPEC section 6).

Each run is one sync bracket: *push* (the mirror catches up with the workspace: only changes since its
revision travel) → *spawn* (bash under :class:`Sandbox`, the mirror bound read-write at the mount
root) → *stream* (output chunks) → *pull* (created/changed/deleted files back in one transaction,
never over protected files nor over files the workspace changed meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ..storage.paths import canonical, is_within
from ._assets_bridge import SANDBOX_DIR, AssetsBridge
from ._backend import (
    ExecContext,
    ExecEvent,
    ExecRequest,
    ExitEvent,
    SyncLimits,
)
from ._backend_scratch import backend_scratch
from ._beneath import cwd_problem
from ._entry_cap import MAX_ENTRIES
from ._leftovers import could_live, ended_why, epilogue
from ._live import LiveSandbox
from ._live_calls import LiveCalls
from ._live_parts import Job, command_line
from ._live_set import JobSpec, LiveSandboxes
from ._live_shell import AheadShell, start_shell
from ._mirror import Mirror
from ._mirror_pool import MirrorPool
from ._mount_root import check_mount_root
from ._process import ProcessOutcome, out_of_memory_error, stream_process
from ._reaper import reap_periodically
from ._sandbox import Bind, Sandbox, SandboxLimits, run_to_completion
from ._sync import MirrorSync
from ._warm import PreparedSandbox, Ready, Warm, WarmSandboxes, prepare_sandbox
from .types import BackendInfo

__all__ = ["ShellBackend"]

# The longest script passed to bash as its argument (see ``ShellBackend._bash``).
_ARGUMENT_MAX = 64 * 1024


def _script_name(request: ExecRequest) -> str:
    return f"script-{request.id}.sh"


_COMMANDS = (
    "bash",
    "coreutils (ls cat cp mv rm mkdir find xargs sort uniq wc head tail cut tr tee dd du df stat touch chmod ln)",
    "grep",
    "sed",
    "awk",
    "diff",
    "tar",
    "gzip",
    "python3",
    "assets (assets publish <path> [<expiry>]: prints a share URL)",
)


def _on_tmpfs(path: Path) -> bool:
    """Whether ``path`` lies on a tmpfs (its pages are memory, charged to the writer's cgroup)."""
    best, kind = "", ""
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 2 and is_within(str(path), fields[1]) and len(fields[1]) >= len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        return False
    return kind == "tmpfs"


class ShellBackend(LiveCalls):
    """Runs ``bash -c source`` in a sandbox over a synced mirror of ``mount_root``."""

    def __init__(
        self,
        *,
        id: str = "shell",
        mount_root: str = "/workspace",
        network: bool = False,
        max_file_bytes: int | None = None,
        max_files: int | None = None,
        max_sync_bytes: int = 32 * 1024 * 1024,
        max_entries: int | None = MAX_ENTRIES,
        memory_mb: int | None = 1024,
        max_processes: int | None = 256,
        cpu_seconds: int | None = None,
        scratch_dir: str | None = None,
        mirror_pool: Callable[[Path, str], MirrorPool] | None = None,
        warm_sandboxes: int = 4,
        unprivileged: bool = True,
        live: bool = True,
        live_idle: float = 60.0,
        live_lifetime: float = 3600.0,
    ) -> None:
        """``max_entries``: the most files, directories and symlinks a run may leave in the workspace
        (``_entry_cap``; None: no limit). ``live``: runs of one workspace share a live sandbox (see ``_live``: background processes
        survive the call, files sync both ways while anything runs); it ends after ``live_idle``
        seconds with no process left, or ``live_lifetime`` seconds in all. ``warm_sandboxes``: how
        many sandboxes are started ahead for the most recently used mirrors; 0 also starts no shell
        ahead in a live sandbox (``_live_shell``: the next run's bash, waiting for its command). Needs the cgroup v1
        ``freezer`` and ``/usr/bin/python3``; without them every run has a sandbox of its own.

        Not live, a run whose command left processes running in the background says on its stderr
        which ones ended with it (``_leftovers``), followed by :attr:`background_advice` when set
        (how to keep one running: a CLI names its own ways)."""
        self.mount_root = check_mount_root(canonical(mount_root))
        self.limits = SyncLimits(
            max_file_bytes=max_file_bytes, max_files=max_files, max_sync_bytes=max_sync_bytes
        )
        # ``unprivileged``: as root, programs run as an unprivileged host user that owns nothing else
        # (the mirror is that user's), never as a host root without capabilities (issue 17).
        self.sandbox = Sandbox(
            network=network,
            limits=SandboxLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_seconds=cpu_seconds),
            unprivileged=unprivileged,
        )
        # This process's scratch directory (0700, the sandbox user's; removed at exit, and by any
        # later process if this one dies), then one directory per backend in it.
        self.live = live and could_live()
        if self.live:
            self.sandbox.cgroups.add("freezer")
        # Why a background process ends with its command (``_leftovers``); the advice only where a live
        # sandbox could keep it.
        self._could_live = could_live()
        self._ended_why = ended_why("each command runs in", "ShellBackend")
        self.background_advice = ""
        self.live_idle, self.live_lifetime = live_idle, live_lifetime
        owner = self.sandbox.host_ids
        base = backend_scratch(scratch_dir, owner, "shell", self)
        self.scratch = base
        if self.live:  # what a dead sibling left (a frozen sandbox, mirrors): ``_reaper``
            reap_periodically(base.parent.parent)
        # ``mirror_pool(base, mount_root)`` builds the pool of warm mirrors (default: a MirrorPool
        # keeping idle mirrors of the 64 most recently used workspaces).
        self._mirrors: MirrorPool = (mirror_pool or MirrorPool)(base, self.mount_root)
        self._sync = MirrorSync(self._mirrors, self.mount_root, self.limits)
        self._sync.owner, self._sync.leases = owner, self.sandbox.leases
        self._sync.kept_limit = memory_mb * 1024 * 1024 if memory_mb else None
        self._sync.max_entries = max_entries
        # Sandboxes started ahead for the most recently used mirrors (at most ``warm_sandboxes``).
        self.warm_sandboxes = warm_sandboxes
        self._ahead = 0  # shells started ahead in live sandboxes so far (their names)
        self._warm: WarmSandboxes[Ready] = WarmSandboxes(warm_sandboxes)
        self._lives = LiveSandboxes(
            sandbox=self.sandbox,
            sync=self._sync,
            limits=self.limits,
            warm=self._warm,
            prepare=self._prepare,
            idle=live_idle,
            lifetime=live_lifetime,
        )
        startup = self.sandbox.probe_ms()
        self.info = BackendInfo(
            id=id,
            protocol="command",
            callable=False,
            language="bash",
            network=network,
            startup_ms=round(startup, 1),
            commands=_COMMANDS,
            isolation=self.sandbox.isolation,
            description=self._describe(startup, network),
        )

    @property
    def mirrors(self) -> MirrorPool:
        """The pool of warm workspace mirrors (read-only: pass ``mirror_pool`` to choose it)."""
        return self._mirrors

    def _limited(self) -> bool:
        return self.limits.max_file_bytes is not None or self.limits.max_files is not None

    def _describe(self, startup: float, network: bool) -> str:
        return (
            f"Runs a bash command in a sandbox. The workspace's {self.mount_root} appears at "
            f"{self.mount_root} (the default working directory); files created, changed or deleted there "
            + (
                "are saved back to the workspace while the command runs (within about a quarter of a "
                "second) and when it ends, and workspace changes reach running commands as fast. "
                "Commands of this workspace share one sandbox: a process started in the background "
                "(`server &`) keeps running after the command returns and later commands reach it "
                "(on 127.0.0.1); what it prints afterwards goes to /.computer/output/<exec id>."
                "background.log. Killing a command or its timeout ends its process group and keeps "
                "what it wrote. "
                if self.live
                else "are saved back to the workspace when the command ends. Each command runs in a "
                "sandbox of its own: a process started in the background (`server &`) ends with the "
                "command (its stderr then says which ended). "
            )
            + f"Anything outside {self.mount_root} (e.g. /tmp) is private to the sandbox. "
            "File contents, modes, mtimes, symlinks, hard links and "
            "empty directories are kept; anything left out (a FIFO, a name that is not UTF-8"
            + (", a file over the backend's size or count limits" if self._limited() else "")
            + ", a file the workspace changed during the command) is listed in the result's skipped "
            "paths with the reason. "
            + (
                f"Files under {self.mount_root} are kept in memory while the command runs and count "
                f"against its memory limit ({self.sandbox.limits.memory_mb} MiB). "
                if self.sandbox.limits.memory_mb and _on_tmpfs(self.scratch)
                else ""
            )
            + "Available: "
            + ", ".join(_COMMANDS)
            + f". Network: {'on' if network else 'off'}. Startup cost about {startup:.0f} ms per command "
            "plus the sync of changed files. Isolation: " + self.sandbox.isolation + "."
        )

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """One sync bracket: push, spawn, stream, pull; yields output then one ExitEvent."""
        cwd = request.cwd or self.mount_root
        if not is_within(cwd, self.mount_root):
            yield ExitEvent(None, error=f"cwd {cwd} is outside the mount root {self.mount_root}")
            return
        if self.live:
            async for event in self._run_live(request, ctx, cwd):
                yield event
            return
        workspace_id = ctx.workspace_id
        mirror = self._sync.acquire(workspace_id, ctx)
        self._sync.remove_evicted()
        ready: PreparedSandbox | None = None
        clean = killed = False
        try:
            push, pushed = await self._sync.push(mirror, ctx)
            host_cwd = mirror.host(cwd)
            problem = cwd_problem(mirror.directory, self.mount_root, cwd)
            if problem is not None:
                yield ExitEvent(None, pushed=pushed, error=problem)
                clean = True
                return
            taken = await self._warm.take(mirror)
            if taken is not None and not isinstance(taken, PreparedSandbox):  # made for live sandboxes
                await run_to_completion(taken.discard())
                taken = None
            ready = taken if taken is not None else await self._prepare(mirror)
            standby, bridge_dir = ready
            async with AssetsBridge(ctx, mirror, bridge_dir) as bridge:
                command = self._bash(request, bridge_dir)
                # Say what the command leaves running as the sandbox ends (only a pid namespace's).
                after = (
                    epilogue(
                        command,
                        why=self._ended_why,
                        advice=self.background_advice if self._could_live else "",
                    )
                    if self.sandbox.bwrap
                    else None
                )
                start_cwd = cwd if self.sandbox.bwrap else str(host_cwd)
                env = self._env(request, cwd, bridge_dir)
                try:
                    sp = await standby.start(command, cwd=start_cwd, env=env, after=after)
                except BrokenPipeError:  # the standby died while it waited: start a fresh sandbox
                    await standby.discard()
                    ready = await self._prepare(mirror, bridge_dir)
                    sp = await ready[0].start(command, cwd=start_cwd, env=env, after=after)
                ready = None
                # Reachable from another event loop should this one end under it (``_per_call``).
                self._sync.calls.hold(request.id, workspace_id, ctx, mirror, push.rev, sp, bridge)
                outcome = ProcessOutcome()
                output = stream_process(sp, outcome, stdin=request.stdin, timeout=request.timeout)
                try:
                    async with contextlib.aclosing(output):
                        async for chunk in output:
                            yield chunk
                except GeneratorExit:
                    # Closed: the tree is dead (``aclosing`` ended it); what it wrote is kept.
                    await self._sync.pull(mirror, ctx, push.rev, request.id, bridge, defer=False)
                    clean = True
                    raise
                except asyncio.CancelledError:
                    killed = True  # ``kill``: the tree is dead; what it wrote is kept, and listed
            synced = await self._sync.pull(mirror, ctx, push.rev, request.id, bridge, defer=not killed)
            clean = True
            yield ExitEvent(
                None if killed else outcome.exit_code,
                pushed=pushed,
                pulled=synced.pulled,
                skipped=sorted(synced.skipped),
                skipped_reasons=synced.skipped,
                killed=killed or outcome.timed_out,
                pending=synced.pending,
                error=(
                    out_of_memory_error(self.sandbox.limits.memory_mb, self.mount_root)
                    if outcome.out_of_memory
                    else None
                ),
            )
        finally:
            self._sync.calls.let_go(request.id, mirror)
            if ready is not None:  # prepared but never started (cwd missing, cancelled…)
                await run_to_completion(ready.discard())
            if await self._sync.release(workspace_id, mirror, clean=clean):
                self._keep_warm(mirror)
            self._sync.remove_evicted()

    # ------------------------------------------------------------------ live sandboxes

    async def _run_live(self, request: ExecRequest, ctx: ExecContext, cwd: str) -> AsyncIterator[ExecEvent]:
        """One run inside the workspace's live sandbox (see ``_live_set``), by the shell started ahead
        there when it fits (``_live_shell``); the next run's is started once this one's result is out."""
        used: list[tuple[LiveSandbox, str, dict[str, str]]] = []

        @contextlib.asynccontextmanager
        async def command(sandbox: LiveSandbox, start_cwd: str) -> AsyncIterator[JobSpec]:
            argv = self._bash(request, sandbox.bridge_dir)
            env = self._env(request, cwd, sandbox.bridge_dir)
            used.append((sandbox, start_cwd, env))
            job = await self._take_shell(sandbox, request, argv, env, start_cwd)
            try:
                yield JobSpec(argv, env, job=job)
            finally:  # the live sandbox's bridge directory outlives the run: a script written, removed
                written = sandbox.bridge_dir / _script_name(request) if len(argv) > 3 else None
                for path in (written, job.source_file if job is not None else None):
                    if path is not None:
                        with contextlib.suppress(OSError):
                            os.unlink(path)

        started = True  # the run's command started: a shell like it can wait for the next run
        async for event in self._lives.run(request, ctx, cwd, command):
            if isinstance(event, ExitEvent):
                started = event.error is None and event.exit_code not in (None, 125, 126)
            yield event
        if used and started and self.warm_sandboxes > 0:
            sandbox, start_cwd, env = used[-1]
            if sandbox.alive and sandbox.spare is None:
                host_cwd = str(sandbox.mirror.host(cwd))
                self._ahead += 1
                name = f"ahead-{self._ahead}"
                inside = SANDBOX_DIR if self.sandbox.bwrap else str(sandbox.bridge_dir)
                files = (str(sandbox.bridge_dir), inside)
                sandbox.spare = Warm.start(
                    lambda: start_shell(sandbox, name, start_cwd, host_cwd, env, files)
                )

    async def _take_shell(
        self, sandbox: LiveSandbox, request: ExecRequest, argv: list[str], env: dict[str, str], cwd: str
    ) -> Job | None:
        """The shell started ahead in ``sandbox``, given this run's command, when it fits; else None
        (it is ended, and the run starts its own)."""
        spare, sandbox.spare = sandbox.spare, None
        if spare is None:
            return None
        taken = await spare.take()
        if taken is None:
            return None
        if not isinstance(taken, AheadShell) or not taken.fits(argv, env, cwd):
            await run_to_completion(taken.discard())
            return None
        try:
            return taken.hand(request.source, request.id, request.stdin, command_line(argv))
        except OSError:  # it died meanwhile: its pipe is closed
            taken.discard_now()
            return None

    async def _prepare(self, mirror: Mirror, bridge_dir: Path | None = None) -> PreparedSandbox:
        """A standby sandbox over ``mirror`` (which must exist) with a fresh assets bridge directory."""
        binds = [Bind(str(mirror.directory), self.mount_root, writable=True)]
        return await prepare_sandbox(
            self.sandbox, self.scratch, binds, bridge_dir, init=self.live, ids=mirror.owner
        )

    def _keep_warm(self, mirror: Mirror) -> None:
        """Start the next run's sandbox for ``mirror`` in the background (see ``_warm``): a standby,
        or a live sandbox's init. An idle one costs a waiting bash (or init) and a bubblewrap
        process; at most ``warm_sandboxes`` are kept in all."""
        if self.live:
            self._lives.keep_warm(mirror)
        else:
            self._warm.keep(mirror, lambda: self._prepare(mirror))

    def _bash(self, request: ExecRequest, bridge: Path) -> list[str]:
        """``bash -c source``; a source past :data:`_ARGUMENT_MAX` bytes is written to a file of the
        run's bridge directory (read-only in the sandbox) and sourced from there instead: one argument
        of a program is at most 128 KiB (Linux's ``MAX_ARG_STRLEN``), and a heredoc that writes a big
        file failed with "Argument list too long" and 127. ``$0`` stays ``/bin/bash``; error lines
        name the file instead of ``bash``."""
        source = request.source
        if len(source) * 4 <= _ARGUMENT_MAX:  # cannot be past it, whatever the characters
            return ["/bin/bash", "-c", source]
        data = source.encode("utf-8", "surrogateescape")
        if len(data) <= _ARGUMENT_MAX:
            return ["/bin/bash", "-c", source]
        host = bridge / _script_name(request)
        host.write_bytes(data)
        inside = f"{SANDBOX_DIR}/{host.name}" if self.sandbox.bwrap else str(host)
        return ["/bin/bash", "-c", f". {shlex.quote(inside)}", "/bin/bash"]

    def _env(self, request: ExecRequest, cwd: str, bridge: Path) -> dict[str, str]:
        tools = f"{SANDBOX_DIR}/bin" if self.sandbox.bwrap else str(bridge / "bin")
        env = {
            "PATH": f"/usr/local/bin:/usr/bin:/bin:{tools}",
            "HOME": "/tmp/home" if self.sandbox.bwrap else str(self.scratch),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "USER": "sandbox",
            "PWD": cwd,
            "WORKSPACE": self.mount_root,
            # Bytecode caches would be pulled into the workspace as __pycache__ litter, and Python's
            # (mtime-in-seconds, size) check can run stale bytecode after a same-size edit.
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(request.env)
        return env
