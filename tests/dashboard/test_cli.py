"""``computer dashboard``: it serves the data directory on loopback, prints its address, and refuses
the share links' origin."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from computer.config import Settings
from computer.tools import create_tools

from .conftest import free_port, open_workspace

REPO = Path(__file__).resolve().parents[2]


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMPUTER_REDIS_URL")}
    env.update(COMPUTER_DATA_DIR=str(data_dir), COLUMNS="200", NO_COLOR="1", RAY_USAGE_STATS_ENABLED="0")
    return env


async def test_the_command_serves_the_data_directory(settings: Settings) -> None:
    ws = open_workspace(settings, "from-cli")
    await create_tools(ws)["write"].run({"path": "/workspace/x.txt", "content": "x"})
    await ws.close()
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "computer.cli", "dashboard", "--port", str(port),
        env=_env(settings.data_dir), cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        address = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert address is not None and "read-only" in line, line
        async with httpx.AsyncClient(timeout=10) as http:
            for _ in range(200):
                try:
                    page = await http.get(address.group(0) + "w/from-cli")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            assert page.status_code == 200 and "/workspace/x.txt" in page.text
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)


def test_the_share_links_origin_is_refused(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "computer.cli", "dashboard", "--port", "8787"],
        env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "share links" in refused.stderr
