"""Attacks of a hostile program on the host's shared kernel budgets and on the owner (session 64's hunt).

Socket buffers: see ``test_one_sandbox_holds_at_most_its_cap_of_socket_buffers``.

A file the pull could not read for a moment (a lease): see
``test_a_file_the_pull_could_not_read_for_a_moment_is_read_at_the_next_sync``.

Huge pages: see ``test_no_sandbox_takes_the_hosts_huge_pages``.

Left-out paths by the thousand in a run's result: see
``test_a_flood_of_paths_the_workspace_cannot_hold_is_reported_by_directory``.
"""

from __future__ import annotations

import errno
import json
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import computer
from computer.runtime import MirrorDir, MirrorFile, PythonBackend, ShellBackend, SyncPush, _reported, _seccomp
from computer.runtime._beneath import BeneathReader
from computer.runtime._bwrap import bwrap_works
from computer.runtime._cgroups import cgroup_writable, socket_cap, socket_capped
from computer.runtime._limits import SandboxLimits
from computer.runtime._mirror import Mirror
from computer.runtime._mirror_base import NOT_UTF8, SPECIAL
from computer.runtime._reported import REPORTED
from computer.storage import CHUNK_SIZE
from computer.tools.exec import exec_result_dict

# Fills the send queues of ``CONNECTIONS`` connections of the sandbox's own loopback (nothing reads
# them), then sends datagrams to ``DATAGRAM_SOCKETS`` UDP sockets that never read: what TCP queued
# (bytes ``send`` took) and what UDP holds (the host's count of UDP pages, which is the whole host's:
# its growth). 900 descriptors in all: within one process's share of the descriptor budget
# (``_fd_budget``, 1,024 here); 700 full receive buffers (~212 KB each) are past 1.5 times the cap.
CONNECTIONS = 100
DATAGRAM_SOCKETS = 700
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
for _ in range({DATAGRAM_SOCKETS}):
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
async def test_one_sandbox_holds_at_most_its_cap_of_socket_buffers(live: bool, record_property: Any) -> None:
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


# A background process of a live sandbox writes ``f`` under a write lease (``F_SETLEASE``: the file's
# owner may take one, and ``fs.leases-enable`` is on by default), so the pull's non-blocking open of
# ``f`` fails ``EAGAIN`` while the kernel asks the holder to let go (``SIGIO``); the holder then lets
# go, keeping ``f`` open: nothing more happens to ``f`` that the pull's watch would see.
_LEASED = r"""
import fcntl, os, signal, time
F_SETLEASE = 1024
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.fcntl(fd, F_SETLEASE, fcntl.F_WRLCK)
signal.signal(signal.SIGIO, lambda *_: fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK))
os.write(fd, b"written under a lease")
print("leased", flush=True)
time.sleep(60)
"""


async def test_a_file_the_pull_could_not_read_for_a_moment_is_read_at_the_next_sync() -> None:
    """The pull took any failure to read a file for the file changed into something else meanwhile,
    and adopted its entry as synced: a file under a lease (``EAGAIN``), or read when the owner or the
    host was out of descriptors (``EMFILE``, ``ENFILE``), stayed out of the workspace, unsaid, until
    the program changed it again (never, for one it had finished). Such a file is now read again by
    the next sync (``Mirror.unread``)."""
    async with computer.Workspace(backends=[ShellBackend(live=True)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        await workspace.fs.write_file("/workspace/h.py", _LEASED.encode())
        started = await workspace.runtime.exec(
            "python3 h.py > out 2>&1 & for i in $(seq 50); do [ -s out ] && break; sleep 0.1; done; cat out",
            backend="shell",
            timeout=60,
        )
        first = await started.result()
        assert first.stdout == "leased\n", first
        later = await (await workspace.runtime.exec("true", backend="shell")).result()
        assert later.status == "completed", later
        assert await workspace.fs.read_file("/workspace/f") == b"written under a lease", later


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.EAGAIN])
@pytest.mark.parametrize("size", [3, 3 * CHUNK_SIZE], ids=["small", "large"])
def test_a_file_read_when_descriptors_ran_out_is_read_by_the_next_pull(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, size: int
) -> None:
    """The same for the owner's or the host's descriptors run out as the pull opens a file (one
    program holding the host's open files makes every other workspace's pull fail so): the file is
    left out of that pull, never taken for synced."""
    mirror = Mirror(tmp_path / "m", "/workspace")
    mirror.apply(
        SyncPush(5, "/workspace", True, [MirrorFile("/workspace/a", b"a")], [MirrorDir("/workspace/d")])
    )
    mirror.arm()
    (mirror.directory / "d/f").write_bytes(b"x" * size)
    opened = BeneathReader._open_regular

    def out_of_descriptors(self: BeneathReader, rel: str) -> object:
        raise OSError(code, os.strerror(code), rel)

    monkeypatch.setattr(BeneathReader, "_open_regular", out_of_descriptors)
    plan, now = mirror.plan()
    assert [rel for rel, _ in plan.files] == ["d/f"]
    assert [f.path for page in mirror.pages(plan, None) for f in page.files] == []
    mirror.settle(now, 6, ())
    monkeypatch.setattr(BeneathReader, "_open_regular", opened)
    plan, now = mirror.plan()
    pages = list(mirror.pages(plan, None))
    assert [(f.path, f.length) for page in pages for f in page.files] == [("/workspace/d/f", size)]


# Maps huge pages every way an unprivileged program can (an anonymous mapping, a hugetlb memfd mapped,
# a SysV segment); what each answered and the host's free huge pages after. Ordinary and transparent
# huge page mappings still work.
_HUGE = r"""
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
def free():
    return next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("HugePages_Free"))
held, said = [], []
try:
    m = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)
    m[0] = m[2 << 20] = 1
    held.append(m)
    said.append("mapped")
except OSError as exc:
    said.append(errno.errorcode[exc.errno])
fd = libc.memfd_create(b"huge", 4)
if fd < 0:
    said.append(errno.errorcode[ctypes.get_errno()])
else:
    try:
        os.ftruncate(fd, 2 << 20)
        m = mmap.mmap(fd, 2 << 20)
        m[0] = 1
        held.append(m)
        said.append("mapped")
    except OSError as exc:
        said.append("memfd " + errno.errorcode[exc.errno])
shm = libc.shmget(0, 2 << 20, 0o1000 | 0o600 | 0x800)  # IPC_PRIVATE, IPC_CREAT, SHM_HUGETLB
said.append(errno.errorcode[ctypes.get_errno()] if shm < 0 else "segment")
plain = mmap.mmap(-1, 4 << 20)
plain.madvise(mmap.MADV_HUGEPAGE)
plain[0] = 1
print(*said, "free", free())
"""


def _huge_pages_free() -> int:
    return next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("HugePages_Free"))


@pytest.fixture
def reserved_huge_pages() -> Iterator[int]:
    """Two huge pages reserved where the host keeps none (4 MiB, given back), or the host's own."""
    knob = Path("/proc/sys/vm/nr_hugepages")
    before = int(knob.read_text())
    if before == 0:
        try:
            knob.write_text("2")
        except OSError:
            pytest.skip("this host keeps no huge pages and cannot reserve any here")
    try:
        if _huge_pages_free() == 0:
            pytest.skip("no free huge page on this host")
        yield _huge_pages_free()
    finally:
        if before == 0:
            knob.write_text("0")


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not bwrap_works() or _seccomp.compiled().program is None,
    reason="bubblewrap and libseccomp on x86_64 (its flags' values)",
)
@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_no_sandbox_takes_the_hosts_huge_pages(live: bool, reserved_huge_pages: int) -> None:
    """The host's huge page pool is charged to no cgroup v1 memory group: a sandbox's
    ``mmap(MAP_HUGETLB)`` took all of it (2 of 2 pages), outside its group, from whatever the host
    reserved them for. Refused as on a host that keeps none (``_seccomp.HUGE_PAGE_RULES``)."""
    async with computer.Workspace(backends=[PythonBackend(live=live)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        result = await (await workspace.runtime.exec(_HUGE, backend="python")).result()
        [info] = workspace.runtime.backends()
    assert result.status == "completed", result
    assert result.stdout.split() == ["ENOMEM", "EINVAL", "ENOMEM", "free", str(reserved_huge_pages)], result
    assert "huge pages (hugetlb) refused" in info.isolation


# Makes ``n`` files whose names are not UTF-8 (the workspace cannot hold them: each is left out, with
# its reason) in two directories, and a FIFO (another reason).
_UNHOLDABLE = """
import os
for i in range({n}):
    os.makedirs(b"d%d" % (i % 2), exist_ok=True)
    open(b"d%d/bad\\xff%d" % (i % 2, i), "w").close()
os.mkfifo("d0/fifo")
"""


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_a_flood_of_paths_the_workspace_cannot_hold_is_reported_by_directory(live: bool) -> None:
    """Each path the sync left out was a line of the run's result, the tool's reply and the journal
    record: 20,000 names that are not UTF-8 made a tool result of 2.7 MB and a journal record of 2.8 MB
    (a million fit under the entry cap). Past ``REPORTED`` the result names the directories they are
    below, with their count and reasons (``_reported``)."""
    many = REPORTED + 500
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        started = await workspace.runtime.exec(
            f"python3 -c '{_UNHOLDABLE.format(n=many)}'", backend="shell", timeout=120
        )
        result = await started.result()
        record = await workspace.fs.stat(f"/.computer/exec/{result.id}.json")
    assert result.status == "completed", result
    assert result.skipped == ["/workspace/d0", "/workspace/d1"], result.skipped
    reasons = result.skipped_reasons
    assert reasons["/workspace/d1"] == f"{many // 2} paths below it left out of the sync: {NOT_UTF8}"
    assert reasons["/workspace/d0"].startswith(f"{many // 2 + 1} paths below it left out of the sync (")
    assert (
        f"{many // 2}: {NOT_UTF8}" in reasons["/workspace/d0"] and f"1: {SPECIAL}" in reasons["/workspace/d0"]
    )
    assert len(json.dumps(exec_result_dict(result))) < 2000 and record.size < 4000  # before: ~200 KB each


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.lists(st.sampled_from("abc"), min_size=1, max_size=6).map(lambda parts: "/" + "/".join(parts)),
        st.sampled_from(["x", "y", "z", "w"]),
        max_size=60,
    ),
    st.integers(1, 8),
)
def test_what_a_result_reports_accounts_for_every_left_out_path(reasons: dict[str, str], bound: int) -> None:
    """At most the bound of lines; each left-out path is counted once, by the nearest line directory
    above it, and the lines' counts add up to them all."""
    with mock.patch.object(_reported, "REPORTED", bound):
        lines = _reported.reported(reasons)
    assert len(lines) <= bound
    if len(reasons) <= bound:
        assert lines == reasons
        return
    counted: dict[str, int] = dict.fromkeys(lines, 0)
    for path in reasons:
        above = [d for d in lines if d == "/" or path.startswith(d + "/")]
        counted[max(above, key=len)] += 1
    assert {d: int(line.split()[0]) for d, line in lines.items()} == counted


def test_a_directory_line_counts_its_paths_in_words() -> None:
    """One path below a listed directory is "1 path", not "1 paths" (a chain of directories, each
    holding one refused level, gives many such lines: ``tests/fidelity/test_deep_paths.py``)."""
    chain = {"/w/" + "d/" * n + "x": "why" for n in range(REPORTED + 1)}
    lines = _reported.reported(chain)
    assert len(lines) <= REPORTED
    assert "1 path below it left out of the sync: why" in lines.values(), lines
    assert not any(line.startswith("1 paths") for line in lines.values())
