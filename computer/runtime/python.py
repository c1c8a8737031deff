"""``PythonBackend``: Python source in a sandboxed ``python3 -I -S``, callable (SPEC section 6).

The program's working directory is a mirror of the workspace's ``mount_root`` (default
``/workspace``), synced like a shell run (:class:`~computer.runtime._sync.MirrorSync`: push before,
pull after), so ``open``, ``os``, ``pathlib`` and ``subprocess`` read and write workspace files (SPEC
section 10). The injected ``workspace`` module stays for direct access: its calls travel as msgpack
frames over a socket to the host, which answers each with ``ctx.fs_call`` on the authoritative
workspace at once. Decision: the two views meet at the run's edges, as a shell run and a workspace
write do: a path written both through ``workspace`` and through ``open()`` in one run keeps the
``workspace`` write (the pull leaves a path the workspace changed during the run alone, and reports
it in ``skipped``). A ``cwd`` outside the mount root runs without a mirror (process cwd ``/tmp``).
If the source defines ``main(input)``, its JSON-able return value is the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import socket
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from ..storage.errors import error_to_wire
from ..storage.paths import canonical, is_within
from ._backend import ExecContext, ExecEvent, ExecRequest, ExitEvent, SyncLimits
from ._codec import RESULT_OP, ChannelError, ChannelLimits, GuestRequest, check_args, pack_frame, read_request
from ._context import GUEST_OPS
from ._mirror import Mirror
from ._mirror_pool import MirrorPool
from ._process import ProcessOutcome, out_of_memory_error, stream_process
from ._pystandby import Guest, StandbyGuests
from ._sandbox import Bind, Sandbox, SandboxLimits
from ._staging import stage, stage_python
from ._sync import MirrorSync, backend_scratch
from .types import BackendInfo

__all__ = ["PythonBackend"]

_GUEST = Path(__file__).with_name("_pyguest.py")
_GUEST_DIR = "/opt/computer"
# Isolated mode, and no ``site``: only the standard library, and no .pth file of the host's interpreter
# runs (27 ms of every start here). The guest puts back what scripts use from ``site`` (exit, quit).
_FLAGS = ("-I", "-S")


class PythonBackend:
    """Runs Python source in a sandbox; ``import workspace`` reaches the workspace filesystem."""

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
        scratch_dir: str | None = None,
    ) -> None:
        """``unprivileged``: as root, programs run as an unprivileged host user (see ``Sandbox``).
        ``mount_root`` is mirrored (the default cwd); the sync settings are the shell backend's."""
        self.mount_root = canonical(mount_root)
        if self.mount_root == "/":
            raise ValueError("mount_root cannot be / (the sandbox needs its own /usr, /tmp…)")
        self.default_cwd = cwd or self.mount_root
        # What the host reads from the guest's channel (see ``_codec``); ``max_write_bytes`` is the
        # largest ``workspace.write_file`` (the host holds that much while the workspace stores it).
        self.limits = ChannelLimits(write_bytes=max_write_bytes)
        self.warm_guests = warm_guests
        self.standby = StandbyGuests(lambda: self._spawn_guest({}), warm_guests)
        self.sandbox = Sandbox(
            network=network,
            limits=SandboxLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_seconds=cpu_seconds),
            unprivileged=unprivileged,
        )
        owner = self.sandbox.host_ids
        self.scratch = backend_scratch(scratch_dir, owner, "python")
        self.sync_limits = SyncLimits(
            max_file_bytes=max_file_bytes, max_files=max_files, max_sync_bytes=max_sync_bytes
        )
        self._sync = MirrorSync(MirrorPool(self.scratch, self.mount_root), self.mount_root, self.sync_limits)
        self._sync.owner = owner
        base = os.path.realpath(python or getattr(sys, "_base_executable", None) or sys.executable)
        self._base = base
        self.python, self._guest, self._env, self._binds = self._mounts()
        startup = self._probe()
        version = _version(base)
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
                "and write workspace files, saved back when the run ends (anything left out is listed in "
                "skipped with the reason). `import workspace` gives synchronous functions acting on the "
                "workspace at once: "
                + ", ".join(GUEST_OPS)
                + " (same errors as Python's: FileNotFoundError…; relative paths resolve from cwd). "
                "Modules in the workspace cwd are importable. Only the standard library is installed. "
                f"Network: {'on' if network else 'off'}. Startup cost about {startup:.0f} ms. "
                "Isolation: " + self.sandbox.isolation + "."
            ),
        )

    def _probe(self) -> float:
        import subprocess
        import time

        argv = self.sandbox.argv([self.python, *_FLAGS, "-c", "pass"], binds=self._binds)
        times = []
        for _ in range(2):  # the first start warms the page cache
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=False, env={**os.environ, **self._env})
            times.append((time.perf_counter() - start) * 1000)
        return min(times)

    def _mounts(self) -> tuple[str, str, dict[str, str], list[Bind]]:
        """The interpreter, the guest script, their environment and the binds, for the next spawn.

        Only staged trees are bound (see ``_staging``): the interpreter with its standard library at
        ``/opt/python``, the guest and msgpack at ``/opt/computer``, so no host path appears inside.
        Staged again if the process's scratch directory was released meanwhile. Without bubblewrap
        nothing is bound: the host interpreter runs the staged guest where it is.
        """
        owner = self.sandbox.host_ids
        guest_stage = _stage_guest(owner)
        if not self.sandbox.bwrap:
            return self._base, f"{guest_stage}/guest.py", {}, []
        staged = stage_python(self._base, owner)
        binds = [*staged.binds, Bind(guest_stage, _GUEST_DIR)]
        return staged.executable, f"{_GUEST_DIR}/guest.py", dict(staged.env), binds

    @property
    def mirrors(self) -> MirrorPool:
        """The pool of warm workspace mirrors."""
        return self._sync.mirrors

    async def _spawn_guest(self, env: dict[str, str], mirror: Mirror | None = None) -> Guest:
        """A sandboxed interpreter running the guest, waiting for its run on the returned socket;
        with ``mirror`` bound read-write at the mount root."""
        self.python, self._guest, self._env, self._binds = self._mounts()
        binds = list(self._binds)
        if mirror is not None:
            binds.append(Bind(str(mirror.directory), self.mount_root, writable=True))
        host_end, guest_end = socket.socketpair()
        try:
            full = {"LANG": "C.UTF-8", "HOME": "/tmp/home", "PATH": "/usr/bin:/bin", **self._env, **env}
            full["COMPUTER_CHANNEL_FD"] = str(guest_end.fileno())
            sp = await self.sandbox.spawn(
                [self.python, *_FLAGS, "-u", self._guest],
                binds=binds,
                cwd="/tmp",
                env=full,
                pass_fds=[guest_end.fileno()],
            )
        except BaseException:
            host_end.close()
            raise
        finally:
            guest_end.close()
        return Guest(sp, host_end)

    async def close_workspace(self, workspace_id: str) -> None:
        """A workspace closed: end the guests started ahead (for its idle mirrors, and the ones of runs
        without a mirror), so a process that closes its workspaces leaves no idle interpreter."""
        for mirror in self._sync.mirrors.idle_mirrors(workspace_id):
            spares = mirror.take_standby()
            if isinstance(spares, _MirrorGuests):
                await spares.guests.close()
        await self.standby.close()

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """The run over a mirror of the workspace (the sync bracket around a guest), or without one
        when its cwd is outside the mount root."""
        cwd = request.cwd or self.default_cwd
        if not is_within(cwd, self.mount_root):
            async for event in self._run_unmirrored(request, ctx):
                yield event
            return
        workspace_id = ctx.workspace_id
        mirror = self._sync.acquire(workspace_id, ctx)
        self._sync.remove_evicted()
        guest: Guest | None = None
        clean = False
        try:
            push, pushed = await self._sync.push(mirror, ctx)
            spares = mirror.standby
            if isinstance(spares, _MirrorGuests) and not request.env:
                guest = await spares.guests.take()
            if guest is None:
                guest = await self._spawn_guest(request.env, mirror)
            session = _Session()
            output = self._session(guest, request, ctx, session, chdir=True)
            try:
                async with contextlib.aclosing(output):
                    async for chunk in output:
                        yield chunk
            except (asyncio.CancelledError, GeneratorExit):
                # Killed: the guest is dead; what it wrote is kept (SPEC section 10).
                await self._sync.pull(mirror, ctx, push.rev, request.id, defer=False)
                clean = True
                raise
            synced = await self._sync.pull(mirror, ctx, push.rev, request.id)
            clean = True
            oom = session.outcome.out_of_memory
            yield ExitEvent(
                session.outcome.exit_code,
                value=session.result.get("value"),
                error=out_of_memory_error(self.sandbox.limits.memory_mb, self.mount_root)
                if oom
                else session.result.get("error"),
                killed=session.outcome.timed_out,
                pushed=pushed,
                pulled=synced.pulled,
                skipped=sorted(synced.skipped),
                skipped_reasons=synced.skipped,
                pending=synced.pending,
            )
        finally:
            if guest is not None:
                guest.host_end.close()
            if await self._sync.release(workspace_id, mirror, clean=clean):
                self._keep_warm(mirror)
            self._sync.remove_evicted()

    def _keep_warm(self, mirror: Mirror) -> None:
        """Start the next run's guest over ``mirror`` in the background (a moment after this run):
        the guest waits with the mirror bound, so the workspace's next run skips the interpreter's
        start; it belongs to that mirror only, and ends with it."""
        if self.warm_guests <= 0 or not mirror.directory.is_dir():
            return
        spares = mirror.standby
        if not isinstance(spares, _MirrorGuests):
            mirror.drop_standby()
            spares = mirror.standby = _MirrorGuests(
                StandbyGuests(lambda: self._spawn_guest({}, mirror), self.warm_guests)
            )
        spares.guests.refill()

    async def _run_unmirrored(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """Take a guest started ahead (or spawn one), run the request in it, report its value."""
        warm = not request.env and self.standby.size > 0
        guest = await self.standby.take() if warm else None
        try:
            if guest is None:
                guest = await self._spawn_guest(request.env)
            session = _Session()
            output = self._session(guest, request, ctx, session, chdir=False)
            async with contextlib.aclosing(output):
                async for chunk in output:
                    yield chunk
            yield ExitEvent(
                session.outcome.exit_code,
                value=session.result.get("value"),
                error=session.result.get("error"),
                killed=session.outcome.timed_out,
            )
        finally:
            if guest is not None:
                guest.host_end.close()
            if warm:
                self.standby.refill()

    async def _session(
        self, guest: Guest, request: ExecRequest, ctx: ExecContext, session: _Session, *, chdir: bool
    ) -> AsyncGenerator[ExecEvent, None]:
        """Send the run to ``guest``, answer its workspace calls and stream its output until it ends."""
        try:
            reader, writer = await asyncio.open_unix_connection(sock=guest.host_end)
        except BaseException:  # cancelled before stream_process owns the process: end it here
            await guest.sp.discard()
            raise
        setup = {
            "source": request.source,
            "input": request.input,
            "cwd": request.cwd or self.default_cwd,
            "chdir": chdir,  # the process's cwd too (a mirrored cwd exists inside the sandbox)
            "limits": dataclasses.asdict(self.limits),
        }
        writer.write(pack_frame(setup))
        server = asyncio.create_task(_serve(reader, writer, ctx, self.limits, session.result))
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


class _MirrorGuests:
    """The guests started ahead over one mirror (its ``standby``); closed with the mirror."""

    def __init__(self, guests: StandbyGuests) -> None:
        self.guests = guests

    def close(self) -> None:
        self.guests.close_now()


@dataclass
class _Session:
    """What one run of a guest reports: its exit (``outcome``), its value and a protocol error."""

    outcome: ProcessOutcome = field(default_factory=ProcessOutcome)
    result: dict[str, Any] = field(default_factory=dict)


async def _serve(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: ExecContext,
    limits: ChannelLimits,
    result: dict[str, Any],
) -> None:
    """Answer the guest's calls until it closes the channel; a frame that breaks the framing ends the
    channel and fails the run (``result["error"]``; see ``_codec``)."""
    while True:
        try:
            request = await read_request(reader, limits)
        except (EOFError, ConnectionError):
            return
        except ChannelError as exc:
            result["error"] = f"the program broke the workspace channel's protocol: {exc}"
            writer.close()  # the guest's next call fails: the stream may be out of step
            return
        if request.op == RESULT_OP:
            result["value"] = request.args["value"]
            reply: dict[str, Any] = {"ok": None}
        else:
            reply = await _answer(request, ctx, limits)
        try:
            writer.write(pack_frame(reply))
            await writer.drain()
        except (ConnectionError, OSError):
            return


# The permission bits a guest may set: never setuid or setgid (issue 17: the sandbox user is host
# root in a mirror, and storage pushes modes back); the sticky bit is harmless.
_MODE_BITS = 0o1777


async def _answer(request: GuestRequest, ctx: ExecContext, limits: ChannelLimits) -> dict[str, Any]:
    """One validated call of the guest, answered by ``ctx`` (errors as the guest raises them)."""
    problem = check_args(request, limits.depth)
    if problem is not None:
        return {"err": [errno.EINVAL, problem, None]}
    args = dict(request.args)
    if isinstance(args.get("mode"), int):
        args["mode"] &= _MODE_BITS
    if request.op == "write_file":
        args["data"] = request.body
    try:
        return {"ok": await ctx.fs_call(request.op, args)}
    except OSError as exc:
        return {"err": list(error_to_wire(exc))}
    except (ValueError, TypeError) as exc:
        return {"err": [errno.EINVAL, str(exc), None]}
    except Exception as exc:  # not swallowed: the guest raises it
        return {"error": f"{type(exc).__name__}: {exc}"}


def _version(python: str) -> str:
    """``X.Y`` of the interpreter ``python``."""
    if python == os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable):
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    import subprocess

    script = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    return subprocess.run(
        [python, "-I", "-S", "-c", script], capture_output=True, text=True, check=True
    ).stdout.strip()


_GUEST_STAGES: dict[tuple[int, int] | None, str] = {}


def _stage_guest(owner: tuple[int, int] | None) -> str:
    """The guest and msgpack, staged once per process (and sandbox user) for every backend; again
    if the process's scratch directory was released."""
    staged = _GUEST_STAGES.get(owner)
    if staged is None or not os.path.isdir(staged):
        tree = {"guest.py": _GUEST, "lib/msgpack": os.path.dirname(msgpack.__file__)}
        name = "python-guest" if owner is None else f"python-guest-{owner[0]}"
        staged = _GUEST_STAGES[owner] = str(stage(name, tree, owner))
    return staged
