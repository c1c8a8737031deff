"""The dashboard beside a demo run (issue 21): served while the agents work, on loopback.

It reads the demo's data directory and the Ray cluster the demo runs on, so each agent's timeline,
files, runs and transcript (which the agents keep in their workspaces) are live in the browser.
Port 8788 when free, else any free port; a dashboard that cannot start never stops the demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

from rich.console import Console

__all__ = ["demo_dashboard"]

log = logging.getLogger(__name__)

PORT = 8788


def _port(host: str) -> int:
    for port in (PORT, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    return PORT


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """Leaves the demo's own Ctrl-C handling alone (uvicorn would take SIGINT over while serving)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    return Server


@contextlib.asynccontextmanager
async def demo_dashboard(
    config: Any, console: Console, *, host: str = "127.0.0.1"
) -> AsyncIterator[str | None]:
    """Serve the dashboard for the block; yields its address (``None`` when it could not start)."""
    try:
        import uvicorn

        from ..dashboard import ClusterSource, create_app

        _Server = _server_class()

        port = _port(host)
        server = _Server(
            uvicorn.Config(create_app(ClusterSource(config)), host=host, port=port, log_level="warning")
        )
        task = asyncio.create_task(server.serve())
        for _ in range(100):
            if server.started or task.done():
                break
            await asyncio.sleep(0.02)
    except Exception as exc:
        log.warning("the dashboard did not start: %r", exc)
        yield None
        return
    address = f"http://{host}:{port}/" if server.started else None
    if address:
        console.print(f"dashboard: {address} (live while the agents work)", soft_wrap=True)
    try:
        yield address
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)
