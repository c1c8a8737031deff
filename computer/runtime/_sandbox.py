"""``Sandbox``: launches one program under every isolation layer this machine allows.

Layers, each used when available and reported in :attr:`Sandbox.isolation`:

- bubblewrap: new user (uid/gid 65534, no capabilities), pid, mount, ipc, uts and network namespaces
  (network shared only when asked), read-only system directories, a synthetic ``/etc``, fresh
  ``/proc``, ``/dev`` and ``/tmp``, and only the binds a backend asks for (its mirror);
- rlimits (address space, file size, CPU seconds, process count, no core files) and cgroup v1
  ``memory`` and ``pids`` groups (one per run) capping the whole tree: under bubblewrap set on its
  sandbox process while it waits to start the command (see ``_Admission``), without bubblewrap by a
  bash launcher before it execs the program.

The whole tree ends with the run: bwrap's pid namespace dies with its first process, the launched
process leads its own process group, and the cgroups are swept with SIGKILL.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import logging
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

__all__ = [
    "Bind",
    "Sandbox",
    "SandboxLimits",
    "SandboxProcess",
    "Standby",
    "in_background",
    "run_to_completion",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# How long a cancelled spawn waits for asyncio to finish creating the child before it gives up on
# it (and only sweeps its cgroups). Creation is a fork/exec plus connecting three pipes: it takes
# milliseconds, seconds on a machine under heavy load.
_CREATION_GRACE = 20.0
# How long a kill waits for the launcher to be reaped and its pipes to close before closing them.
_REAP_TIMEOUT = 10.0

SANDBOX_UID = 65534
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_PARENT = "computer-exec"
# /etc files a shell needs; nothing secret (no shadow, no keys).
_ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "alternatives",
    "bash.bashrc",
    "inputrc",
    "profile",
    "mime.types",
    "protocols",
    "services",
    "magic",
    "magic.mime",
)
_NETWORK_ETC = ("resolv.conf", "ssl", "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf")


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    memory_mb: int | None = 1024
    max_processes: int | None = 256
    cpu_seconds: int | None = None
    max_file_bytes: int | None = 4 * 1024**3  # RLIMIT_FSIZE: the largest file the program may write


@dataclass(frozen=True, slots=True)
class Bind:
    source: str
    dest: str
    writable: bool = False


@dataclass
class SandboxProcess:
    """A launched program: the launcher process plus its cgroups."""

    proc: asyncio.subprocess.Process
    cgroups: list[Path] = field(default_factory=list)
    killed: bool = False
    # In its own pid namespace (bubblewrap): every process of the run ends when the launcher does.
    contained: bool = False

    async def kill_tree(self) -> None:
        """SIGKILL everything the run started, then reap the launcher.

        ``proc.wait()`` ends only once the launcher is reaped *and* its pipes reached EOF; a process
        out of reach (no cgroups, and a bubblewrap child that outlived its parent because the kill
        came before it armed its parent-death signal) could hold them forever, so after
        ``_REAP_TIMEOUT`` our ends of the pipes are closed instead.
        """
        self.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        if self.cgroups:
            await asyncio.to_thread(_sweep, self.cgroups)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=_REAP_TIMEOUT)
        except TimeoutError:
            log.warning(
                "sandbox launcher %s: its pipes stayed open after the kill; closing them", self.proc.pid
            )
            _close_transport(self.proc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.proc.wait(), timeout=1)
        except Exception:  # a kill must not fail on a process that is already gone
            pass

    async def discard(self) -> None:
        """Kill the tree, reap it and remove the cgroups, even if the caller is cancelled meanwhile."""

        async def discard() -> None:
            await self.kill_tree()
            await asyncio.to_thread(self.cleanup)

        await run_to_completion(discard())

    def cleanup(self) -> None:
        """Kill leftovers in the cgroups and remove them (after the launcher exited)."""
        _sweep(self.cgroups)
        for group in self.cgroups:
            for _ in range(50):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    _sweep([group])
                    time.sleep(0.01)
        self.cgroups = []


# A standby sandbox runs this bash line: it reads its program's command line as a script from the
# control pipe (until the host closes it) and sources it; the script ``exec``s the program. Closing the
# pipe without writing ends the standby cleanly (an empty script).
_STANDBY_STUB = ". /dev/fd/{fd}"
# The stub starts with an empty environment; bash itself exports these. The script unsets them and
# hands the program its environment as assignments on ``exec`` (one exec, where ``env -i`` costs a
# second one: 0.4 ms). bash adds SHLVL=0, which the program's bash turns into 1 as it does
# when SHLVL is unset. Names bash refuses or rewrites there (read-only variables, SHLVL, ``_``) and
# names that are not shell identifiers go through ``env -i`` instead.
_STUB_EXPORTS = "PWD OLDPWD SHLVL _"
_NOT_ON_EXEC = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID", "SHLVL", "_"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A script this small always fits an empty pipe (64 KiB on Linux): it is written without a thread.
_DIRECT_WRITE = 32 * 1024


@dataclass
class Standby:
    """A sandbox started ahead of its program: namespaces, binds, cgroups and rlimits are in place and
    a stub bash waits for the command line (see :meth:`Sandbox.prepare`).

    :meth:`start` hands it the program; it then behaves exactly like :meth:`Sandbox.spawn`'s process.
    A standby is single-use and bound to the event loop that made it.
    """

    process: SandboxProcess
    control: int | None  # write end of the stub's control pipe
    stub_fd: int  # the read end's number in the stub (closed before the program starts)
    loop: asyncio.AbstractEventLoop

    def usable(self) -> bool:
        """Still waiting for its program, on this event loop."""
        try:
            same_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            same_loop = False
        return same_loop and self.control is not None and self.process.proc.returncode is None

    async def start(self, command: Sequence[str], *, cwd: str, env: dict[str, str]) -> SandboxProcess:
        """Run ``command`` in ``cwd`` with exactly ``env`` (raises ``BrokenPipeError`` when the stub
        is gone; the standby is then spent and should be discarded)."""
        if self.control is None:
            raise BrokenPipeError("this standby sandbox was already used or closed")
        program = " ".join(shlex.quote(w) for w in command)
        if all(_IDENTIFIER.match(key) and key not in _NOT_ON_EXEC for key in env):
            assigned = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
            body = (
                f"cd -P -- {shlex.quote(cwd)} || exit 125\nunset {_STUB_EXPORTS}\n{assigned} exec {program}"
            )
        else:
            words = ["/usr/bin/env", "-i", "-C", cwd, "--", *(f"{k}={v}" for k, v in env.items())]
            body = "exec " + " ".join(shlex.quote(w) for w in words) + f" {program}"
        script = f"exec {self.stub_fd}<&-\n{body}\n".encode("utf-8", "surrogateescape")
        fd, self.control = self.control, None
        if len(script) <= _DIRECT_WRITE:
            _write_all(fd, script)
        else:  # the stub reads while we write: do not block the event loop on a full pipe
            await asyncio.to_thread(_write_all, fd, script)
        return self.process

    def close(self) -> None:
        """Let the stub end (it reads an empty script); thread-safe, idempotent. Reaping is
        :meth:`discard`'s job, or the caller's."""
        fd, self.control = self.control, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    async def discard(self) -> None:
        """End the standby, reap it and remove its cgroups."""
        self.close()
        await self.process.discard()

    def discard_now(self) -> None:
        """End the standby from any thread or after its loop is gone: kill, then remove its cgroups."""
        self.close()
        self.process.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.proc.pid, signal.SIGKILL)
        self.process.cleanup()


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


async def run_to_completion(aw: Awaitable[_T]) -> _T:
    """Await ``aw`` to its end even if the caller is cancelled (once or more) meanwhile.

    For teardown that must not be cut short (killing and reaping a process tree, removing its
    cgroups): a cancellation that arrived is re-raised once ``aw`` has finished.
    """
    task = asyncio.ensure_future(aw)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        if not task.cancelled() and task.exception() is not None:
            log.warning("teardown failed while cancelled: %r", task.exception())
        raise asyncio.CancelledError
    return task.result()


# Teardown running in the background (a reference keeps each task alive until it is done).
_BACKGROUND: set[asyncio.Future[None]] = set()


def in_background(aw: Awaitable[None], what: str) -> None:
    """Run teardown ``aw`` without waiting for it; its failure is logged as ``what`` failing."""
    task = asyncio.ensure_future(aw)
    _BACKGROUND.add(task)

    def done(task: asyncio.Future[None]) -> None:
        _BACKGROUND.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed: %r", what, task.exception())

    task.add_done_callback(done)


async def _abandon(
    creation: asyncio.Task[asyncio.subprocess.Process], groups: list[Path], admission: _Admission | None
) -> None:
    """A spawn was cancelled: let the creation finish, then kill and reap what it started."""
    done, _ = await asyncio.wait({creation}, timeout=_CREATION_GRACE)
    if admission is not None:
        await admission.refuse(creation)
    if not done:
        # asyncio never finished connecting the pipes: a launcher joined the cgroups before its
        # exec, so sweeping them ends it, and a bubblewrap sandbox process stays blocked until its
        # refusal kills it; whatever the creation yields later is killed on arrival.
        log.warning("sandbox spawn: the cancelled creation did not finish; sweeping its cgroups")
        creation.add_done_callback(_kill_late_arrival)
        await asyncio.to_thread(SandboxProcess(None, groups).cleanup)  # type: ignore[arg-type]
        return
    if creation.cancelled() or creation.exception() is not None:
        await asyncio.to_thread(SandboxProcess(None, groups).cleanup)  # type: ignore[arg-type]
        return
    await SandboxProcess(creation.result(), groups).discard()


def _kill_late_arrival(creation: asyncio.Task[asyncio.subprocess.Process]) -> None:
    if creation.cancelled() or creation.exception() is not None:
        return
    proc = creation.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    _close_transport(proc)


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close our ends of the process's pipes (asyncio offers no public way)."""
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


def _sweep(groups: Sequence[Path]) -> None:
    for group in groups:
        for _ in range(20):
            try:
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)


class Sandbox:
    """Builds and launches sandboxed commands; probes once which layers work."""

    def __init__(self, *, network: bool = False, limits: SandboxLimits | None = None) -> None:
        self.network = network
        self.limits = limits or SandboxLimits()
        self.bwrap = _bwrap_works()
        self.cgroups = {c for c in ("memory", "pids") if _cgroup_writable(c)}
        self._etc = _sandbox_etc(network)

    @property
    def isolation(self) -> str:
        """Exactly which layers are in force, in one line."""
        parts: list[str] = []
        if self.bwrap:
            net = "shared host network" if self.network else "no network (own empty network namespace)"
            parts.append(
                f"bubblewrap: user namespace as uid {SANDBOX_UID} with no capabilities, pid/mount/ipc/uts "
                f"namespaces, {net}, read-only /usr, synthetic /etc, private /tmp, only the run's own binds"
            )
        else:
            parts.append("NO namespace isolation (bubblewrap unavailable): the program runs as this user")
        lim = self.limits
        rl = ["address space" if lim.memory_mb else "", "file size" if lim.max_file_bytes else ""]
        rl += ["cpu time" if lim.cpu_seconds else "", "processes" if lim.max_processes else "", "no core"]
        parts.append("rlimits: " + ", ".join(x for x in rl if x))
        if self.cgroups:
            caps = []
            if "memory" in self.cgroups and lim.memory_mb:
                caps.append(f"memory {lim.memory_mb} MiB")
            if "pids" in self.cgroups and lim.max_processes:
                caps.append(f"{lim.max_processes} processes")
            parts.append("cgroup v1 per run: " + ", ".join(caps))
        else:
            parts.append("no cgroup limits (cgroup v1 memory/pids not writable)")
        return "; ".join(parts)

    def argv(self, command: Sequence[str], *, binds: Sequence[Bind] = (), cwd: str = "/tmp") -> list[str]:
        """The full launcher command line for ``command``."""
        if not self.bwrap:
            return list(command)
        args = [
            "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
        ]
        if self.network:
            args.append("--share-net")
        args += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        args += ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{top}"]
        # One bind for all of /etc (18 single-file binds cost bubblewrap 2.4 ms of its 8 ms start).
        args += ["--ro-bind", str(self._etc), "/etc"]
        for name in _NETWORK_ETC if self.network else ():
            if os.path.lexists(f"/etc/{name}") and os.path.lexists(self._etc / name):
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]  # live: DNS and CAs change
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/tmp/home"]
        for bind in binds:
            args += ["--bind" if bind.writable else "--ro-bind", bind.source, bind.dest]
        args += ["--chdir", cwd, "--"]
        return args + list(command)

    async def spawn(
        self,
        command: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        cwd: str = "/tmp",
        env: dict[str, str] | None = None,
        host_cwd: str | None = None,
        pass_fds: Sequence[int] = (),
    ) -> SandboxProcess:
        """Start ``command`` with piped stdin/stdout/stderr inside a fresh sandbox.

        Cancellation-safe: cancelled before the child was forked, it never starts; cancelled later, the
        child is killed and reaped and its cgroups removed before the cancellation propagates. (A
        cancelled ``asyncio.create_subprocess_exec`` kills only the launcher and then waits for its
        pipes to close, which a half-started bubblewrap child can hold open forever, while the cgroup
        sweep that would end that child only ran after the wait.)
        """
        groups = self._make_cgroups()
        argv = self.argv(command, binds=binds, cwd=cwd)
        options_fd = None
        admission: _Admission | None = None
        if self.bwrap:
            # bubblewrap reports its sandbox process (``--info-fd``), which then waits (``--block-fd``)
            # until it joined the cgroups and got its rlimits (see ``_Admission``).
            admission = _Admission()
            end = argv.index("--")
            info_w, block_r = admission.info_w, admission.block_r
            assert info_w is not None and block_r is not None
            options = [*argv[1:end], "--info-fd", str(info_w), "--block-fd", str(block_r)]
            # bubblewrap's options (host paths of the binds among them) travel through a pipe it
            # reads and closes (``--args``): inside, /proc/1/cmdline is "bwrap --args N -- command".
            options_fd, write_end = os.pipe()
            _write_all(write_end, b"".join(os.fsencode(a) + b"\0" for a in options))
            argv = [argv[0], "--args", str(options_fd), *argv[end:]]
            pass_fds = (*pass_fds, options_fd, info_w, block_r)
        else:
            argv = _launcher(self.limits, groups) + argv
        forked = False

        async def create() -> asyncio.subprocess.Process:
            nonlocal forked
            forked = True  # the fork happens in this same step: no suspension before it
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=host_cwd or ("/" if self.bwrap else cwd),
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )

        creation = asyncio.create_task(create())
        try:
            # Never cancels ``creation``: it finishes even when the caller is cancelled.
            await asyncio.wait({creation})
        except BaseException:
            if options_fd is not None:
                os.close(options_fd)
            if not forked:
                creation.cancel()  # not started yet: the child is never created
            await run_to_completion(_abandon(creation, groups, admission))
            raise
        if options_fd is not None:
            os.close(options_fd)
        try:
            proc = creation.result()
        except BaseException:
            if admission is not None:
                admission.close()
            SandboxProcess(None, groups).cleanup()  # type: ignore[arg-type]
            raise
        sp = SandboxProcess(proc, groups, contained=self.bwrap)
        if admission is not None:
            try:
                await run_to_completion(admission.admit(groups, self.limits))
            except BaseException:

                async def refuse() -> None:
                    await admission.refuse(creation)
                    await sp.discard()

                await run_to_completion(refuse())
                raise
        return sp

    async def prepare(self, *, binds: Sequence[Bind] = ()) -> Standby:
        """Start a sandbox with ``binds`` whose program is chosen later, by :meth:`Standby.start`.

        All the start-up cost (namespaces, mounts, cgroups, the fork and exec of the launcher) is paid
        here, so a caller can prepare the next run's sandbox while it is idle. The stub (bash reading
        its command line from a pipe) never sees the program's environment until ``start``.
        """
        read_end, write_end = os.pipe()
        spawn = asyncio.ensure_future(
            self.spawn(
                ["/bin/bash", "--noprofile", "--norc", "-c", _STANDBY_STUB.format(fd=read_end)],
                binds=binds,
                cwd="/",
                env={},
                pass_fds=(read_end,),
            )
        )
        try:
            sp = await asyncio.shield(spawn)
        except BaseException:
            # Close our end first: a cancelled spawn waits for the launcher's pipes to close, and a
            # stub already running holds them until it reads the end of its (empty) command line.
            os.close(write_end)

            async def settle() -> None:
                with contextlib.suppress(BaseException):
                    await (await spawn).discard()

            await run_to_completion(settle())
            raise
        finally:
            os.close(read_end)
        return Standby(sp, write_end, read_end, asyncio.get_running_loop())

    def _make_cgroups(self) -> list[Path]:
        groups: list[Path] = []
        name = f"run-{os.getpid()}-{secrets.token_hex(4)}"
        lim = self.limits
        for controller in sorted(self.cgroups):
            group = _CGROUP_ROOT / controller / _CGROUP_PARENT / name
            try:
                group.mkdir(parents=True)
                if controller == "memory" and lim.memory_mb:
                    limit = str(lim.memory_mb * 1024 * 1024)
                    (group / "memory.limit_in_bytes").write_text(limit)
                    with contextlib.suppress(OSError):
                        (group / "memory.memsw.limit_in_bytes").write_text(limit)
                if controller == "pids" and lim.max_processes:
                    (group / "pids.max").write_text(str(lim.max_processes))
            except OSError:
                with contextlib.suppress(OSError):
                    group.rmdir()
                continue
            groups.append(group)
        return groups

    def probe_ms(self, runs: int = 3) -> float:
        """Median wall time of starting and ending ``true`` in this sandbox (the startup cost)."""
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(self.argv(["/bin/true"]), check=False, capture_output=True)
            times.append((time.perf_counter() - start) * 1000)
        return sorted(times)[len(times) // 2]


class _Admission:
    """How a bubblewrap sandbox gets its cgroups and rlimits without a launcher process.

    bubblewrap writes its sandbox process's pid to ``--info-fd`` right after creating it; that process
    sets up the namespaces and mounts, then blocks reading ``--block-fd`` before it starts the
    command. Meanwhile we move it into the run's cgroups and set its rlimits (``prlimit``), then let
    it go: the command and everything it starts inherit both. This replaces a bash launcher that
    did the same before ``exec``ing bubblewrap (1.0-1.5 ms of CPU and ~1 ms of start-up per sandbox).
    A sandbox process that was never admitted is killed before its block is lifted.
    """

    def __init__(self) -> None:
        self.info_r: int | None
        self.info_w: int | None
        self.block_r: int | None
        self.block_w: int | None
        self.info_r, self.info_w = os.pipe()
        self.block_r, self.block_w = os.pipe()
        self._reading: asyncio.Future[int | None] | None = None

    def close_child_ends(self) -> None:
        for name in ("info_w", "block_r"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    def close(self) -> None:
        """Close every end we still hold (an unreleased block reads end-of-file: call
        :meth:`refuse` first when a sandbox process may exist)."""
        self.close_child_ends()
        for name in ("info_r", "block_w"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    async def _read_child(self) -> int | None:
        """The sandbox process's pid from bubblewrap's info (None: it ended without one); read once."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_info())
        return await asyncio.shield(self._reading)

    async def _read_info(self) -> int | None:
        self.close_child_ends()
        fd = self.info_r
        assert fd is not None
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        data = bytearray()

        def readable() -> None:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            data.extend(chunk)
            # One JSON object, written at once; the sandbox process may keep the pipe open.
            if (not chunk or data.rstrip().endswith(b"}")) and not done.done():
                done.set_result(bytes(data))

        os.set_blocking(fd, False)
        loop.add_reader(fd, readable)
        try:
            raw = await asyncio.wait_for(done, _CREATION_GRACE)
        except TimeoutError:
            raw = b""
        finally:
            loop.remove_reader(fd)
            self.info_r = None
            os.close(fd)
        try:
            return int(json.loads(raw)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return None

    async def admit(self, groups: Sequence[Path], limits: SandboxLimits) -> None:
        """Put the sandbox process in ``groups`` under ``limits``, then let it start its command."""
        child = await self._read_child()
        if child is not None:  # None: bubblewrap failed before; its exit status and stderr tell why
            # In a thread: moving a process into a memory cgroup now and then waits for an RCU grace
            # period (1-2 in 100 writes here take 8-23 ms), which must not stall the event loop.
            await asyncio.to_thread(_enter, child, groups, limits)
        fd, self.block_w = self.block_w, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"x")
            os.close(fd)

    async def refuse(self, creation: asyncio.Task[asyncio.subprocess.Process]) -> None:
        """Kill the sandbox process (if one was created) before its block is lifted."""
        if not creation.done():  # still being created: keep it blocked until it is, then refuse
            creation.add_done_callback(self._refuse_later)
            return
        if not creation.cancelled() and creation.exception() is None:
            child = await self._read_child()
            if child is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGKILL)
        self.close()

    def _refuse_later(self, creation: asyncio.Task[asyncio.subprocess.Process]) -> None:
        in_background(self.refuse(creation), "killing a sandbox process never admitted")


def _enter(pid: int, groups: Sequence[Path], limits: SandboxLimits) -> None:
    """Move ``pid`` into ``groups`` and set its rlimits."""
    for group in groups:
        try:
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise OSError(exc.errno, f"sandbox: cannot join the cgroup {group}: {exc.strerror}") from exc
    _set_limits(pid, limits)


def _rlimits(limits: SandboxLimits) -> list[tuple[int, int, int]]:
    """``limits`` as (resource, soft, hard): what both ``_set_limits`` and the launcher set."""
    wanted: list[tuple[int, int, int]] = []
    if limits.memory_mb:
        wanted.append((resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024, limits.memory_mb * 1024 * 1024))
    if limits.max_file_bytes:
        size = max(1, limits.max_file_bytes // 1024) * 1024  # whole KiB: what ``ulimit -f`` can say
        wanted.append((resource.RLIMIT_FSIZE, size, size))
    if limits.cpu_seconds:  # the soft limit sends SIGXCPU, the hard one a second later SIGKILL
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1))
    if limits.max_processes:
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes))
    wanted.append((resource.RLIMIT_CORE, 0, 0))
    return wanted


def _set_limits(pid: int, limits: SandboxLimits) -> None:
    """``prlimit`` ``pid`` to ``_rlimits(limits)``, never above the hard limit it already has (raising
    one would need a capability)."""
    for kind, soft, hard in _rlimits(limits):
        current = resource.prlimit(pid, kind)[1]
        if current != resource.RLIM_INFINITY:
            hard = min(hard, current)
            soft = min(soft, hard)
        resource.prlimit(pid, kind, (soft, hard))


# The launcher (without bubblewrap): a bash that joins the run's cgroups, sets the rlimits and ``exec``s the program. Doing
# this in a process of its own (rather than in a ``preexec_fn``) lets Python start it with vfork: a
# forked copy of a large process (a Ray worker) costs milliseconds of page-table copying, blocking the
# event loop, while vfork costs a fraction of one. Arguments: the cgroup.procs files, ``--``, argv.
_LAUNCHER = '''while [ "$1" != -- ]; do
  echo 0 > "$1" || { echo "sandbox: cannot join the cgroup $1" >&2; exit 125; }
  shift
done
shift
{limits}
exec "$@"'''


# bash's ``ulimit`` flag for a resource, and its unit in bytes (or seconds, or processes).
_ULIMIT = {
    resource.RLIMIT_AS: ("-v", 1024),
    resource.RLIMIT_FSIZE: ("-f", 1024),
    resource.RLIMIT_CPU: ("-t", 1),
    resource.RLIMIT_NPROC: ("-u", 1),
    resource.RLIMIT_CORE: ("-c", 1),
}


def _launcher(limits: SandboxLimits, groups: Sequence[Path]) -> list[str]:
    """The argv prefix that starts a command in ``groups`` under ``limits``' rlimits."""
    lines = []
    for kind, soft, hard in _rlimits(limits):
        flag, unit = _ULIMIT[kind]
        if soft == hard:
            lines.append(f"ulimit {flag} {soft // unit}")
        else:
            lines.append(f"ulimit -S {flag} {soft // unit} && ulimit -H {flag} {hard // unit}")
    script = _LAUNCHER.replace("{limits}", " &&\n".join(lines) + " || exit 125")
    return (
        ["/bin/bash", "--noprofile", "--norc", "-c", script, "sandbox-launcher"]
        + [str(g / "cgroup.procs") for g in groups]
        + ["--"]
    )


@functools.cache
def _bwrap_works() -> bool:
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [exe, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    probe += ["--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def _cgroup_writable(controller: str) -> bool:
    parent = _CGROUP_ROOT / controller / _CGROUP_PARENT
    try:
        parent.mkdir(parents=True, exist_ok=True)
        test = parent / f"probe-{os.getpid()}"
        test.mkdir()
        test.rmdir()
    except OSError:
        return False
    _remove_stale_groups(parent)
    return True


def _remove_stale_groups(parent: Path) -> None:
    """Remove the run groups of processes that are gone (killed before they could remove them, e.g. a
    pool worker with standby sandboxes killed at shutdown); their programs died with them."""
    for group in parent.glob("run-*-*"):
        try:
            pid = int(group.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            SandboxProcess(None, [group]).cleanup()  # type: ignore[arg-type]
        except (ValueError, IndexError, PermissionError):
            continue


_ETC_DIRS: dict[bool, Path] = {}


def _sandbox_etc(network: bool) -> Path:
    """The sandbox's /etc, built once per process (and network setting): who uid 65534 is, its
    hostname, loopback hosts, copies of the host's :data:`_ETC_FILES` (links kept as links), and
    for ``network`` empty mount points for :data:`_NETWORK_ETC`, bound live over them.

    Copies, not binds: bubblewrap spends ~0.13 ms per bind, and a copy of these small files costs
    a few ms once. A host file changed later (an ``ld.so.cache`` after installing a library) is seen
    by the next process; the dynamic loader falls back to the default library paths meanwhile.
    """
    if network in _ETC_DIRS and _ETC_DIRS[network].is_dir():
        return _ETC_DIRS[network]
    base = Path(tempfile.gettempdir())
    for stale in base.glob(f"computer-etc-{os.getuid()}-*-*"):  # of processes that died without atexit
        try:
            os.kill(int(stale.name.split("-")[3]), 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            continue
    root = Path(tempfile.mkdtemp(prefix=f"computer-etc-{os.getuid()}-{os.getpid()}-", dir=base))
    atexit.register(shutil.rmtree, root, True)
    files = {
        "passwd": f"root:x:0:0:root:/root:/bin/bash\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/tmp/home:/bin/bash\n",
        "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n",
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    for name in _ETC_FILES:
        source, dest = Path("/etc") / name, root / name
        try:
            if source.is_symlink():
                dest.symlink_to(os.readlink(source))
            elif source.is_dir():
                shutil.copytree(source, dest, symlinks=True)
            elif source.is_file():
                shutil.copyfile(source, dest)
        except OSError as exc:  # unreadable or vanished: the sandbox goes without it
            log.debug("sandbox /etc: %s not copied: %s", source, exc)
    for name in _NETWORK_ETC if network else ():
        source, dest = Path("/etc") / name, root / name
        if source.is_dir():
            dest.mkdir()
        elif source.exists():
            dest.touch()
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    _ETC_DIRS[network] = root
    return root


def python_prefixes() -> list[str]:
    """Host directories the current interpreter needs, when they are outside /usr."""
    out: list[str] = []
    for prefix in {sys.base_prefix, sys.base_exec_prefix}:
        real = os.path.realpath(prefix)
        if not real.startswith("/usr/") and real not in out:
            out.append(real)
    return out
