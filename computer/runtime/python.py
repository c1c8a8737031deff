"""``PythonBackend``: Python source in a sandboxed ``python3 -I``, callable (SPEC section 6).

No mirror: the program reaches the authoritative workspace through the injected ``workspace`` module,
whose calls travel as msgpack frames over a socket to the host, which answers each with
``ctx.fs_call``. If the source defines ``main(input)``, its JSON-able return value is the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack

from ..storage.errors import error_to_wire
from ._backend import ExecContext, ExecEvent, ExecRequest, ExitEvent
from ._codec import pack_frame, read_frame
from ._context import GUEST_OPS
from ._process import ProcessOutcome, stream_process
from ._sandbox import Bind, Sandbox, SandboxLimits, python_prefixes
from .types import BackendInfo

__all__ = ["PythonBackend"]

_GUEST = Path(__file__).with_name("_pyguest.py")
_GUEST_DIR = "/opt/computer"
_CHANNEL_FD = 3


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
    ) -> None:
        self.default_cwd = cwd
        base: str = python or getattr(sys, "_base_executable", None) or sys.executable
        self.python = os.path.realpath(base)
        self.sandbox = Sandbox(
            network=network,
            limits=SandboxLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_seconds=cpu_seconds),
        )
        self._binds = [Bind(str(_GUEST), f"{_GUEST_DIR}/guest.py")]
        self._binds.append(Bind(os.path.dirname(msgpack.__file__), f"{_GUEST_DIR}/lib/msgpack"))
        self._binds += [Bind(prefix, prefix) for prefix in python_prefixes()]
        startup = self._probe()
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
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

        argv = self.sandbox.argv([self.python, "-I", "-c", "pass"], binds=self._binds)
        times = []
        for _ in range(2):  # the first start warms the page cache
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=False)
            times.append((time.perf_counter() - start) * 1000)
        return min(times)

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """Spawn the guest, serve its workspace calls, stream its output, report its value."""
        host_end, guest_end = socket.socketpair()
        result: dict[str, Any] = {}
        server: asyncio.Task[None] | None = None
        try:
            env = {"LANG": "C.UTF-8", "HOME": "/tmp/home", "PATH": "/usr/bin:/bin", **request.env}
            env["COMPUTER_CHANNEL_FD"] = str(guest_end.fileno())
            try:
                sp = await self.sandbox.spawn(
                    [self.python, "-I", "-u", f"{_GUEST_DIR}/guest.py"],
                    binds=self._binds,
                    cwd="/tmp",
                    env=env,
                    pass_fds=[guest_end.fileno()],
                )
            finally:
                guest_end.close()
            try:
                reader, writer = await asyncio.open_unix_connection(sock=host_end)
            except BaseException:  # cancelled before stream_process owns the process: end it here
                await sp.discard()
                raise
            setup = {"source": request.source, "input": request.input, "cwd": request.cwd or self.default_cwd}
            writer.write(pack_frame(setup))
            server = asyncio.create_task(_serve(reader, writer, ctx, result))
            outcome = ProcessOutcome()
            output = stream_process(sp, outcome, stdin=request.stdin, timeout=request.timeout)
            async with contextlib.aclosing(output):
                async for chunk in output:
                    yield chunk
            writer.close()
            yield ExitEvent(outcome.exit_code, value=result.get("value"), killed=outcome.timed_out)
        finally:
            if server is not None:
                server.cancel()
                with contextlib.suppress(BaseException):
                    await server
            host_end.close()


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ctx: ExecContext, result: dict[str, Any]
) -> None:
    """Answer the guest's calls until it closes the channel."""
    while True:
        try:
            frame = await read_frame(reader)
        except (EOFError, ConnectionError, ValueError):
            return
        op = frame.get("op") if isinstance(frame, dict) else None
        if op == "__result__":
            result["value"] = frame.get("value")
            reply: dict[str, Any] = {"ok": None}
        else:
            try:
                args = frame.get("args") or {}
                reply = {"ok": await ctx.fs_call(str(op), dict(args))}
            except OSError as exc:
                reply = {"err": list(error_to_wire(exc))}
            except (ValueError, TypeError) as exc:
                reply = {"err": [errno.EINVAL, str(exc), None]}
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            writer.write(pack_frame(reply))
            await writer.drain()
        except (ConnectionError, OSError):
            return
