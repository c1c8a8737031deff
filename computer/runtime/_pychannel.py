"""The python backend's host side of a guest: the ``Guest`` process (started ahead or on demand), the
``workspace`` channel it calls (:func:`serve`, one validated call at a time, answered by ``ctx``) and
what a run reports (:class:`Session`); the guest and msgpack, staged once per process."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from ..storage.errors import error_to_wire
from ._backend import ExecContext
from ._codec import (
    PART_OP,
    RESULT_OP,
    ChannelError,
    ChannelLimits,
    GuestRequest,
    check_args,
    checked_off_loop,
    frame_pieces,
    read_request,
    utf8_text,
)
from ._live import LiveSandbox
from ._live_parts import Job
from ._process import ProcessOutcome, SandboxProcess
from ._staging import stage

__all__ = [
    "GUEST_FLAGS",
    "GUEST_SCRIPT",
    "AheadGuest",
    "Guest",
    "Session",
    "guest_flags",
    "guest_tree",
    "guest_version",
    "held_back",
    "serve",
    "stage_guest",
    "start_env",
]

GUEST_SCRIPT = Path(__file__).with_name("_pyguest.py")


def guest_tree() -> dict[str, str | Path]:
    """What a guest's stage holds: the guest, its channel module and msgpack."""
    return {
        "guest.py": GUEST_SCRIPT,
        "lib/_guest_channel.py": GUEST_SCRIPT.with_name("_pyguest_channel.py"),
        "lib/_guest_leftovers.py": GUEST_SCRIPT.with_name("_pyguest_leftovers.py"),
        "lib/msgpack": os.path.dirname(msgpack.__file__),
    }


# Isolated mode, and no ``site``: only the standard library, and no .pth file of the host's interpreter
# runs (27 ms of every start here). The guest puts back what scripts use from ``site`` (exit, quit).
GUEST_FLAGS = ("-I", "-S")
# A run whose env gives python a setting it takes only as it starts gets an interpreter started with it
# (such a run never takes a guest started ahead: one is for runs without ``env``): ``PYTHONUTF8`` as
# ``-X utf8``, ``PYTHONHASHSEED`` read from the environment (``-I`` less ``-E``: every other
# ``PYTHON*`` variable of the run's kept out of the interpreter's start, and put back into
# ``os.environ`` by the guest before the program runs). ``PYTHONWARNINGS`` and ``PYTHONIOENCODING``
# the guest applies itself (``_pyguest._apply_env``). Before, ``-I`` ignored them all.
_READING_HASHSEED = ("-s", "-P", "-S")


def guest_flags(env: Mapping[str, str]) -> tuple[str, ...]:
    """The guest interpreter's flags for a run with ``env``."""
    flags = _READING_HASHSEED if "PYTHONHASHSEED" in env else GUEST_FLAGS
    utf8 = env.get("PYTHONUTF8")
    return (*flags, "-X", f"utf8={utf8}") if utf8 in ("0", "1") else flags


def held_back(env: Mapping[str, str]) -> dict[str, str]:
    """The ``PYTHON*`` variables of ``env`` an interpreter reading its environment must not see as it
    starts (see ``guest_flags``): the guest puts them back."""
    if "PYTHONHASHSEED" not in env:
        return {}
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONHASHSEED"}


def start_env(full: dict[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """``full``, the guest's environment, less what ``held_back`` keeps from its start."""
    for name in held_back(env):
        full.pop(name, None)
    return full


@dataclass
class Guest:
    """A sandboxed interpreter running the guest (a sandbox per call); it waits for its setup frame on
    ``host_end``."""

    sp: SandboxProcess
    host_end: socket.socket

    def usable(self) -> bool:
        return self.sp.proc.returncode is None and self.host_end.fileno() >= 0

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


@dataclass
class AheadGuest:
    """A guest started ahead *inside* a live sandbox (a job of its init, ``waiting``): it waits for
    its setup frame on ``host_end``; the sandbox's next run without ``env`` or stdin takes it."""

    sandbox: LiveSandbox
    job: Job
    host_end: socket.socket

    def usable(self) -> bool:
        return (
            self.sandbox.alive
            and self.job.waiting
            and not self.job.exited.done()
            and self.host_end.fileno() >= 0
        )

    async def discard(self) -> None:
        self.discard_now()

    def discard_now(self) -> None:
        """Kill its process group (when the sandbox still runs), close our ends; from any thread."""
        self.host_end.close()
        if self.sandbox.jobs.pop(self.job.id, None) is not None and not self.job.exited.done():
            self.sandbox.signal_job(self.job)
        for fd in list(self.job.fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.job.fds.clear()


@dataclass
class Session:
    """What one run of a guest reports: its exit (``outcome``), its value and a protocol error."""

    outcome: ProcessOutcome = field(default_factory=ProcessOutcome)
    result: dict[str, Any] = field(default_factory=dict)

    def error(self, killed: bool) -> str | None:
        """The run's error: a broken protocol, or for a run killed (its timeout) after the program's
        code had finished (its result sent), what python was still doing."""
        if "error" in self.result:
            return str(self.result["error"])
        if killed and "value" in self.result:
            return ENDED_LATE
        return None


# A run ends as a script does (see ``_pyguest``): after its last line, python waits for the threads the
# program started that are not daemon threads. A thread meant to keep serving after the call (a
# notebook habit) keeps the run until its timeout instead.
ENDED_LATE = (
    "the program's code had finished; python was still ending it, as a script ends: waiting for the "
    "threads it started that are not daemon threads (or for its atexit functions). To keep something "
    "running after the call, start it as a process (subprocess.Popen: it outlives the run in a live "
    "sandbox)"
)


async def serve(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: ExecContext,
    limits: ChannelLimits,
    result: dict[str, Any],
) -> None:
    """Answer the guest's calls until it closes the channel; a frame that breaks the framing ends the
    channel and fails the run (``result["error"]``; see ``_codec``). A ``write_file`` whose body comes
    in parts is made once its last part is in; one another caller's frame interrupts is dropped, with
    no reply (its sender died between two parts: the guest sends them with signals blocked)."""
    joining: GuestRequest | None = None  # a write_file waiting for the parts of its body
    pieces: list[bytes] = []
    got = size = 0  # its parts so far, their bytes
    while True:
        try:
            request = await read_request(reader, limits)
        except (EOFError, ConnectionError):
            return
        except ChannelError as exc:
            result["error"] = f"the program broke the workspace channel's protocol: {exc}"
            writer.close()  # the guest's next call fails: the stream may be out of step
            return
        if request.op == PART_OP:
            if joining is None or request.id != joining.id:
                continue  # a part of a write dropped above
            body = request.body if isinstance(request.body, list) else [request.body or b""]
            pieces.extend(body)
            got += 1
            size += sum(map(len, body))
            if size > limits.write_bytes:
                result["error"] = "the program broke the workspace channel's protocol: a write over the limit"
                writer.close()
                return
            if got < joining.parts:
                continue
            request, joining = dataclasses.replace(joining, body=pieces, parts=0), None
        elif request.parts:
            joining, pieces, got, size = request, [], 0, 0
            continue
        else:
            joining = None
        if request.op == RESULT_OP:
            result["value"] = request.args["value"]
            reply: dict[str, Any] = {"ok": None}
        else:
            reply = await _answer(request, ctx, limits)
        if request.id is not None:
            reply["id"] = request.id
        try:
            for piece in frame_pieces(reply):  # a large read's bytes a piece a turn
                writer.write(piece)
                await writer.drain()
        except (ConnectionError, OSError):
            return


# The permission bits a guest may set: never setuid or setgid (issue 17: the sandbox user is host
# root in a mirror, and storage pushes modes back); the sticky bit is harmless.
_MODE_BITS = 0o1777


async def _answer(request: GuestRequest, ctx: ExecContext, limits: ChannelLimits) -> dict[str, Any]:
    """One validated call of the guest, answered by ``ctx`` (errors as the guest raises them)."""
    problem = await checked_off_loop(request.head, check_args, request, limits.depth)
    if problem is not None:
        return {"err": [errno.EINVAL, problem, None]}
    args = dict(request.args)
    if isinstance(args.get("mode"), int):
        args["mode"] &= _MODE_BITS
    if request.op == "write_file":
        args["data"] = request.body
    try:
        return {"ok": await _bounded_call(request.op, args, ctx, limits)}
    except OSError as exc:
        return {"err": list(error_to_wire(exc))}
    except (ValueError, TypeError) as exc:
        return {"err": [errno.EINVAL, str(exc), None]}
    except Exception as exc:  # not swallowed: the guest raises it
        return {"error": f"{type(exc).__name__}: {exc}"}


# Calls whose answer is a list, and which of them take ``limit``/``offset`` (pages).
_LISTINGS = frozenset(("grep", "find", "readdir", "ls"))
_PAGED = frozenset(("grep", "find", "readdir"))
TEXT_BYTES = 1024 * 1024  # a read_text over this is answered with its bytes, checked (``utf8_text``)


async def _bounded_call(op: str, args: dict[str, Any], ctx: ExecContext, limits: ChannelLimits) -> Any:
    """``ctx.fs_call`` with an answer of at most ``limits.reply_items`` results and
    ``limits.reply_bytes`` bytes read: past that an error that says how to page (a listing asked
    for one more than the most, so that "too many" is told from "exactly that many")."""
    most = limits.reply_items
    if op in _PAGED and (args.get("limit") is None or args["limit"] > most):
        args["limit"] = most + 1
    if op in ("read_file", "read_text") and (
        args.get("length") is None or args["length"] > limits.reply_bytes
    ):
        size = int((await ctx.fs_call("stat", {"path": args["path"]}))["size"])
        if size - int(args.get("offset") or 0) > limits.reply_bytes:
            raise OSError(
                errno.EFBIG,
                f"over {limits.reply_bytes} bytes for one call: read it in pieces "
                "(read_file(path, offset=, length=)) or open() it in the sandbox",
                args["path"],
            )
        if op == "read_text" and size > TEXT_BYTES:  # its bytes, checked; the guest decodes them
            return await utf8_text(await ctx.fs_call("read_file", {"path": args["path"]}))
    result = await ctx.fs_call(op, args)
    if op in _LISTINGS and isinstance(result, list) and len(result) > most:
        where = args.get("path") or args.get("directory") or args.get("prefix")
        raise OSError(
            errno.E2BIG,
            f"more than {most} results for one call: ask for them in pages (limit=, offset=)"
            if op in _PAGED
            else f"more than {most} results for one call: use find() with limit= and offset=",
            where,
        )
    return result


def guest_version(python: str) -> str:
    """``X.Y`` of the interpreter ``python``."""
    if python == os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable):
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    import subprocess

    script = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    return subprocess.run(
        [python, "-I", "-S", "-c", script], capture_output=True, text=True, check=True
    ).stdout.strip()


_GUEST_STAGES: dict[tuple[int, int] | None, str] = {}
_GUEST_LOCK = threading.Lock()


def stage_guest(owner: tuple[int, int] | None) -> str:
    """The guest and msgpack, staged once per process (and sandbox user) for every backend; again
    if the process's scratch directory was released."""
    # Staged from threads (``PythonBackend._mount``): a second staging would remove the first.
    with _GUEST_LOCK:
        staged = _GUEST_STAGES.get(owner)
        if staged is None or not os.path.isdir(staged):
            tree = guest_tree()
            name = "python-guest" if owner is None else f"python-guest-{owner[0]}"
            staged = _GUEST_STAGES[owner] = str(stage(name, tree, owner))
            _compile_channel(Path(staged))
        return staged


def _compile_channel(staged: Path) -> None:
    """The channel module's bytecode beside it, for an interpreter of this one's version (another
    looks under its own name and compiles it): the guest's stage is read-only inside, so every guest
    compiled it as it started (~1 ms of a run without a guest ahead). Named as the sandbox sees it."""
    import importlib.util
    import py_compile

    for name in ("_guest_channel.py", "_guest_leftovers.py"):
        source = staged / "lib" / name
        cfile = Path(importlib.util.cache_from_source(str(source)))
        py_compile.compile(
            str(source),
            cfile=str(cfile),
            dfile=f"/opt/computer/lib/{name}",  # where ``python.py`` binds the stage
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        os.chmod(cfile.parent, 0o755)
        os.chmod(cfile, 0o644)
