"""Fixtures of the CLI tests: running ``computer`` in subprocesses, a shared two-node Ray cluster,
and a fake OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPUTER = [sys.executable, "-m", "computer.cli"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_env(data_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: quiet Ray, no inherited cluster address, a data dir."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMPUTER_REDIS_URL")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", COLUMNS="200", NO_COLOR="1")
    # Ray advertises loopback instead of the host's address: the tests stay on 127.0.0.1.
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if data_dir is not None:
        env["COMPUTER_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


def run_cli(
    args: Sequence[str],
    *,
    env: dict[str, str],
    timeout: float = 120,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``computer ARGS`` in a subprocess, bounded in time."""
    return subprocess.run(
        [*COMPUTER, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, input=input
    )


MCP_HANDSHAKE: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]  # fmt: skip


def mcp_exchange(
    args: Sequence[str],
    messages: Sequence[dict[str, Any]] = MCP_HANDSHAKE,
    *,
    command: Sequence[str] = COMPUTER,
    stderr: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Send ``messages`` to ``computer ARGS`` (an MCP server on stdio, started as ``command``) one by
    one; the replies to those with an id, in order. The server must exit 0 once its stdin closes;
    what it wrote on stderr is appended to ``stderr`` when given."""
    proc = subprocess.Popen(
        [*command, *args], env=cli_env(), cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        replies = []
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                replies.append(json.loads(proc.stdout.readline()))  # every stdout line is protocol
        _, err = proc.communicate(timeout=60)  # closes stdin
        assert proc.returncode == 0, err[-3000:]
        if stderr is not None:
            stderr.append(err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return replies


@pytest.fixture(scope="session")
def two_node_cluster() -> Iterator[str]:
    """The address of a two-node Ray cluster on loopback (its own processes, stopped at the end)."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_two_node_cluster.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli_env(),
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stdin is not None
    address = proc.stdout.readline().strip()
    if not address:
        proc.kill()
        pytest.fail("the two-node cluster did not start")
    yield address
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class FakeOpenAI:
    """A loopback OpenAI-compatible endpoint whose replies come from the demo's scripted model."""

    base_url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAI]:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from computer.demo import scripted_reply

    port = free_port()
    fake = FakeOpenAI(f"http://127.0.0.1:{port}/v1")

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        fake.requests.append(body)
        fake.headers.append(dict(request.headers))
        if not body.get("tools") or not body.get("model"):
            return JSONResponse({"error": {"message": "model and tools are required"}}, status_code=400)
        message = scripted_reply(body["messages"])
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(fake.requests)}",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": {**message, "refusal": None}, "finish_reason": finish}],
            }
        )

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    ready = threading.Event()
    while not ready.wait(0.02):  # the server thread flips `started` once it listens
        if server.started:
            ready.set()
    yield fake
    server.should_exit = True
    thread.join(timeout=10)
