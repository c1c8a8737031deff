"""``PythonBackend``: Python source in a sandboxed ``python3 -I -S``, callable (SPEC section 6).

No mirror: the program reaches the authoritative workspace through the injected ``workspace`` module,
whose calls travel as msgpack frames over a socket to the host, which answers each with
``ctx.fs_call``. If the source defines ``main(input)``, its JSON-able return value is the result.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import errno
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from ..storage.errors import error_to_wire
from ._backend import ExecContext, ExecEvent, ExecRequest, ExitEvent
from ._codec import RESULT_OP, ChannelError, ChannelLimits, GuestRequest, check_args, pack_frame, read_request
from ._context import GUEST_OPS
from ._process import ProcessOutcome, stream_process
from ._pystage import GUEST_DIR, PYTHON_DIR, stage_python
from ._sandbox import Bind, Sandbox, SandboxLimits, SandboxProcess, in_background
from .types import BackendInfo

__all__ = ["PythonBackend"]

_GUEST = Path(__file__).with_name("_pyguest.py")
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
        max_processes: int | None = 64,
        cpu_seconds: int | None = None,
        cwd: str = "/workspace",
        python: str | None = None,
        warm_guests: int = 1,
        max_write_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.default_cwd = cwd
        # What the host reads from the guest's channel (see ``_codec``); ``max_write_bytes`` is the
        # largest ``workspace.write_file`` (the host holds that much while the workspace stores it).
        self.limits = ChannelLimits(write_bytes=max_write_bytes)
        # Guests started ahead of their runs (see ``_take_guest``), oldest first; ended at exit. A
        # second one does not help runs back to back: each costs ~20 ms of CPU to start, which is
        # what bounds them, and two starting at once slowed each other down.
        self.warm_guests = warm_guests
        self._guests: list[asyncio.Future[_Guest]] = []
        self._go: dict[asyncio.Future[_Guest], asyncio.Future[None]] = {}  # a guest's start signal
        atexit.register(_end_guests, self._guests)
        base: str = python or getattr(sys, "_base_executable", None) or sys.executable
        staged = stage_python(os.path.realpath(base), str(_GUEST), os.path.dirname(msgpack.__file__))
        self.sandbox = Sandbox(
            network=network,
            limits=SandboxLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_seconds=cpu_seconds),
        )
        # Only the staged copies are mounted (see ``_pystage``): inside, no host path. Without
        # bubblewrap there are no mounts: the program runs the stage directories where they are.
        inside = self.sandbox.bwrap
        python_dir = PYTHON_DIR if inside else staged.python_stage
        guest_dir = GUEST_DIR if inside else staged.guest_stage
        self.python = staged.executable if inside else staged.executable.replace(PYTHON_DIR, python_dir, 1)
        self._guest = f"{guest_dir}/guest.py"
        self._env = {k: v.replace(PYTHON_DIR, python_dir) for k, v in staged.env.items()}
        self._binds = [Bind(staged.python_stage, PYTHON_DIR), Bind(staged.guest_stage, GUEST_DIR)]
        startup = self._probe()
        version = staged.version
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
                "the input and its JSON-able return value is the result value. `import workspace` gives "
                "synchronous functions on the workspace filesystem: "
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

    async def _spawn_guest(self, env: dict[str, str]) -> tuple[SandboxProcess, socket.socket]:
        """A sandboxed interpreter running the guest, waiting for its run on the returned socket."""
        host_end, guest_end = socket.socketpair()
        try:
            full = {"LANG": "C.UTF-8", "HOME": "/tmp/home", "PATH": "/usr/bin:/bin", **self._env, **env}
            full["COMPUTER_CHANNEL_FD"] = str(guest_end.fileno())
            sp = await self.sandbox.spawn(
                [self.python, *_FLAGS, "-u", self._guest],
                binds=self._binds,
                cwd="/tmp",
                env=full,
                pass_fds=[guest_end.fileno()],
            )
        except BaseException:
            host_end.close()
            raise
        finally:
            guest_end.close()
        return sp, host_end

    async def _take_guest(self) -> tuple[SandboxProcess, socket.socket] | None:
        """A guest started ahead, on this event loop and still alive (None: there is none).

        The interpreter's start and the guest's imports are most of a short run (~20 of 25 ms): a
        run without its own environment variables takes a guest started after an earlier run, whose
        environment is exactly the default one it would get. A run with ``env`` starts its own (the
        interpreter reads its locale variables once, at start).
        """
        while self._guests:
            pending = self._guests.pop(0)
            go = self._go.get(pending)
            if go is not None:  # still waiting for its moment: a run is here, start it now
                _go(go)
            guest = await _started(pending)
            if guest is None:
                continue
            if guest.sp.proc.returncode is None:
                return guest.sp, guest.host_end
            in_background(guest.discard(), "ending a guest that died while it waited")
        return None

    async def close_workspace(self, workspace_id: str) -> None:
        """A workspace closed: end the guests started ahead (guests belong to no workspace, so the
        next run starts one again; a process that closes its workspaces leaves no idle interpreter)."""
        guests, self._guests[:] = list(self._guests), []
        for pending in guests:
            guest = await _started(pending)
            if guest is not None:
                await guest.discard()

    def _keep_warm(self) -> None:
        """Start the next run's guest in the background (a moment after this run: its result first)."""
        loop = asyncio.get_running_loop()

        async def prepare(go: asyncio.Future[None]) -> _Guest:
            await go
            sp, host_end = await self._spawn_guest({})
            return _Guest(sp, host_end)

        while len(self._guests) < self.warm_guests:
            go: asyncio.Future[None] = loop.create_future()
            loop.call_later(PREPARE_DELAY, _go, go)
            pending = asyncio.ensure_future(prepare(go))
            self._go[pending] = go
            pending.add_done_callback(self._go.pop)
            self._guests.append(pending)

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """Spawn (or take a started) guest, serve its workspace calls, stream its output, report its value."""
        result: dict[str, Any] = {}
        server: asyncio.Task[None] | None = None
        warm = not request.env and self.warm_guests > 0
        taken = await self._take_guest() if warm else None
        sp, host_end = taken if taken is not None else await self._spawn_guest(request.env)
        try:
            try:
                reader, writer = await asyncio.open_unix_connection(sock=host_end)
            except BaseException:  # cancelled before stream_process owns the process: end it here
                await sp.discard()
                raise
            setup = {
                "source": request.source,
                "input": request.input,
                "cwd": request.cwd or self.default_cwd,
                "limits": dataclasses.asdict(self.limits),
            }
            writer.write(pack_frame(setup))
            server = asyncio.create_task(_serve(reader, writer, ctx, self.limits, result))
            outcome = ProcessOutcome()
            output = stream_process(sp, outcome, stdin=request.stdin, timeout=request.timeout)
            async with contextlib.aclosing(output):
                async for chunk in output:
                    yield chunk
            writer.close()
            yield ExitEvent(
                outcome.exit_code,
                value=result.get("value"),
                error=result.get("error"),
                killed=outcome.timed_out,
            )
        finally:
            if server is not None:
                server.cancel()
                with contextlib.suppress(BaseException):
                    await server
            host_end.close()
            if warm:
                self._keep_warm()


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
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


# Seconds between the end of a run and the start of the next run's guest.
PREPARE_DELAY = 0.002


@dataclass
class _Guest:
    """A guest started ahead: its sandboxed interpreter waits for the setup frame on ``host_end``."""

    sp: SandboxProcess
    host_end: socket.socket

    async def discard(self) -> None:
        self.host_end.close()
        await self.sp.discard()  # runs to completion

    def discard_now(self) -> None:
        """Kill and clean up from any thread, or after its event loop is gone."""
        self.host_end.close()
        self.sp.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.sp.proc.pid, signal.SIGKILL)
        self.sp.cleanup()


async def _started(pending: asyncio.Future[_Guest]) -> _Guest | None:
    """The guest once started; None if its start failed or it belongs to another event loop (that
    one is ended when it is ready). A caller cancelled meanwhile leaves the guest to be ended too."""
    if pending.get_loop() is not asyncio.get_running_loop():
        pending.add_done_callback(_end_guest_now)
        return None
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(_end_guest_now)
        raise
    except Exception:
        return None


def _go(go: asyncio.Future[None]) -> None:
    if not go.done():
        go.set_result(None)


def _end_guest_now(pending: asyncio.Future[_Guest]) -> None:
    if not pending.cancelled() and pending.exception() is None:
        pending.result().discard_now()


def _end_guests(guests: list[asyncio.Future[_Guest]]) -> None:
    """At exit: the guests would die with this process (bubblewrap's --die-with-parent), but their
    cgroups would stay behind."""
    for pending in guests:
        if pending.done():
            _end_guest_now(pending)
