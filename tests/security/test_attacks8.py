"""Attacks on the network surfaces, the seccomp filter and the owner's reads (session 66's hunt).

The MCP server over HTTP (``serve_http``): the SDK refuses a body over its cap with a ``413``, but the
request-id gate in front of it read the whole body first, so a huge or endless body grew the server's
memory without end (a 256 MiB body peaked it at 856 MB) and a body trickled, or never sent after its
``Content-Length``, held its socket and request for good.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import select
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import computer

_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\n"
)


@asynccontextmanager
async def _mcp_http(**options: Any) -> AsyncIterator[int]:
    """An MCP server over HTTP on a free loopback port (yields the port once it accepts)."""
    pytest.importorskip("mcp")
    from computer.tools.mcp import serve_http

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with computer.Workspace() as ws:
        server = asyncio.create_task(serve_http(ws, "127.0.0.1", port, **options))
        try:
            for _ in range(300):  # bounded: the server binds within 30 s
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.1)
                    continue
                writer.close()
                break
            yield port
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)


def _exchange(port: int, head: bytes, chunk: bytes = b"", most: int = 0) -> tuple[int, dict[str, Any], int]:
    """Send ``head``, then ``chunk`` up to ``most`` times while no answer came; the status and JSON body
    of the answer, after which the server must close the connection, and the chunks sent (30 s bounds).
    A plain socket: the server closes with bytes of ours unread, so its reset follows the answer, and
    only a socket read (not asyncio's streams) gives the answer before the reset."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head)
        received, sent = b"", 0
        while True:
            writing = [conn] if sent < most else []
            readable, writable, _ = select.select([conn], writing, [], 30)
            assert readable or writable, f"no answer within 30 s ({sent} chunks sent)"
            if readable:
                try:
                    data = conn.recv(1 << 16)
                except ConnectionResetError:
                    data = b""
                if not data:
                    break
                received += data
            elif writable:
                try:
                    conn.send(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    most = sent
                    continue
                sent += 1
    answer, _, body = received.partition(b"\r\n\r\n")
    return int(answer.split(b" ", 2)[1]), json.loads(body), sent


async def test_an_endless_mcp_http_body_is_refused_once_past_the_cap() -> None:
    """A chunked body with no end: ``413`` naming the cap once 64 KiB arrived, long before the client
    has sent its 64 MiB (before: read on to its end, every byte of it held, then the SDK's ``413``)."""
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"[" * (1 << 16))
    async with _mcp_http(max_body=64 * 1024) as port:
        head = _HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
        status, body, sent = await asyncio.to_thread(_exchange, port, head, chunk, 1024)  # 64 MiB at most
    assert status == 413, (status, body)
    assert "65536-byte" in body["error"]["message"] and body["id"] is None, body
    assert sent < 512, f"answered only after {sent} chunks of 64 KiB"


async def test_a_declared_mcp_http_body_over_the_cap_is_refused_before_it_is_sent() -> None:
    async with _mcp_http(max_body=64 * 1024) as port:
        head = _HEAD + b"Content-Length: 1000000000000\r\n\r\n"
        status, body, _ = await asyncio.to_thread(_exchange, port, head)
    assert status == 413, body
    assert "1000000000000 bytes" in body["error"]["message"], body


async def test_a_trickled_mcp_http_body_is_cut_off_at_its_deadline() -> None:
    """A body that never arrives whole (10 of its 100 bytes sent): ``408`` after ``body_timeout``, the
    connection closed (before: held for good, as long as the client liked)."""
    async with _mcp_http(body_timeout=0.5) as port:
        head = _HEAD + b"Content-Length: 100\r\n\r\n" + b'{"jsonrpc"'
        status, body, _ = await asyncio.to_thread(_exchange, port, head)
    assert status == 408, body
    assert "10 bytes had arrived" in body["error"]["message"], body


async def test_a_body_within_the_cap_still_reaches_the_tools() -> None:
    """The gate passes a whole body on: ``initialize`` over raw HTTP is answered."""
    payload = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", '
        b'"capabilities": {}, "clientInfo": {"name": "attack8", "version": "0"}}}'
    )
    async with _mcp_http(max_body=64 * 1024) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = _HEAD.replace(b"Host: 127.0.0.1", b"Host: 127.0.0.1:%d" % port)
        writer.write(head + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        response = await asyncio.wait_for(reader.read(), 30)
        writer.close()
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    assert b'"serverInfo"' in response, response[:400]


# memfd_secret(0) (447 on x86_64 and aarch64 alike) and, where the kernel has ia32 emulation, through
# the i386 ABI (``int 0x80``, 447 too): a descriptor without the filter on this host (Linux 6.18).
_MEMFD_SECRET = """
import ctypes, mmap, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(447, 0)
print("native", "fd" if fd >= 0 else os.strerror(ctypes.get_errno()))
code = '''
import ctypes, mmap
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes.fromhex("b8bf010000" "31db" "31c9" "31d2" "cd80" "c3"))
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))())
'''
if sys.platform == "linux" and os.uname().machine == "x86_64":
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    print("i386", run.stdout.strip() if run.returncode == 0 else f"signal {-run.returncode}")
"""


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_memfd_secret_is_absent_in_every_sandbox(live: bool) -> None:
    """Each page of a secret memfd is taken out of the kernel's direct map, splitting the huge pages
    that map the host's memory for good (200 pages of one program: 67 2 MiB and 6 1 GiB mappings split,
    none merged back). Refused as a kernel without it refuses it (``ENOSYS``), the i386 ABI too."""
    from computer.runtime import PythonBackend, ShellBackend

    async with computer.Workspace(backends=[ShellBackend(live=live), PythonBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        shell = await (await ws.runtime.exec(f"python3 - <<'EOF'\n{_MEMFD_SECRET}\nEOF")).result()
        python = await (await ws.runtime.exec(_MEMFD_SECRET, backend="python")).result()
        isolation = [info.isolation for info in ws.runtime.backends()]
    for result in (shell, python):
        assert result.status == "completed", result
        lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
        assert lines["native"] == os.strerror(errno.ENOSYS), result  # before: "fd"
        assert lines.get("i386", "signal 11") in ("signal 11", str(-errno.ENOSYS)), result
    assert all("memfd_secret absent (ENOSYS)" in text for text in isolation), isolation


# 30,000 POSIX locks (200 files, 150 one-byte ranges each: a lock costs no descriptor), taken on the
# first CPU this sandbox may use: the kernel lists each CPU's locks newest first, CPUs in order, so they
# come before every lock taken earlier in ``/proc/locks`` (~1.7 MB).
_LOCK_FLOOD = """
import fcntl, os, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
os.makedirs("flood", exist_ok=True)
files = [open(f"flood/{i}", "w") for i in range(200)]
for f in files:
    for j in range(150):
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * j)
open("flooded", "w").close()
deadline = time.monotonic() + 120
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.05)
"""
_WAIT_FOR = "for i in $(seq 600); do [ -e {0} ] && break; sleep 0.1; done; [ -e {0} ] && echo {0}"


async def test_a_lock_stays_on_its_file_while_a_program_floods_the_host_s_lock_list() -> None:
    """A background process holds ``flock`` on ``lock`` (opened for reading only, as ``flock(1)``
    does); then a program takes 30,000 locks, listed ahead of it in ``/proc/locks``. The workspace
    writes ``lock``: the next call must find it still locked, the same inode (before: the owner read
    the first MiB of ``/proc/locks`` only, did not see the lock, replaced the file, and ``flock -n``
    took a lock of its own at once; any program of the host, another workspace's too, could do this)."""
    from computer.runtime import ShellBackend

    async with computer.Workspace(backends=[ShellBackend(live=True)]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/lock", "a lock file\n")  # not empty: its holder is not at its end
        await ws.fs.write_file("/workspace/flood.py", _LOCK_FLOOD)
        started = await (
            await ws.runtime.exec(
                "cd /workspace; (exec 9<lock; flock 9; touch held; until [ -e go ]; do sleep 0.05; done) "
                ">/dev/null 2>&1 & " + _WAIT_FOR.format("held") + "; stat -c %i lock;"
                " (python3 flood.py >flood.err 2>&1 &); " + _WAIT_FOR.format("flooded")
            )
        ).result()
        try:
            assert started.stdout.split()[0::2] == ["held", "flooded"], started
            inode = started.stdout.split()[1]
            listed = await asyncio.to_thread(Path("/proc/locks").read_bytes)
            found = re.search(rb"^\d+: FLOCK .*:%s " % inode.encode(), listed, re.M)
            at = found.start() if found else -1
            assert at > 1 << 20, f"the holder's lock is at byte {at} of {len(listed)}: not behind the flood"
            await ws.fs.write_file("/workspace/lock", "written by the workspace\n")
            probed = await (
                await ws.runtime.exec(
                    "cd /workspace; stat -c %i lock; flock -n lock true && echo free || echo busy"
                )
            ).result()
        finally:
            await ws.fs.write_file("/workspace/go", "")
            await (await ws.runtime.exec("true")).result()
    assert probed.stdout.split() == [inode, "busy"], probed


async def test_a_small_file_grown_sparse_between_the_pull_s_look_and_its_read_is_not_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program writes ``f`` small, then (between the pull's look and its read: injected here, a
    program racing the pull) makes it a 64 MiB hole (``truncate``: free on its tmpfs, outside every
    budget). The owner reads at most ``BIG_FILE`` of it; the next pull takes it as a large file, holes
    unread (before: read whole into the owner's memory, as zeros: 2 GiB for ``truncate -s 2G``)."""
    from computer.runtime import ShellBackend, _beneath
    from computer.runtime._backend import BIG_FILE

    read = _beneath.BeneathReader.read
    longest: list[int] = [0]

    def racing(self: _beneath.BeneathReader, rel: str, *args: Any) -> bytes:
        if rel.endswith("grown") and not longest[0]:
            os.truncate(os.path.join(self._root, rel), 64 << 20)  # the program's truncate, in the window
        data = read(self, rel, *args)
        longest[0] = max(longest[0], len(data), 1)
        return data

    monkeypatch.setattr(_beneath.BeneathReader, "read", racing)
    async with computer.Workspace(backends=[ShellBackend(live=True)]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec("cd /workspace; echo small > grown")).result()
        again = await (await ws.runtime.exec("cd /workspace; stat -c %s grown")).result()
        size = (await ws.fs.stat("/workspace/grown")).size
    assert (first.status, again.stdout) == ("completed", f"{64 << 20}\n"), (first, again)
    assert longest[0] <= BIG_FILE, f"the owner read {longest[0]} bytes of a file it took for small"
    assert size == 64 << 20


async def test_the_dashboard_serves_a_bounded_number_of_event_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each audit event stream held its socket and a store of its own (~4 descriptors): one client
    opening ~5,000 took every descriptor of the dashboard. Past ``MAX_STREAMS`` (2 here) a new one is a
    ``503``; one that ends makes room again."""
    from computer.config import Settings
    from computer.dashboard import _app
    from computer.dashboard._serve import serve_dashboard
    from computer.dashboard._source import DataDirSource

    monkeypatch.setattr(_app, "MAX_STREAMS", 2)
    config = Settings(data_dir=tmp_path)
    config.workspaces_dir.mkdir(parents=True)
    async with computer.Workspace(str(config.workspaces_dir / "w.sqlite")) as ws:
        await ws.fs.mkdir("/workspace")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = asyncio.create_task(
        serve_dashboard(DataDirSource(config), "127.0.0.1", port, assets_url="http://127.0.0.1:1/links")
    )

    async def stream() -> tuple[bytes, asyncio.StreamWriter]:
        for _ in range(300):  # bounded: the server binds within 30 s
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        writer.write(b"GET /events/w/w/audit?after=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
        return await asyncio.wait_for(reader.readline(), 30), writer

    try:
        first, second = await stream(), await stream()
        third = await stream()
        assert [first[0], second[0]] == [b"HTTP/1.1 200 OK\r\n"] * 2
        assert third[0] == b"HTTP/1.1 503 Service Unavailable\r\n"  # before: 200, every one
        first[1].close()
        for _ in range(300):  # bounded: the server sees the client gone within 30 s
            again = await stream()
            again[1].close()
            if again[0] != third[0]:
                break
            await asyncio.sleep(0.1)
        assert again[0] == b"HTTP/1.1 200 OK\r\n"
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
