"""Loopback servers in tests: a free port, waiting until something listens on it, an app served."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` (a loopback address) that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def wait_until_listening(port: int, seconds: float = 20, host: str = "127.0.0.1") -> None:
    """Return once ``host``:``port`` accepts a connection; ``OSError`` after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)  # the server is still binding; there is nothing to await on
            continue
        writer.close()
        await writer.wait_closed()
        return


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` (ASGI) served by uvicorn on a free loopback port: its base URL, until the block ends."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    await wait_until_listening(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
