"""Attacks of a hostile program on the host's shared kernel budgets and on the owner (session 64's hunt).

Socket buffers: see ``test_one_sandbox_holds_at_most_its_cap_of_socket_buffers``.
"""

from __future__ import annotations

import pytest

import computer
from computer.runtime import PythonBackend
from computer.runtime._cgroups import cgroup_writable, socket_cap, socket_capped
from computer.runtime._limits import SandboxLimits

# Fills the send queues of ``CONNECTIONS`` connections of the sandbox's own loopback (nothing reads
# them), then sends datagrams to 1,000 UDP sockets that never read: what TCP queued (bytes ``send``
# took) and what UDP holds (the host's count of UDP pages, which is the whole host's: its growth).
CONNECTIONS = 100
_SOCKETS = f"""
import socket

def udp_pages():
    for line in open("/proc/net/sockstat"):
        if line.startswith("UDP:"):
            return int(line.split()[-1])

server = socket.create_server(("127.0.0.1", 0), backlog={CONNECTIONS})
held, queued = [], 0
for _ in range({CONNECTIONS}):
    sender = socket.create_connection(server.getsockname())
    receiver, _ = server.accept()
    sender.setblocking(False)
    held += [sender, receiver]
    for _ in range(1000):  # at most ~64 MB a connection; the kernel's windows stop it far sooner
        try:
            queued += sender.send(b"x" * 65536)
        except BlockingIOError:
            break
before = udp_pages()
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sender.setblocking(False)
for _ in range(1000):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    held.append(receiver)
    for _ in range(8):  # 480 KB a socket: past its receive buffer (212 KB); a full one drops the rest
        try:
            sender.sendto(b"x" * 60000, receiver.getsockname())
        except (BlockingIOError, OSError):
            break
print("tcp", queued, "udp", (udp_pages() - before) * 4096)
"""


@pytest.mark.skipif(
    not (cgroup_writable("memory") and socket_capped()), reason="a cgroup v1 memory group with a TCP limit"
)
@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_one_sandbox_holds_at_most_its_cap_of_socket_buffers(live: bool, record_property) -> None:  # type: ignore[no-untyped-def]
    """Socket buffers are one host-wide budget (``tcp_mem``, ``udp_mem``) that cgroup v1 charges to no
    group unless it has a TCP limit: 100 connections of a 1 GiB run's own loopback held 372 MB unread
    (its group said 11 MB, the host's available memory fell 300 MB), 1,000 UDP sockets 175 MB; a few
    runs held the host's every socket buffer (Ray's, every workspace's). Each run's memory group now
    caps them (``_cgroups.socket_cap``: 64 MiB here)."""
    cap = socket_cap(SandboxLimits(memory_mb=256))
    async with computer.Workspace(backends=[PythonBackend(live=live, memory_mb=256)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        result = await (await workspace.runtime.exec(_SOCKETS, backend="python", timeout=120)).result()
        [info] = workspace.runtime.backends()
    assert result.status == "completed", result
    _, tcp, _, udp = result.stdout.split()
    record_property("tcp_queued_mb", int(tcp) >> 20)
    record_property("udp_held_mb", int(udp) >> 20)
    assert int(tcp) < 1.5 * cap, result.stdout  # before: 372 MB for a cap of 64 MiB
    assert int(udp) < 1.5 * cap, result.stdout  # the host's count: others' sockets move it a little
    assert f"socket buffers {cap >> 20} MiB" in info.isolation
