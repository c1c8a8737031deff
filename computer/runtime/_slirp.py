"""A sandbox's network when its backend has ``network=True``: a network namespace of its own, reaching
out through slirp4netns (user-mode TCP/IP on the host's side).

Decision (security): a sandbox with network no longer shares the host's network namespace
(``--share-net``), where a program reached every service listening on the host's loopback: Ray's GCS,
raylet and dashboard ports (Ray runs without authentication here: a job submitted there runs outside
any sandbox), the directory's Redis, the dashboards. It gets its own namespace, as a sandbox without
network does, with ``tap0`` (10.0.2.100/24, MTU 65520, default route through slirp's 10.0.2.2, DNS at
10.0.2.3: the sandbox's ``/etc/resolv.conf``, ``_bwrap``), and slirp4netns turns its connections into
ordinary sockets of the host's, ``--disable-host-loopback``: 10.0.2.2 does not lead to the host's
loopback, and 127.0.0.1 is the sandbox's own. There is no opt-in to the host's network namespace (a
service a sandbox must reach listens on another address of the host's; see the runtime README).

How it is attached (``Sandbox.spawn``, :meth:`NetworkLink.attach` while ``Admission`` holds the
sandbox process, before its command starts):

- bubblewrap reports its sandbox process (``--info-fd``), which waits on ``--block-fd``: its network
  namespace is opened then (while the process is held its pid cannot be another's) and must not be
  this process's own;
- slirp4netns's ``--configure`` also sets ``lo`` up, and the kernel then gives ``lo`` 127.0.0.1: done
  before bubblewrap's own loopback set-up, that set-up's netlink request failed, and the sandbox with
  it (about 1 start in 10 here). So slirp4netns starts once the sandbox process has no capabilities
  left (``CapEff`` 0 in its ``/proc`` status): bubblewrap drops them after its last set-up step, just
  before it waits on the block, and without them nothing in the sandbox can configure its network;
- it joins the user namespace owning that network namespace (``NS_GET_USERNS``): the sandbox
  process's own is a nested one under ``--disable-userns``, without rights over it;
- the block is lifted once slirp4netns wrote ``--ready-fd`` (interface up, address, route): the
  command never runs without its network; slirp4netns failing fails the start (never the host's
  network instead);
- it ends with the sandbox, however that ends (its program's exit, a kill, this process dying:
  bubblewrap's ``--die-with-parent``): its ``--exit-fd`` is the read end of a pipe whose only write
  end is bubblewrap's ``--sync-fd``, which only the sandbox's pid 1 holds: bubblewrap's own init
  (closed for the command), or a live sandbox's init (``--as-pid-1``), which makes it close-on-exec
  with every descriptor it started with (``_live_init.seal``: its jobs never get it); the pid
  namespace ends with its pid 1. One thread of this process reaps every slirp4netns (``_Reaper``);
- it joins the run's ``memory``, ``pids`` and ``cpu`` groups (``_admission.enter``) while its helper
  still waits, before it execs slirp4netns: what it does for the sandbox (CPU, connection state) is
  charged to the sandbox and bounded by its limits, and the groups' sweep at the run's end kills it
  if its exit pipe did not (it runs with the sandbox, never after). Not the ``freezer`` group: a
  live sandbox's sync freezes that, and the network would stall with it. Before, it ran in this
  process's groups (``cpu:/`` and the host's memory group);
- :meth:`NetworkLink.watch`: a live sandbox is told when it ends; one that dies under a live sandbox
  (a crash: libslirp 4.7 aborted under a flood of connects) ends that sandbox as a lost one
  (``LiveSandbox._network_ended``), so the run or the next one says why and gets a fresh network;
- it runs as the sandbox's unprivileged host user when there is one (``setpriv``, as bubblewrap),
  under its own seccomp filter (``--enable-seccomp``; as root also in a mount namespace of its own,
  ``--enable-sandbox``, which an unprivileged user cannot make), its output discarded.

- it starts under a seccomp filter whose listener this process holds (``_slirp_guard``): every
  ``connect`` and every datagram naming a destination waits for one thread of this process, which
  refuses (``ECONNREFUSED``: the sandbox sees "connection refused" at once) the host's own addresses
  (any a socket can bind: a service bound to ``*`` or to the node's IP, Ray's GCS, raylet and workers
  among them), loopback, unspecified and link-local ranges (169.254.169.254, the cloud's metadata
  credentials), IPv4 and IPv6, v4-mapped forms included; port 53 of the host's resolvers stays (slirp
  forwards the sandbox's DNS there). Where that supervisor cannot run (another machine than x86_64 or
  aarch64, Linux before 5.6), a backend with network is refused at its creation
  (:func:`slirp_executable`), never run with less isolation.

Still reachable, as from any process of the host: the internet and the other hosts of the host's
networks (the cluster's other nodes, a container bridge's other containers). A host firewall can drop
those by owner (slirp4netns's sockets are the sandbox's host uid's when this process is root:
``iptables -m owner --uid-owner``).

Cost: slirp4netns's start, 4-5 ms here, and the supervisor's helper (an interpreter with ctypes
loading the filter before exec'ing slirp4netns), ~15 ms more on this loaded machine, before the
command (``benchmarks/exec_bench.py --only-network``); a sandbox started ahead (the default) pays it
ahead, a live sandbox once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ._admission import enter
from ._fd_thread import FdThread
from ._slirp_guard import GUARD, helper_argv, missing, pidfd_getfd
from ._tasks import in_thread, offload

__all__ = ["RESOLVER", "SLIRP", "TAP", "NetworkLink", "network_exit", "slirp_executable"]

SLIRP = "slirp4netns"
TAP = "tap0"
RESOLVER = "10.0.2.3"  # slirp's DNS forwarder (to the host's resolvers)
_OPTIONS = ("--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp")
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace owning a namespace (linux/nsfs.h)
_WAIT = 20.0  # seconds the set-up and slirp4netns's start may take (a loaded machine)


def slirp_executable() -> str:
    """slirp4netns's path; ``RuntimeError`` naming the package when it is not installed, or saying
    why its connections cannot be supervised here (``_slirp_guard``)."""
    exe = shutil.which(SLIRP)
    if exe is None:
        raise RuntimeError(
            "a sandbox with network=True needs slirp4netns (its own network namespace reaches out "
            "through it; the host's network, its loopback services included, is never shared): "
            "install the slirp4netns package (apt-get install slirp4netns), or use network=False"
        )
    why = missing()
    if why:
        raise RuntimeError(
            f"a sandbox with network=True needs its slirp4netns kept from the host's own addresses: "
            f"{why}; use network=False"
        )
    return exe


def network_exit(code: int) -> str:
    """What a slirp4netns's exit status says (``Popen.returncode``)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"{SLIRP} was killed by {signal.Signals(-code).name}"
    return f"{SLIRP} exited with status {code}"


class NetworkLink:
    """One sandbox's slirp4netns: its exit pipe is made before bubblewrap starts (bubblewrap gets
    :attr:`sync_fd`, this object keeps the read end), :meth:`attach` starts it against the held
    sandbox process. :meth:`close` lets go of what is still this process's."""

    def __init__(self, exe: str, prefix: Sequence[str], groups: Sequence[Path] = ()) -> None:
        self.exe = exe
        self.prefix = list(prefix)  # the privilege drop, as bubblewrap's
        # The run's cgroups it joins (its freezer's left out: a live sandbox's sync would stall it).
        self.groups = [g for g in groups if "freezer" not in g.parts]
        self._exit_r: int | None
        self._exit_r, self.sync_fd = os.pipe()  # the caller hands sync_fd to bubblewrap, then closes it
        self.pid: int | None = None
        self.exit_code: int | None = None  # once it ended (``Popen.returncode``: -6 an abort)
        self._watchers: list[Callable[[int], None]] = []
        self._lock = threading.Lock()

    def watch(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(exit_code)`` once slirp4netns ended (from the reaper's thread; at once
        when it has already): a live sandbox whose network died under it is ended (``LiveSandbox``)."""
        with self._lock:
            code = self.exit_code
            if code is None:
                self._watchers.append(callback)
                return
        callback(code)

    def _ended(self, code: int) -> None:
        with self._lock:
            self.exit_code, watchers, self._watchers = code, self._watchers, []
        for callback in watchers:
            with contextlib.suppress(Exception):  # the reaper's thread goes on
                callback(code)

    def close(self) -> None:
        fd, self._exit_r = self._exit_r, None
        if fd is not None:
            os.close(fd)

    async def attach(self, child: int) -> None:
        """Give ``child``'s network namespace slirp4netns and wait until its interface is up
        (``ProcessLookupError`` when the child is gone: bubblewrap's own status says why)."""
        netns = _open_netns(child)
        ready_r = ready_w = userns = None
        ours, theirs = socket.socketpair()
        try:
            await _setup_done(child)
            userns = fcntl.ioctl(netns, _NS_GET_USERNS)
            ready_r, ready_w = os.pipe()
            exit_r = self._exit_r
            assert exit_r is not None
            options = [*_OPTIONS, "--enable-sandbox"] if not self.prefix and os.geteuid() == 0 else _OPTIONS
            argv = [
                *helper_argv(theirs.fileno()),  # the supervisor's filter, then the rest (``_slirp_guard``)
                *self.prefix,
                self.exe,
                *options,
                f"--ready-fd={ready_w}",
                f"--exit-fd={exit_r}",
                f"--userns-path=/proc/self/fd/{userns}",
                "--netns-type=path",
                f"/proc/self/fd/{netns}",
                TAP,
            ]
            proc = _launch(argv, (ready_w, exit_r, userns, netns, theirs.fileno()))
        except BaseException:
            if ready_r is not None:
                os.close(ready_r)
            ours.close()
            raise
        finally:
            for fd in (netns, userns, ready_w):
                if fd is not None:
                    os.close(fd)
            theirs.close()
            self.close()  # slirp4netns holds the read end now: the sandbox's end is its end
        self.pid = proc.pid
        _REAPER.add(proc, self)
        try:
            try:
                with ours:
                    # Before it execs slirp4netns (the helper waits for our byte): its CPU, memory
                    # and task are the run's, under the run's limits, and swept with its groups.
                    await offload(None, enter, proc.pid, self.groups, ())
                    await _supervise(ours, proc.pid)
            except BaseException:
                os.close(ready_r)
                raise
            ready = await _ready(ready_r)
        except BaseException:
            proc.kill()
            raise
        if not ready:
            proc.kill()
            code = await offload(None, proc.wait)
            raise RuntimeError(
                f"sandbox network: slirp4netns ended before the sandbox's interface was up (exit "
                f"status {code}); it needs /dev/net/tun and the right to enter the sandbox's user and "
                f"network namespaces (`{SLIRP} --configure PID {TAP}` against `unshare -rn` shows why)"
            )


class _Reaper:
    """Every slirp4netns of this process reaped as it exits: a pidfd each, polled by one thread
    (``FdThread``)."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[subprocess.Popen[bytes], NetworkLink]] = {}  # pidfd -> its process
        self._thread = FdThread("computer: slirp4netns reaper", self._exited)

    def add(self, proc: subprocess.Popen[bytes], link: NetworkLink) -> None:
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # no pidfds here (Linux < 5.3): a thread of its own
            in_thread(lambda: link._ended(proc.wait()), "reaping slirp4netns", daemon=True)
            return
        self._waiting[pidfd] = (proc, link)
        self._thread.add(pidfd)

    def _exited(self, pidfd: int, events: int) -> bool:
        proc, link = self._waiting.pop(pidfd, (None, None))
        if proc is not None and link is not None:
            code = -1
            with contextlib.suppress(Exception):  # best effort: it exited, reap it
                code = proc.wait()
            link._ended(code)
        return True


_REAPER = _Reaper()


def _launch(argv: list[str], fds: Sequence[int]) -> subprocess.Popen[bytes]:
    """Start slirp4netns (a vfork and an exec: no thread needed), its output discarded."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=tuple(fds),
        start_new_session=True,  # out of the terminal's signals; it ends with the sandbox
    )


def _capabilities(child: int) -> int:
    """``child``'s effective capabilities (``ProcessLookupError`` when it is gone or a zombie)."""
    try:
        with open(f"/proc/{child}/status", encoding="ascii", errors="replace") as f:
            status = f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessLookupError(child) from None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip()[:1] in ("Z", "X"):
        raise ProcessLookupError(child)
    return int(fields.get("CapEff", "").strip() or "-1", 16)


def _open_netns(child: int) -> int:
    """A descriptor of ``child``'s network namespace, which must not be this process's."""
    try:
        fd = os.open(f"/proc/{child}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ProcessLookupError(child) from None
    theirs, ours = os.fstat(fd), os.stat("/proc/self/ns/net")
    if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
        os.close(fd)
        raise RuntimeError("sandbox network: the sandbox process shares this process's network namespace")
    return fd


async def _setup_done(child: int) -> None:
    """Wait until bubblewrap's sandbox process ``child`` dropped its capabilities (its set-up, the
    loopback's included, is over); ``ProcessLookupError`` when it ended first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _WAIT
    pause = 0.0002
    while True:
        if _capabilities(child) == 0:  # a procfs read: it never blocks
            return
        if loop.time() > deadline:
            raise TimeoutError(f"sandbox network: bubblewrap's set-up did not end within {_WAIT:.0f} s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.001)


async def _supervise(sock: socket.socket, pid: int) -> None:
    """Take the listener the helper made in ``pid`` (its number on ``sock``) to :data:`GUARD`, then let
    it exec slirp4netns."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    line = b""
    async with asyncio.timeout(_WAIT):
        while not line.endswith(b"\n"):
            part = await loop.sock_recv(sock, 64)
            if not part:
                break
            line += part
    if not line[:1].isdigit():
        raise RuntimeError(
            "sandbox network: no seccomp listener for slirp4netns's supervisor "
            f"({'errno ' + line[1:].decode().strip() if line[:1] == b'E' else 'its helper ended'}): "
            "it needs seccomp user notifications (Linux 5.6+)"
        )
    listener = pidfd_getfd(pid, int(line))
    GUARD.add(listener)
    await loop.sock_sendall(sock, b"g")


async def _ready(fd: int) -> bool:
    """Whether slirp4netns wrote its ready byte on ``fd`` (False: it closed it first); closes ``fd``."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, 1)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not done.done():
            done.set_result(data)

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(_WAIT):
            return await done == b"1"
    except TimeoutError:
        raise TimeoutError(f"sandbox network: slirp4netns was not ready within {_WAIT:.0f} s") from None
    finally:
        loop.remove_reader(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
