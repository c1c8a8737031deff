"""A networked sandbox's slirp4netns reaches none of the host's own addresses (a service bound to ``*``
or to the node's IP: Ray's GCS and raylet), nor link-local ones (the cloud's metadata service), by TCP
or UDP: refused at once; another host of the network stays reachable (``_slirp_guard``).

The host side never touches a real network: it runs in a private network namespace (``unshare
--net``) whose veth pair (10.99.0.1, "the node's IP") leads to a second private namespace, "another
host" (10.99.0.2). The decision itself is tested over address forms."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import computer
from computer.runtime._bwrap import bwrap_works
from computer.runtime._slirp_guard import refused, sockaddr_refused

_NODE = ipaddress.ip_address("10.99.0.1")


def _local(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address == _NODE


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "0.0.0.0",
        "0.1.2.3",
        "169.254.169.254",
        "::1",
        "::",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:0.0.0.0",
        "10.99.0.1",
        "::ffff:10.99.0.1",
    ],
)
def test_loopback_unspecified_link_local_and_the_hosts_own_addresses_are_refused(address: str) -> None:
    assert refused(ipaddress.ip_address(address), 443, _local)


@pytest.mark.parametrize("address", ["10.99.0.2", "192.0.2.7", "2001:db8::1", "::ffff:192.0.2.7"])
def test_other_hosts_addresses_are_not_refused(address: str) -> None:
    assert not refused(ipaddress.ip_address(address), 443, _local)


def test_only_port_53_of_a_local_resolver_is_let_through() -> None:
    stub = ipaddress.ip_address("127.0.0.53")
    assert not refused(stub, 53, _local, frozenset({stub}))
    assert refused(stub, 6379, _local, frozenset({stub}))
    assert refused(ipaddress.ip_address("127.0.0.1"), 53, _local, frozenset({stub}))


def test_the_hosts_own_addresses_are_those_a_socket_can_bind() -> None:
    # A bind, never a packet: loopback is the host's, a documentation address (TEST-NET-1) is not.
    assert refused(ipaddress.ip_address("192.0.2.1"), 80) is False
    from computer.runtime._slirp_guard import _is_local

    assert _is_local(ipaddress.ip_address("127.0.0.1"))
    assert not _is_local(ipaddress.ip_address("192.0.2.1"))


def _v4(address: str, port: int) -> bytes:
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(address) + bytes(8)


def _v6(address: str, port: int) -> bytes:
    return (
        struct.pack("=H", socket.AF_INET6)
        + struct.pack("!HI", port, 0)
        + socket.inet_pton(socket.AF_INET6, address)
        + bytes(4)
    )


def test_sockaddrs_as_slirp_passes_them() -> None:
    assert sockaddr_refused(_v4("127.0.0.1", 80))
    assert sockaddr_refused(_v6("::ffff:127.0.0.1", 80))
    assert sockaddr_refused(_v6("fe80::1", 80))
    assert not sockaddr_refused(_v4("192.0.2.7", 80))
    assert not sockaddr_refused(_v6("2001:db8::1", 80))
    assert sockaddr_refused(_v4("192.0.2.7", 80)[:8])  # too short to say: refused
    assert sockaddr_refused(b"\x01\x00/run/docker.sock")  # AF_UNIX: slirp never needs it
    assert not sockaddr_refused(struct.pack("=H", socket.AF_UNSPEC) + bytes(14))  # a UDP disconnect


_PEER = """
import socket, sys
sys.stdin.readline()  # its end of the veth pair is here now
import subprocess
for args in (["addr", "add", "10.99.0.2/24", "dev", "v1"], ["link", "set", "v1", "up"], ["link", "set", "lo", "up"]):
    subprocess.run([sys.argv[1], *args], check=True)
server = socket.create_server(("10.99.0.2", 0))
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    print("accepted", flush=True)
    conn.close()
"""

_PROBE = r"""
import socket, sys
node, meta_port, peer, peer_port, udp_port = sys.argv[1:6]
def tcp(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=8).close()
        return "open"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        return f"error {exc.errno}"
print("node", tcp(node, meta_port))
print("metadata", tcp("169.254.169.254", 80))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for send in (lambda: u.sendto(b"to", (node, int(udp_port))), lambda: u.sendmsg([b"msg"], [], 0, (node, int(udp_port)))):
    try:
        send()
    except OSError:
        pass
print("peer", tcp(peer, peer_port))
"""

_HOST = """
import asyncio, json, os, shlex, socket, subprocess, sys, threading
import computer
from computer.runtime import ShellBackend

IP = sys.argv[1]
def ip(*args):
    subprocess.run([IP, *args], check=True)

ip("link", "set", "lo", "up")
peer = subprocess.Popen(["unshare", "--net", sys.executable, "-c", sys.argv[2], IP],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
import atexit
atexit.register(peer.kill)
ip("link", "add", "v0", "type", "veth", "peer", "name", "v1")
ip("link", "set", "v1", "netns", str(peer.pid))
ip("addr", "add", "10.99.0.1/24", "dev", "v0")  # the node's IP, on its network interface
ip("link", "set", "v0", "up")
peer.stdin.write("go\\n"); peer.stdin.flush()
peer_port = int(peer.stdout.readline())
accepted = []
threading.Thread(target=lambda: [accepted.append(line) for line in peer.stdout], daemon=True).start()

node = socket.create_server(("10.99.0.1", 0))
node_port = node.getsockname()[1]
node_hits = []
def accept():
    while True:
        conn, _ = node.accept()
        node_hits.append(1)
        conn.close()
threading.Thread(target=accept, daemon=True).start()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("10.99.0.1", 0))
udp.setblocking(False)

async def main():
    out = {}
    for mode, live, unprivileged in (("per-call", False, False), ("live", True, False), ("as another uid", False, True)):
        backend = ShellBackend(network=True, live=live, unprivileged=unprivileged)  # the last: setpriv
        ws = computer.Workspace(backends=[backend])
        try:
            await ws.fs.mkdir("/workspace")
            await ws.fs.write_file("/workspace/probe.py", sys.argv[3].encode())
            args = ["10.99.0.1", node_port, "10.99.0.2", peer_port, udp.getsockname()[1]]
            cmd = "timeout 60 python3 probe.py " + " ".join(map(str, args))
            result = await (await ws.runtime.exec(cmd)).result()
        finally:
            await ws.close()
        datagrams = []
        while True:
            try:
                datagrams.append(udp.recv(64).decode())
            except BlockingIOError:
                break
        lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
        out[mode] = {
            **lines, "node_accepted": len(node_hits), "datagrams": datagrams,
            "peer_accepted": len(accepted), "stderr": result.stderr[-2000:],
        }
        node_hits.clear(); accepted.clear()
    print(json.dumps(out))

asyncio.run(main())
"""


def _private_netns_usable() -> str:
    if os.geteuid() != 0:
        return "needs root (a private network namespace)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare and ip"
    if not bwrap_works():
        return "needs bubblewrap"
    if subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30).returncode != 0:
        return "unshare --net does not work here"
    return ""


def test_a_networked_sandbox_reaches_no_address_of_its_host_nor_link_local_but_other_hosts() -> None:
    why = _private_netns_usable()
    if why:
        pytest.skip(why)
    ip = shutil.which("ip")
    assert ip is not None
    run = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", _HOST, ip, _PEER, _PROBE],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(Path(computer.__file__).parent.parent)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.splitlines()[-1])
    assert len(results) == 3, results
    for mode, seen in results.items():
        # Another host of the network: reached (the supervisor lets it go on).
        assert seen["peer"] == "open" and seen["peer_accepted"] == 1, (mode, seen)
        # The node's own address (a service on ``*`` or the node IP): refused, never accepted.
        assert seen["node"] == "refused" and seen["node_accepted"] == 0, (mode, seen)
        # The metadata service: refused at once (a reset), not left to time out.
        assert seen["metadata"] == "refused", (mode, seen)
        # UDP to the node's address, by sendto and sendmsg: nothing arrived (the peer's later
        # connection went through the same slirp4netns after them).
        assert seen["datagrams"] == [], (mode, seen)


def test_where_the_supervisor_cannot_run_a_networked_backend_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Never slirp4netns unsupervised: another machine or a kernel without pidfd_getfd is refused at
    the backend's creation, saying why."""
    from computer.runtime import _slirp, _slirp_guard

    monkeypatch.setattr(_slirp_guard.platform, "release", lambda: "5.4.0-150-generic")
    assert "5.6" in _slirp_guard.missing()
    monkeypatch.setattr(_slirp_guard.platform, "machine", lambda: "riscv64")
    assert "riscv64" in _slirp_guard.missing()
    with pytest.raises(RuntimeError, match="kept from the host's own addresses: no seccomp supervisor"):
        _slirp.slirp_executable()
