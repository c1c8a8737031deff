"""``Sandbox``: launches one program under every isolation layer this machine allows.

Layers, each used when available and reported in :attr:`Sandbox.isolation`:

- bubblewrap (``_bwrap``): user, pid, mount, ipc, uts and network namespaces, read-only system
  directories, a synthetic ``/etc``, only the binds a backend asks for;
- rlimits (``_limits``) and cgroup v1 ``memory`` and ``pids`` groups, one per run (``_cgroups``),
  capping the whole tree: under bubblewrap set on its sandbox process while it waits to start the
  command (``_admission``), without bubblewrap by a bash launcher before it execs the program.

The whole tree ends with the run: bwrap's pid namespace dies with its first process, the launched
process leads its own process group, and the cgroups are swept with SIGKILL. Standby sandboxes
(started ahead of their program) are in ``_standby``, the process and its output in ``_process``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ._admission import CREATION_GRACE, Admission
from ._bwrap import SANDBOX_UID, Bind, bwrap_argv, bwrap_works, python_prefixes, sandbox_etc
from ._cgroups import cgroup_writable, make_groups, remove_groups
from ._limits import Rlimit, SandboxLimits, launcher, rlimits
from ._process import SandboxProcess, close_transport
from ._standby import STANDBY_STUB, Standby, write_all
from ._tasks import in_background, run_to_completion

__all__ = [
    "SANDBOX_UID",
    "Bind",
    "Sandbox",
    "SandboxLimits",
    "SandboxProcess",
    "Standby",
    "in_background",
    "python_prefixes",
    "run_to_completion",
]

log = logging.getLogger(__name__)


class Sandbox:
    """Builds and launches sandboxed commands; probes once which layers work."""

    def __init__(self, *, network: bool = False, limits: SandboxLimits | None = None) -> None:
        self.network = network
        self.limits = limits or SandboxLimits()
        self.bwrap = bwrap_works()
        self.cgroups = {c for c in ("memory", "pids") if cgroup_writable(c)}
        self._etc = sandbox_etc(network)

    @property
    def rlimits(self) -> list[Rlimit]:
        """The rlimits every program gets, given :attr:`limits` and the cgroups in use."""
        return rlimits(
            self.limits, memory_cgroup="memory" in self.cgroups, pids_cgroup="pids" in self.cgroups
        )

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
        names = {
            resource.RLIMIT_AS: "address space",
            resource.RLIMIT_FSIZE: "file size",
            resource.RLIMIT_CPU: "cpu time",
            resource.RLIMIT_NPROC: "processes",
        }
        rl = [names[kind] for kind, _, _ in self.rlimits if kind in names]
        parts.append("rlimits: " + ", ".join([*rl, "no core"]))
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
        return bwrap_argv(command, binds=binds, cwd=cwd, network=self.network, etc=self._etc)

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
        groups = make_groups(self.cgroups, self.limits)
        argv = self.argv(command, binds=binds, cwd=cwd)
        options_fd = None
        admission: Admission | None = None
        if self.bwrap:
            # bubblewrap reports its sandbox process (``--info-fd``), which then waits (``--block-fd``)
            # until it joined the cgroups and got its rlimits (see ``_admission``).
            admission = Admission()
            end = argv.index("--")
            info_w, block_r = admission.info_w, admission.block_r
            assert info_w is not None and block_r is not None
            options = [*argv[1:end], "--info-fd", str(info_w), "--block-fd", str(block_r)]
            # bubblewrap's options (host paths of the binds among them) travel through a pipe it
            # reads and closes (``--args``): inside, /proc/1/cmdline is "bwrap --args N -- command".
            options_fd, write_end = os.pipe()
            write_all(write_end, b"".join(os.fsencode(a) + b"\0" for a in options))
            argv = [argv[0], "--args", str(options_fd), *argv[end:]]
            pass_fds = (*pass_fds, options_fd, info_w, block_r)
        else:
            argv = launcher(self.rlimits, groups) + argv
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
            remove_groups(groups)
            raise
        sp = SandboxProcess(proc, groups, contained=self.bwrap)
        if admission is not None:
            try:
                await run_to_completion(admission.admit(groups, self.rlimits))
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
                ["/bin/bash", "--noprofile", "--norc", "-c", STANDBY_STUB.format(fd=read_end)],
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

    def probe_ms(self, runs: int = 3) -> float:
        """Median wall time of starting and ending ``true`` in this sandbox (the startup cost)."""
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(self.argv(["/bin/true"]), check=False, capture_output=True)
            times.append((time.perf_counter() - start) * 1000)
        return sorted(times)[len(times) // 2]


async def _abandon(
    creation: asyncio.Task[asyncio.subprocess.Process], groups: list[Path], admission: Admission | None
) -> None:
    """A spawn was cancelled: let the creation finish, then kill and reap what it started."""
    done, _ = await asyncio.wait({creation}, timeout=CREATION_GRACE)
    if admission is not None:
        await admission.refuse(creation)
    if not done:
        # asyncio never finished connecting the pipes: a launcher joined the cgroups before its
        # exec, so sweeping them ends it, and a bubblewrap sandbox process stays blocked until its
        # refusal kills it; whatever the creation yields later is killed on arrival.
        log.warning("sandbox spawn: the cancelled creation did not finish; sweeping its cgroups")
        creation.add_done_callback(_kill_late_arrival)
        await asyncio.to_thread(remove_groups, groups)
        return
    if creation.cancelled() or creation.exception() is not None:
        await asyncio.to_thread(remove_groups, groups)
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
    close_transport(proc)
