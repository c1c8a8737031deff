"""What a networked sandbox's slirp4netns may connect to: a seccomp user-notification supervisor on its
own network calls (``_slirp``).

slirp4netns turns the sandbox's connections into ordinary sockets of the host's, so without this the
sandbox reached every service bound to the host's other addresses (Ray's GCS, raylet and workers
listen on ``*``: a ``ray.init(address="<node ip>:<port>")`` ran code outside any sandbox) and the
cloud's metadata service (169.254.169.254: credentials).

Decisions (security):

- slirp4netns starts through :data:`HELPER` (``python -I -S -c``, this interpreter; ~10-20 ms of its
  start, ``benchmarks/exec_bench.py --only-network``): it loads :func:`program`, a classic BPF filter
  made with ``SECCOMP_FILTER_FLAG_NEW_LISTENER``, then execs the rest (``setpriv``, then
  slirp4netns): the filter holds for both, and slirp's own ``--enable-seccomp`` filter stacks on it.
  Not ``preexec_fn`` (unsafe in a process with threads). The listener reaches this process by
  ``pidfd_getfd`` (Linux 5.6): the helper writes its number on a socket and waits for a byte before
  closing it and exec'ing. Not ``SCM_RIGHTS``: its ``sendmsg`` would wait on the very listener it
  carries. slirp4netns never holds a listener (it could answer its own notifications).
- The filter notifies ``connect``, ``sendto`` naming a destination (UDP; the filter sees the pointer),
  ``sendmsg`` and ``sendmmsg`` (the name is behind the message: the supervisor reads it, and lets a
  message without one go: slirp4netns passes its tap descriptor so); it allows every other call, and
  kills the process on a foreign architecture (x86_64's x32 numbers included).
- One thread of this process (:class:`Guard`) answers every notification: it reads the address from
  slirp4netns's memory (``/proc/PID/mem``), checks the notification is still live
  (``SECCOMP_IOCTL_NOTIF_ID_VALID``: the pid was not reused), and answers "go on"
  (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``) or ``ECONNREFUSED`` (slirp answers the sandbox's SYN with a
  reset: "connection refused" at once; ``EACCES`` would become an ICMP "network unreachable", which
  TCP retries until its timeout). "Go on" lets the kernel read the address again: slirp4netns is
  single-threaded and its memory is not the sandbox's, so nothing changes it in between.
- :func:`refused`: loopback (127.0.0.0/8, ``::1``), unspecified (0.0.0.0/8, ``::``), link-local
  (169.254.0.0/16, ``fe80::/10``: the metadata service), their v4-mapped forms (``::ffff:a.b.c.d``)
  and every address of the host's own (one a throwaway socket can bind, cached :data:`_TTL` s: a
  service bound to ``*`` listens on all of them). Exception: port 53 of the host's resolvers
  (``/etc/resolv.conf``), where slirp forwards the sandbox's DNS (10.0.2.3), which may be a local stub
  (127.0.0.53). Address families other than IPv4, IPv6, ``AF_UNSPEC`` (a datagram socket's
  disconnect) and netlink (the kernel's, per namespace) are refused: slirp never needs them.
- Anything the supervisor cannot decide (a short or unreadable address, an error) is refused;
  slirp4netns is never left waiting (a closed listener fails its calls with ``ENOSYS``).
- Where the listener cannot be made (another machine, a kernel before 5.6): a backend with network
  is refused (:func:`missing`, at its creation), never run with less isolation.

Still reachable: the internet and the other hosts of the host's networks (the cluster's, a container
bridge's other containers).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import ipaddress
import logging
import os
import platform
import re
import select
import shutil
import socket
import struct
import sys
import time

from ._fd_thread import FdThread

__all__ = ["GUARD", "HELPER", "Guard", "helper_argv", "missing", "pidfd_getfd", "program", "refused"]

log = logging.getLogger(__name__)

# Per machine: audit architecture, seccomp's and pidfd_getfd's numbers, connect, sendto, sendmsg, sendmmsg.
_MACHINES = {
    "x86_64": (0xC000003E, 317, 438, 42, 44, 46, 307),
    "aarch64": (0xC00000B7, 277, 438, 203, 206, 211, 269),
}
_X32_BIT = 0x40000000
_ALLOW, _NOTIFY, _KILL = 0x7FFF0000, 0x7FC00000, 0x80000000  # SECCOMP_RET_*
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
# SECCOMP_IOCTL_NOTIF_*: ID_VALID as Linux before 5.17 numbered it (_IOR), which later ones accept too.
_RECV, _SEND, _ID_VALID = 0xC0502100, 0xC0182101, 0x80082102
_CONTINUE = 1  # SECCOMP_USER_NOTIF_FLAG_CONTINUE
_TTL = 2.0  # seconds an address's locality and the resolvers are remembered
_MAX_MESSAGES = 1024  # sendmmsg's vlen past this: the kernel's UIO_MAXIOV, refused
_AF_NETLINK = 16

# The helper: argv = [socket fd, the filter in hex, command...].
HELPER = """
import ctypes, os, sys
fd, prog, nr = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), int(sys.argv[3])
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
fprog = P(len(prog) // 8, prog)
listener = libc.syscall(nr, 1, 8, ctypes.byref(fprog))
if listener < 0 and ctypes.get_errno() == 13:
    libc.prctl(38, 1, 0, 0, 0)
    listener = libc.syscall(nr, 1, 8, ctypes.byref(fprog))
if listener < 0:
    os.write(fd, b"E%d\\n" % ctypes.get_errno())
    os._exit(1)
os.write(fd, b"%d\\n" % listener)
if os.read(fd, 1) != b"g":
    os._exit(1)
os.close(listener)
os.close(fd)
os.execvp(sys.argv[4], sys.argv[4:])
"""


def missing() -> str:
    """Why slirp4netns's connections cannot be supervised here ("" when they can)."""
    if platform.machine() not in _MACHINES:
        return f"no seccomp supervisor for slirp4netns on {platform.machine()}"
    found = re.match(r"(\d+)\.(\d+)", platform.release())
    if found is None or (int(found[1]), int(found[2])) < (5, 6):
        return f"Linux {platform.release()} lacks pidfd_getfd (5.6) for slirp4netns's seccomp supervisor"
    return ""


@functools.cache
def program() -> bytes:
    """The filter: notify connect, sendto with a destination, sendmsg, sendmmsg; allow the rest; kill
    on another architecture or x32."""
    arch, _, _, connect, sendto, sendmsg, sendmmsg = _MACHINES[platform.machine()]
    # (op, label if true, label if false, k): a label is an instruction's index, None the next one.
    code: list[tuple[int, int | None, int | None, int]] = [
        (_LD_ABS, None, None, 4),  # 0: seccomp_data.arch
        (_JEQ, None, 14, arch),  # 1
        (_LD_ABS, None, None, 0),  # 2: seccomp_data.nr
        (_JGE, 14, None, _X32_BIT),  # 3
        (_JEQ, 13, None, connect),  # 4
        (_JEQ, 13, None, sendmsg),  # 5
        (_JEQ, 13, None, sendmmsg),  # 6
        (_JEQ, None, 12, sendto),  # 7
        (_LD_ABS, None, None, 48),  # 8: args[4] (the destination), its low half
        (_JEQ, None, 13, 0),  # 9
        (_LD_ABS, None, None, 52),  # 10: its high half
        (_JEQ, 12, 13, 0),  # 11
        (_RET, None, None, _ALLOW),  # 12
        (_RET, None, None, _NOTIFY),  # 13
        (_RET, None, None, _KILL),  # 14
    ]
    out = []
    for i, (op, true, false, k) in enumerate(code):
        jt = 0 if true is None else true - i - 1  # jumps are relative to the next instruction
        jf = 0 if false is None else false - i - 1
        out.append(struct.pack("=HBBI", op, jt, jf, k))
    return b"".join(out)


def _v4(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_ZERO_NET = ipaddress.ip_network("0.0.0.0/8")


def refused(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    port: int,
    local: object = None,
    resolvers: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset(),
) -> bool:
    """Whether slirp4netns may not reach ``address``:``port``; ``local(address)`` says whether it is
    one of the host's own (default: :func:`_is_local`)."""
    address = _v4(address)
    if port == 53 and address in resolvers:
        return False
    if address.is_loopback or address.is_unspecified or address.is_link_local:
        return True
    if isinstance(address, ipaddress.IPv4Address) and address in _ZERO_NET:
        return True
    is_local = local if callable(local) else _is_local
    return bool(is_local(address))


_local_cache: dict[object, tuple[float, bool]] = {}


def _is_local(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is the host's own: a socket can bind it (cached :data:`_TTL` s). Any other
    error than "not available" counts as local (refused)."""
    now = time.monotonic()
    hit = _local_cache.get(address)
    if hit is not None and hit[0] > now:
        return hit[1]
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
        local = True
    except OSError as exc:
        local = exc.errno != errno.EADDRNOTAVAIL
    if len(_local_cache) > 4096:
        _local_cache.clear()
    _local_cache[address] = (now + _TTL, local)
    return local


_resolver_cache: list[tuple[float, frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]]] = []


def _resolvers() -> frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    now = time.monotonic()
    if _resolver_cache and _resolver_cache[0][0] > now:
        return _resolver_cache[0][1]
    found = set()
    with contextlib.suppress(OSError):
        with open("/etc/resolv.conf", encoding="utf-8", errors="replace") as f:
            for line in f:
                words = line.split()
                if len(words) >= 2 and words[0] == "nameserver":
                    with contextlib.suppress(ValueError):
                        found.add(_v4(ipaddress.ip_address(words[1].split("%")[0])))
    result = frozenset(found)
    _resolver_cache[:] = [(now + _TTL, result)]
    return result


def sockaddr_refused(raw: bytes) -> bool:
    """Whether a ``struct sockaddr`` as slirp4netns passed it names a destination it may not reach."""
    if len(raw) < 2:
        return True
    family = struct.unpack_from("=H", raw)[0]
    if family in (socket.AF_UNSPEC, _AF_NETLINK):
        return False
    if family == socket.AF_INET and len(raw) >= 16:
        port = struct.unpack_from("!H", raw, 2)[0]
        return refused(ipaddress.IPv4Address(raw[4:8]), port, resolvers=_resolvers())
    if family == socket.AF_INET6 and len(raw) >= 24:
        port = struct.unpack_from("!H", raw, 2)[0]
        return refused(ipaddress.IPv6Address(raw[8:24]), port, resolvers=_resolvers())
    return True


def pidfd_getfd(pid: int, fd: int) -> int:
    """A copy of process ``pid``'s descriptor ``fd`` (close-on-exec)."""
    nr = _MACHINES[platform.machine()][2]
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        got = libc.syscall(nr, pidfd, fd, 0)
        if got < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"pidfd_getfd: {os.strerror(code)}")
        return int(got)
    finally:
        os.close(pidfd)


def helper_argv(sock: int) -> list[str]:
    """The helper's command line before the command it execs."""
    nr = _MACHINES[platform.machine()][1]
    python = sys.executable or shutil.which("python3") or "python3"  # empty when embedded
    return [python, "-I", "-S", "-c", HELPER, str(sock), program().hex(), str(nr)]


class Guard:
    """Every slirp4netns's notifications answered by one thread (its listener fds, polled:
    ``FdThread``)."""

    def __init__(self) -> None:
        self._thread = FdThread("computer: slirp4netns supervisor", self._ready)

    def add(self, listener: int) -> None:
        """Supervise ``listener`` (this object closes it once its process ended)."""
        self._thread.add(listener)

    @staticmethod
    def _ready(listener: int, events: int) -> bool:
        if events & select.POLLIN:
            _answer(
                listener
            )  # an error is logged by the thread, which goes on: every slirp4netns waits on it
            return False
        return True  # POLLHUP: every process of its filter ended


def _answer(listener: int) -> None:
    notif = bytearray(80)
    try:
        fcntl_ioctl(listener, _RECV, notif)
    except OSError:  # ENOENT: its process was interrupted or died meanwhile
        return
    ident, pid = struct.unpack_from("=QI", notif)
    nr = struct.unpack_from("=i", notif, 16)[0]
    args = struct.unpack_from("=6Q", notif, 32)
    try:
        deny = _decide(pid, nr, args)
    except Exception:  # undecided: refused
        log.debug("slirp4netns supervisor: refusing an undecided call", exc_info=True)
        deny = True
    try:  # after the read: the pid was still that process's
        fcntl_ioctl(listener, _ID_VALID, bytearray(struct.pack("=Q", ident)))
    except OSError as exc:
        if exc.errno == errno.ENOENT:  # it ended meanwhile (its pid may be another's now)
            return
        deny = True
    response = struct.pack("=QqiI", ident, 0, -errno.ECONNREFUSED if deny else 0, 0 if deny else _CONTINUE)
    with contextlib.suppress(OSError):  # ENOENT: it ended meanwhile
        fcntl_ioctl(listener, _SEND, bytearray(response))


def fcntl_ioctl(fd: int, request: int, buffer: bytearray) -> None:
    fcntl.ioctl(fd, request, buffer, True)


def _decide(pid: int, nr: int, args: tuple[int, ...]) -> bool:
    """Whether to refuse call ``nr`` of ``pid`` with ``args`` (reads its memory)."""
    _, _, _, connect, sendto, sendmsg, sendmmsg = _MACHINES[platform.machine()]
    mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:

        def read(address: int, size: int) -> bytes:
            data = os.pread(mem, size, address)
            if len(data) != size:
                raise OSError(errno.EFAULT, "short read")
            return data

        def named(address: int, size: int) -> bool:
            return sockaddr_refused(read(address, min(size, 128)))

        if nr == connect:
            return named(args[1], args[2] & 0xFFFFFFFF)
        if nr == sendto:
            return args[4] != 0 and named(args[4], args[5] & 0xFFFFFFFF)
        if nr in (sendmsg, sendmmsg):
            count = 1 if nr == sendmsg else args[2] & 0xFFFFFFFF
            if count > _MAX_MESSAGES:
                return True
            stride = 56 if nr == sendmsg else 64  # struct msghdr, struct mmsghdr
            messages = read(args[1], stride * count) if count else b""
            for i in range(count):
                name, size = struct.unpack_from("=QI", messages, i * stride)
                if name and named(name, size):
                    return True
            return False
        return True
    finally:
        os.close(mem)


GUARD = Guard()
