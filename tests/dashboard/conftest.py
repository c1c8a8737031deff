"""Fixtures of the dashboard tests: a data directory with owners in this process, a served dashboard."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from computer import Workspace
from computer.config import Settings
from computer.dashboard import AccessPolicy, DataDirSource, create_app


def make_png(width: int = 48, height: int = 32) -> bytes:
    """A valid RGB PNG of a colour gradient (made here: no image library needed)."""
    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 255 // width, y * 255 // height, 160)) for x in range(width))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = make_png()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def open_workspace(settings: Settings, name: str, **kwargs: Any) -> Workspace:
    """An owner of workspace ``name`` in this process, with its file in the data directory."""
    from computer.actors.naming import workspace_file

    path = workspace_file(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return Workspace(str(path), **kwargs)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


Serve = Callable[..., Any]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(source, policy=None)`` -> the base URL of a dashboard on 127.0.0.1 (stopped after)."""
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(source: DataDirSource, policy: AccessPolicy | None = None) -> str:
        port = free_port()
        config = uvicorn.Config(create_app(source, policy), host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        assert server.started, "the dashboard did not start"
        servers.append((server, task))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, task in servers:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
