"""Share links over real loopback sockets: uvicorn in this loop, and ``serve()`` in another process."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from computer import Workspace, config
from computer.assets import AssetStore, create_server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def server_url(store: AssetStore) -> AsyncIterator[str]:
    """``create_server`` on a free loopback port, run as a task of the test loop."""
    port = free_port()
    server = create_server("127.0.0.1", port, store=store, base_path="/links")
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert not task.done(), "server stopped during startup"
        assert time.monotonic() < deadline, "server did not start within 10 s"
        await asyncio.sleep(0.02)
    yield f"http://127.0.0.1:{port}/links"
    server.should_exit = True
    await asyncio.wait_for(task, 10)


async def test_links_are_served_over_a_real_socket(
    store: AssetStore, server_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(config, "_active", config.Settings(data_dir=tmp_path, assets_url=server_url))
    data = bytes(range(256)) * 1000
    async with Workspace(assets=store) as ws:
        assert ws.assets is not None
        await ws.fs.mkdir("/workspace/out", recursive=True)
        await ws.fs.write_file("/workspace/out/data.bin", data)
        url = await ws.assets.share("/workspace/out/data.bin", disposition="attachment")
    async with httpx.AsyncClient(timeout=10) as client:
        full = await client.get(url)
        assert full.status_code == 200 and full.content == data
        assert full.headers["content-disposition"] == 'attachment; filename="data.bin"'
        assert full.headers["content-type"] == "application/octet-stream"
        ranged = await client.get(url, headers={"Range": "bytes=1000-1999"})
        assert ranged.status_code == 206 and ranged.content == data[1000:2000]
        head = await client.head(url)
        assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
        unsatisfiable = await client.get(url, headers={"Range": f"bytes={len(data)}-"})
        assert unsatisfiable.status_code == 416
        missing = await client.get(server_url + "/0123456789ABCDEFGHJKMNPQRS/data.bin")
        assert missing.status_code == 404
        assert "server" not in missing.headers


async def test_serve_in_another_process_finds_links_through_the_same_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/pub"
    env = {**os.environ, "COMPUTER_DATA_DIR": str(tmp_path), "COMPUTER_ASSETS_URL": base}
    env.pop("COMPUTER_REDIS_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"from computer.assets import serve; serve(port={port})",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        monkeypatch.setattr(config, "_active", config.Settings(data_dir=tmp_path, assets_url=base))
        async with Workspace(assets=True) as ws:
            assert ws.assets is not None
            await ws.fs.write_file("/hello.txt", "from another process")
            url = await ws.assets.share("/hello.txt")
        assert url.startswith(base + "/")
        async with httpx.AsyncClient(timeout=5) as client:
            deadline = time.monotonic() + 20
            while True:
                assert proc.returncode is None, "serve() exited early"
                try:
                    response = await client.get(url)
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline, "serve() did not listen within 20 s"
                    await asyncio.sleep(0.1)
            assert response.status_code == 200
            assert response.text == "from another process"
            assert response.headers["content-type"].startswith("text/plain")
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


async def _closed_by_server(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server closes the connection (EOF or reset) within ``seconds``."""
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b"" or reader.at_eof()
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_a_client_that_never_completes_its_request_head_is_cut_off(store: AssetStore) -> None:
    """Slowloris: uvicorn arms no timer on a new connection and drops its keep-alive timer at any
    byte, so a silent client, or one trickling a head a byte at a time, held its socket for good (a
    few thousand use up the server's descriptors). Each now has ``head_timeout`` for its whole head."""
    port = free_port()
    server = create_server("127.0.0.1", port, store=store, base_path="/links", head_timeout=0.5)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                assert not task.done(), "server stopped during startup"
                await asyncio.sleep(0.02)
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
        trickle_reader, trickle = await asyncio.open_connection("127.0.0.1", port)
        head = b"GET /links/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: a\r\n" * 20
        cut = False
        for byte in head:  # ~4 s of bytes at most, each before any gap the old server allowed
            try:
                trickle.write(bytes([byte]))
                await trickle.drain()
            except ConnectionError:
                cut = True
                break
            if trickle_reader.at_eof():
                cut = True
                break
            await asyncio.sleep(0.01)
        cut = cut or await _closed_by_server(trickle_reader, 10)
        assert cut, "a head trickled a byte at a time was never cut off"
        assert await _closed_by_server(silent_reader, 10), "a connection that sent nothing was kept"
        async with httpx.AsyncClient(timeout=10) as client:  # others are still answered
            assert (await client.get(f"http://127.0.0.1:{port}/links/x")).status_code == 404
        for writer in (silent, trickle):
            writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
