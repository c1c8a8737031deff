"""``Sandbox``: launches one program under every isolation layer this machine allows.

Layers, each used when available and reported in :attr:`Sandbox.isolation`:

- bubblewrap (``_bwrap``): user, pid, mount, ipc, uts and network namespaces, read-only system
  directories, a synthetic ``/etc``, only the binds a backend asks for; with ``network`` the network
  namespace reaches out through slirp4netns (``_slirp``), never the host's own;
- a seccomp filter (``_seccomp``, loaded by bubblewrap): ``EPERM`` for the kernel interfaces behind
  most local privilege escalations, and no new user namespaces (with bubblewrap's
  ``--disable-userns`` where it has it, 0.8+; alone on an older one);
- rlimits (``_limits``) and cgroup v1 ``memory``, ``pids`` and ``cpu`` groups, one per run
  (``_cgroups``; ``cpu`` makes the whole tree one scheduling entity), capping the whole tree: under bubblewrap set on its sandbox process while it waits to start the
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
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ._admission import CREATION_GRACE, Admission
from ._bwrap import (
    NO_USERNS,
    SANDBOX_UID,
    Bind,
    bwrap_argv,
    bwrap_works,
    python_prefixes,
    remembered,
    sandbox_etc,
)
from ._cgroups import cgroup_writable, make_groups, remove_groups, socket_cap, socket_capped
from ._fd_budget import in_force
from ._limits import (
    Rlimit,
    SandboxLimits,
    can_limit_others,
    described,
    launcher,
    limit_self,
    raise_descriptor_limit,
    rlimits,
)
from ._process import SandboxProcess, hand_over_pipes, kill_late_arrival
from ._ptys import PTS_BIND, pty_isolation, pty_prefix
from ._seccomp import SeccompFilter, compiled, filter_fd
from ._slirp import NetworkLink, slirp_executable
from ._standby import STANDBY_STUB, Standby, write_all
from ._tasks import offload, run_to_completion
from ._uid_lease import UidLeases
from ._users import drop_privileges, running_as_root, sandbox_id_range

__all__ = [
    "SANDBOX_UID",
    "Bind",
    "Sandbox",
    "SandboxLimits",
    "SandboxProcess",
    "Standby",
    "python_prefixes",
    "run_to_completion",
]

log = logging.getLogger(__name__)


class Sandbox:
    """Builds and launches sandboxed commands; probes once which layers work."""

    def __init__(
        self,
        *,
        network: bool = False,
        limits: SandboxLimits | None = None,
        unprivileged: bool = False,
        host_ids: tuple[int, int] | None = None,
    ) -> None:
        """``unprivileged``: when this process is root, programs run as an unprivileged host user
        (``host_ids``, default the base of :func:`sandbox_id_range`), never as host root (see
        ``_users``). A writable bind must then be owned by the ids the spawn runs as (``ids``, default
        :attr:`host_ids`), files and directories inside it too. Without ``host_ids``, :attr:`leases`
        hands a backend one uid per mirror from the range (``_uid_lease``)."""
        self.network = network
        self.limits = limits or SandboxLimits()  # in force: the descriptor budget resolved (setter)
        raise_descriptor_limit()  # a host of many sandboxes needs more than a login shell's 1,024
        mapped = unprivileged and running_as_root()
        ids = sandbox_id_range() if mapped and host_ids is None else None
        self._host_ids = (host_ids or (ids.base if ids is not None else None)) if mapped else None
        # A uid per mirror (``_uid_lease``); None: every spawn runs as ``host_ids`` (given, or shared).
        self.leases = (
            UidLeases(ids.first, ids.count, ids.base[1]) if ids is not None and not ids.shared else None
        )
        self._drop = drop_privileges(*self._host_ids) if self._host_ids is not None else []
        self.bwrap = bwrap_works(tuple(self._drop))
        if self._host_ids is not None and not self.bwrap and bwrap_works():
            # Namespaces matter more than the host uid (without them a program sees the host's files
            # and network): keep bubblewrap as root, say so.
            log.warning(
                "bubblewrap does not work as uid %s here: sandboxes map to host root", self._host_ids[0]
            )
            self._host_ids, self._drop, self.bwrap, self.leases = None, [], True, None
        self._ptys = list(pty_prefix(self.limits.max_ptys, tuple(self._drop))) if self.bwrap else []
        # Network through slirp4netns in a namespace of the sandbox's own (``_slirp``): refused here,
        # naming the package, where it is missing (never the host's network namespace instead).
        self._slirp = slirp_executable() if network and self.bwrap else None
        # Where bubblewrap can (0.8+), the sandbox's programs make no user namespaces of their own;
        # the seccomp filter refuses them too, on every bubblewrap (``_seccomp``).
        self.no_userns = self.bwrap and bwrap_works(tuple(self._drop), (NO_USERNS,))
        # The seccomp filter, compiled once per process, where bubblewrap loads it here (probed with
        # the options the sandboxes get: bubblewrap makes --disable-userns's namespace before it).
        self.seccomp: SeccompFilter | None = compiled() if self.bwrap else None
        program = self._program
        options = (NO_USERNS,) if self.no_userns else ()
        if program is not None and not bwrap_works(tuple(self._drop), options, program):
            log.warning("bubblewrap could not load the seccomp filter here: sandboxes run without it")
            self.seccomp = SeccompFilter(None, missing="bubblewrap could not load it")
        # Root without CAP_SYS_RESOURCE may not prlimit another user's process: the sandbox's own
        # first process then sets its rlimits on itself (one more exec, paid ahead for standbys).
        self._limit_inside = self._host_ids is not None and self.bwrap and not can_limit_others()
        # ``cpu``: the run's processes weigh as one entity, ``setsid`` or not (see ``_cgroups``).
        self.cgroups = {c for c in ("memory", "pids", "cpu") if cgroup_writable(c)}
        sandbox_etc(network, self._host_ids)  # built now, not on the first run's path

    @property
    def limits(self) -> SandboxLimits:
        """The limits in force: ``max_open_files`` resolved, ``max_processes`` what it left (``_fd_budget``)."""
        return self._limits

    @limits.setter
    def limits(self, limits: SandboxLimits) -> None:
        self._limits = in_force(limits)

    @property
    def host_ids(self) -> tuple[int, int] | None:
        """The host (uid, gid) the sandbox's programs run as, which must own a bound writable
        directory and its files; None when they run as this process's own user (no mapping)."""
        return self._host_ids

    @property
    def rlimits(self) -> list[Rlimit]:
        """The rlimits every program gets, given :attr:`limits` and the cgroups in use."""
        return rlimits(
            self.limits,
            memory_cgroup="memory" in self.cgroups,
            pids_cgroup="pids" in self.cgroups,
            own_user_namespace=self.bwrap,
        )

    @property
    def isolation(self) -> str:
        """Exactly which layers are in force, in one line."""
        parts: list[str] = []
        if self.leases is not None:
            last = self.leases.first + self.leases.count - 1
            user = f"an unprivileged host uid of its own, leased from {self.leases.first}-{last}"
        elif self._host_ids is not None:
            user = f"unprivileged host uid {self._host_ids[0]}, shared by every sandbox"
        else:
            user = "host root" if running_as_root() else "this process's host user"
        if self.bwrap:
            net = (
                "network through slirp4netns from its own network namespace (10.0.2.100, DNS 10.0.2.3; "
                "the host's own addresses, loopback and link-local ranges refused by a seccomp "
                "supervisor of slirp4netns; the internet and other hosts reachable)"
                if self.network
                else "no network (own empty network namespace)"
            )
            parts.append(
                f"bubblewrap: user namespace as uid {SANDBOX_UID} ({user}) with no capabilities, "
                f"pid/mount/ipc/uts namespaces, {net}, read-only /usr, synthetic /etc, private /tmp, "
                f"only the run's own binds (nosuid, nodev), {self._userns_isolation()}, "
                + pty_isolation(self.limits.max_ptys, self._ptys)
            )
        else:
            parts.append(f"NO namespace isolation (bubblewrap unavailable): the program runs as {user}")
        parts.append(self._seccomp_isolation())
        lim = self.limits
        parts.append("rlimits: " + ", ".join([*described(self.rlimits, lim), "no core"]))
        if self.cgroups:
            caps = []
            if "memory" in self.cgroups and lim.memory_mb:
                caps.append(f"memory {lim.memory_mb} MiB")
            if "memory" in self.cgroups and socket_capped():
                caps.append(f"socket buffers {socket_cap(lim) >> 20} MiB")
            if "pids" in self.cgroups and lim.max_processes:
                caps.append(f"{lim.max_processes} processes")
            if "cpu" in self.cgroups:
                caps.append("one cpu scheduling group")
            parts.append("cgroup v1 per run: " + ", ".join(caps))
        else:
            parts.append("no cgroup limits (cgroup v1 memory/pids not writable)")
        return "; ".join(parts)

    def _userns_isolation(self) -> str:
        """Whether the sandbox's programs can make user namespaces of their own, and what refuses them."""
        by = [NO_USERNS] if self.no_userns else []
        if self._program is not None and self.seccomp is not None and self.seccomp.no_userns:
            by.append(
                "the seccomp filter" + ("" if self.no_userns else ": this bubblewrap has no " + NO_USERNS)
            )
        return f"no user namespaces inside ({' and '.join(by)})" if by else "user namespaces allowed inside"

    def _seccomp_isolation(self) -> str:
        if self.seccomp is None:
            return "NO seccomp filter (it needs bubblewrap)"
        if self.seccomp.program is None:
            return f"NO seccomp filter ({self.seccomp.missing}): every system call is allowed"
        return (
            f"seccomp filter: {len(self.seccomp.denied)} system calls fail with EPERM (kernel keyring, "
            "bpf, perf_event_open, userfaultfd, io_uring, io_setup, mount, modules, kexec, swap, reboot, clock "
            "setting and obsolete ones"
            + (f"; {'/'.join(self.seccomp.compat)} ABIs too" if self.seccomp.compat else "")
            + ")"
            + (
                ", new user namespaces refused (unshare and clone with CLONE_NEWUSER: EPERM; clone3: "
                "ENOSYS, glibc falls back to clone)"
                if self.seccomp.no_userns
                else ""
            )
            + (", setting extended attributes fails (EOPNOTSUPP)" if self.seccomp.no_xattrs else "")
            + (", fallocate past a file's end (keep size) too" if self.seccomp.no_prealloc else "")
            + (", virtual machine sockets (AF_VSOCK) refused (EPERM)" if self.seccomp.no_vsock else "")
            + (", huge pages (hugetlb) refused" if self.seccomp.no_huge_pages else "")
            + (f", {'/'.join(self.seccomp.absent)} absent (ENOSYS)" if self.seccomp.absent else "")
            + ", ptrace allowed"
        )

    @property
    def _program(self) -> bytes | None:
        return self.seccomp.program if self.seccomp is not None else None

    def argv(
        self,
        command: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        cwd: str = "/tmp",
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """The full command line for ``command`` (without cgroups and rlimits: see :meth:`spawn`),
        with the seccomp filter only given ``seccomp_fd`` (:func:`~._seccomp.filter_fd` of
        :attr:`seccomp`'s program, passed by the caller)."""
        if not self.bwrap:
            return [*self._drop, *command]
        return [*self._ptys, *self._drop, *self._bwrap_argv(command, binds, cwd, seccomp_fd=seccomp_fd)]

    def _bwrap_argv(
        self,
        command: Sequence[str],
        binds: Sequence[Bind],
        cwd: str,
        as_pid_1: bool = False,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        etc = sandbox_etc(self.network, self._host_ids)  # remade if release_process removed it
        return bwrap_argv(
            command,
            binds=binds,
            cwd=cwd,
            network=self.network,
            etc=etc,
            as_pid_1=as_pid_1,
            no_userns=self.no_userns,
            seccomp_fd=seccomp_fd,
            own_pts=PTS_BIND if self._ptys else (),
        )

    async def spawn(
        self,
        command: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        cwd: str = "/tmp",
        env: dict[str, str] | None = None,
        host_cwd: str | None = None,
        pass_fds: Sequence[int] = (),
        as_pid_1: bool = False,
        ids: tuple[int, int] | None = None,
    ) -> SandboxProcess:
        """Start ``command`` with piped stdin/stdout/stderr inside a fresh sandbox, as the host
        ``ids`` (a mirror's leased uid, ``Mirror.owner``; default :attr:`host_ids`) when mapped.

        Cancellation-safe: cancelled before the child was forked, it never starts; cancelled later, the
        child is killed and reaped and its cgroups removed before the cancellation propagates. (A
        cancelled ``asyncio.create_subprocess_exec`` kills only the launcher and then waits for its
        pipes to close, which a half-started bubblewrap child can hold open forever, while the cgroup
        sweep that would end that child only ran after the wait.)
        """
        ids = ids if ids is not None and self._host_ids is not None else self._host_ids
        drop = drop_privileges(*ids) if ids is not None and ids != self._host_ids else self._drop
        groups = make_groups(self.cgroups, self.limits)
        admitted = self.rlimits
        if self._limit_inside:
            command, admitted = [*limit_self(admitted), *command], []
        argv = self._bwrap_argv(command, binds, cwd, as_pid_1) if self.bwrap else list(command)
        ours: list[int] = []  # descriptors for bubblewrap alone, closed here once it has its own

        def close_ours() -> None:
            while ours:
                os.close(ours.pop())

        admission: Admission | None = None
        link: NetworkLink | None = None
        try:  # the host out of descriptors (EMFILE) here left the run's cgroups for the process's life
            if self._slirp is not None:  # its end is bubblewrap's (``--sync-fd``): see ``_slirp``
                link = NetworkLink(self._slirp, drop, groups)
                ours.append(link.sync_fd)
                argv = [argv[0], "--sync-fd", str(link.sync_fd), *argv[1:]]
            if self.bwrap:
                # bubblewrap reports its sandbox process (``--info-fd``), which then waits
                # (``--block-fd``) until it joined the cgroups and got its rlimits (``_admission``).
                admission = Admission()
                end = argv.index("--")
                info_w, block_r = admission.info_w, admission.block_r
                assert info_w is not None and block_r is not None
                options = [*argv[1:end], "--info-fd", str(info_w), "--block-fd", str(block_r)]
                if self._program is not None:  # loaded just before the command's exec
                    ours.append(filter_fd(self._program))
                    options += ["--seccomp", str(ours[-1])]
                # bubblewrap's options (host paths of the binds among them) travel through a pipe it
                # reads and closes (``--args``): inside, /proc/1/cmdline is "bwrap --args N -- command".
                options_fd, write_end = os.pipe()
                ours.append(options_fd)
                write_all(write_end, b"".join(os.fsencode(a) + b"\0" for a in options))
                argv = [*self._ptys, *drop, argv[0], "--args", str(options_fd), *argv[end:]]
                pass_fds = (*pass_fds, *ours, info_w, block_r)
            else:  # the launcher joins the cgroups (as this process's user), then drops to the sandbox's
                argv = [*launcher(self.rlimits, groups), *drop, *argv]
        except BaseException:
            if admission is not None:
                admission.close()
            if link is not None:
                link.close()
            close_ours()
            remove_groups(groups)
            raise
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
            close_ours()
            if link is not None:
                link.close()
            if not forked:
                creation.cancel()  # not started yet: the child is never created
            await run_to_completion(_abandon(creation, groups, admission))
            raise
        close_ours()
        try:
            proc = creation.result()
        except BaseException:
            if admission is not None:
                admission.close()
            if link is not None:
                link.close()
            remove_groups(groups)
            raise
        sp = SandboxProcess(proc, groups, contained=self.bwrap)
        if ids is not None:  # before the program starts (bubblewrap: it waits for admission)
            hand_over_pipes(proc, *ids)
        if admission is not None:
            try:
                attach = None if link is None else link.attach
                await run_to_completion(admission.admit(groups, admitted, attach))
            except BaseException:

                async def refuse() -> None:
                    await admission.refuse(creation)
                    await sp.discard()

                await run_to_completion(refuse())
                raise
            finally:
                if link is not None:
                    link.close()
            sp.network = link
        return sp

    async def prepare(
        self, *, binds: Sequence[Bind] = (), as_pid_1: bool = False, ids: tuple[int, int] | None = None
    ) -> Standby:
        """Start a sandbox with ``binds`` whose program is chosen later, by :meth:`Standby.start`
        (``as_pid_1``: a live sandbox's init, the pid namespace's first process, see ``bwrap_argv``;
        ``ids``: the host ids it runs as, see :meth:`spawn`).

        All the start-up cost (namespaces, mounts, cgroups, the fork and exec of the launcher) is paid
        here, so a caller can prepare the next run's sandbox while it is idle. The stub (bash reading
        its command line from a pipe) never sees the program's environment until ``start``.
        """
        read_end, write_end = os.pipe()
        ids = ids if ids is not None and self._host_ids is not None else self._host_ids
        if ids is not None:  # the stub opens it as /dev/fd/N, which checks its owner
            os.fchown(read_end, *ids)
        spawn = asyncio.ensure_future(
            self.spawn(
                ["/bin/bash", "--noprofile", "--norc", "-c", STANDBY_STUB.format(fd=read_end)],
                binds=binds,
                cwd="/",
                env={},
                pass_fds=(read_end,),
                as_pid_1=as_pid_1,
                ids=ids,
            )
        )
        try:
            sp = await asyncio.shield(spawn)
        except BaseException:
            # Close our end first: a cancelled spawn waits for the launcher's pipes to close, and a
            # stub already running holds them until it reads the end of its (empty) command line.
            os.close(write_end)

            async def settle() -> None:
                with contextlib.suppress(BaseException):  # the spawn failed: there is nothing to end
                    await (await spawn).discard()

            await run_to_completion(settle())
            raise
        finally:
            os.close(read_end)
        return Standby(sp, write_end, read_end, asyncio.get_running_loop())

    def probe_ms(self, runs: int = 3) -> float:
        """Median wall time of starting and ending ``true`` in this sandbox (the startup cost, its
        seccomp filter included), measured once per machine state: later processes reuse it
        (``_bwrap.remembered``)."""
        argv = self.argv(["/bin/true"])
        program = self._program

        def measure() -> float:
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                fd = None if program is None else filter_fd(program)
                try:
                    run = argv if fd is None else self.argv(["/bin/true"], seccomp_fd=fd)
                    subprocess.run(
                        run, check=False, capture_output=True, pass_fds=() if fd is None else (fd,)
                    )
                finally:
                    if fd is not None:
                        os.close(fd)
                times.append((time.perf_counter() - start) * 1000)
            return sorted(times)[len(times) // 2]

        named = [] if program is None or self.seccomp is None else [f"seccomp={self.seccomp.digest}"]
        return float(remembered([f"startup of {runs}", *argv, *named], measure))


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
        creation.add_done_callback(kill_late_arrival)
        await offload(None, remove_groups, groups)
        return
    if creation.cancelled() or creation.exception() is not None:
        await offload(None, remove_groups, groups)
        return
    await SandboxProcess(creation.result(), groups).discard()
