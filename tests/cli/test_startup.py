"""What an in-process command loads (issue 22, CLI speed): only what it uses. No Ray, no rich for
``tool`` (its output is JSON), no exec backends for a tool or a ``shell -c`` line that runs nothing,
no staged python interpreter for a shell exec; ``shell -c LINE`` runs one line with an exit code, and
``mcp --readonly`` serves the four reading tools."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import MCP_HANDSHAKE, REPO, cli_env, mcp_exchange

# Run one command as ``python -m computer.cli`` does, then print what it left loaded (as JSON, on the
# last line of stderr: stdout is the command's).
_LOADED = """
import atexit, gc, json, runpy, sys
def loaded():
    from computer.runtime import _staging
    heavy = ("ray", "rich", "redis", "mcp", "computer.assets", "computer.runtime.shell", "computer.runtime.python",
             "typer", "pydantic_settings", "mcp.client", "mcp.server.mcpserver")
    print(json.dumps({"modules": [m for m in heavy if m in sys.modules],
                      "staged_python": bool(_staging._STAGED_PYTHONS),
                      "gc": [gc.isenabled(), gc.get_freeze_count()]}), file=sys.stderr)
atexit.register(loaded)
sys.argv = ["computer", *sys.argv[1:]]
runpy.run_module("computer.cli", run_name="__main__")
"""


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED, "--data-dir", str(tmp_path), *args],
        env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc, json.loads(proc.stderr.splitlines()[-1])


def test_a_tool_call_loads_neither_ray_nor_rich_nor_the_backends(tmp_path: Path) -> None:
    """Nor typer (``computer.cli.main`` parses the call itself) nor pydantic-settings (``config``)."""
    write = json.dumps({"path": "/workspace/a.txt", "content": "x\n"})
    for args in (
        ["write", write],
        ["read", json.dumps({"path": "/workspace/a.txt"})],
        ["grep", '{"query": "x"}'],
    ):
        proc, loaded = _run(tmp_path, "tool", "quick", *args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (loaded["modules"], loaded["staged_python"]) == ([], False), args


def test_a_shell_exec_stages_no_python_interpreter(tmp_path: Path) -> None:
    proc, loaded = _run(tmp_path, "tool", "quick", "exec", json.dumps({"command": "echo ok"}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["stdout"] == "ok\n"
    assert loaded["staged_python"] is False and "ray" not in loaded["modules"]  # type: ignore[operator]
    # Nor builds the python backend: the shell answers the call alike (``_tool.exec_backends``).
    assert "computer.runtime.python" not in loaded["modules"]  # type: ignore[operator]


def test_a_python_exec_builds_only_the_python_backend(tmp_path: Path) -> None:
    call = {"command": "def main(x):\n    return x * 2", "backend": "python", "input": 21}
    proc, loaded = _run(tmp_path, "tool", "quick", "exec", json.dumps(call))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["value"] == 42
    assert "computer.runtime.shell" not in loaded["modules"]  # type: ignore[operator]
    # input on the shell: every backend, so the error names the callable ones as before.
    proc, loaded = _run(tmp_path, "tool", "quick", "exec", json.dumps({"command": "true", "input": 1}))
    assert proc.returncode == 1 and "callable backends: python" in proc.stdout
    assert {"computer.runtime.shell", "computer.runtime.python"} <= set(loaded["modules"])  # type: ignore[call-overload]


def test_shell_c_runs_one_line_and_says_how_it_went(tmp_path: Path) -> None:
    made, loaded = _run(tmp_path, "shell", "lines", "-c", "!echo hello > f.txt")
    assert made.returncode == 0, made.stderr[-3000:]
    assert "computer.runtime.shell" in loaded["modules"]  # type: ignore[operator]
    assert "computer.runtime.python" not in loaded["modules"]  # type: ignore[operator]  # the shell runs it
    cat, loaded = _run(tmp_path, "shell", "lines", "-c", "cat f.txt")
    assert (cat.returncode, cat.stdout) == (0, "hello\n")
    assert not {"computer.runtime.shell", "computer.runtime.python"} & set(loaded["modules"])  # type: ignore[call-overload]
    missing, _ = _run(tmp_path, "shell", "lines", "-c", "cat nope.txt")
    assert missing.returncode == 1 and "cat: No such file or directory" in missing.stderr
    failed, _ = _run(tmp_path, "shell", "lines", "-c", "!exit 3")
    assert failed.returncode == 3 and "exit 3" in failed.stderr  # the command's own code, as tool exec


def test_mcp_readonly_serves_the_reading_tools(tmp_path: Path) -> None:
    _, listing = mcp_exchange(["--data-dir", str(tmp_path), "mcp", "reader", "--readonly"], MCP_HANDSHAKE)
    assert {tool["name"] for tool in listing["result"]["tools"]} == {"read", "ls", "find", "grep"}


def _mcp_loaded(
    tmp_path: Path, messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``computer mcp quick`` in process: the replies to ``messages`` and what it had loaded at its exit."""
    stderr: list[str] = []
    replies = mcp_exchange(
        ["--data-dir", str(tmp_path), "mcp", "quick"],
        messages,
        command=[sys.executable, "-c", _LOADED],
        stderr=stderr,
    )
    return replies, json.loads(stderr[0].splitlines()[-1])


def test_the_share_link_publisher_is_made_at_the_first_share(tmp_path: Path) -> None:
    """``mcp`` answers without ``computer.assets`` until a link is shared (it loaded the Redis client,
    ~0.2 s, before that was lazy too), and the link it then shares is in the data directory's store;
    a SQLite store never loads the Redis client."""
    replies, loaded = _mcp_loaded(tmp_path, MCP_HANDSHAKE)
    assert "publish" in {tool["name"] for tool in replies[1]["result"]["tools"]}
    assert "computer.assets" not in loaded["modules"] and "mcp" in loaded["modules"]
    write = {"name": "write", "arguments": {"path": "/workspace/a.txt", "content": "x\n"}}
    publish = {"name": "publish", "arguments": {"path": "/workspace/a.txt"}}
    calls = [
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": write},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": publish},
    ]
    replies, loaded = _mcp_loaded(tmp_path, [*MCP_HANDSHAKE, *calls])
    shared = replies[3]["result"]["structuredContent"]
    assert shared["ok"] is True and "computer.assets" in loaded["modules"], replies[3]
    assert "redis" not in loaded["modules"]  # the default store is SQLite
    assert asyncio.run(_stored(tmp_path / "assets", "/".join(shared["url"].split("/")[-2:]))) == "a.txt"


def test_mcp_serves_without_the_sdk_client_side(tmp_path: Path) -> None:
    """The SDK's client side and its high-level ``MCPServer`` are not loaded (``tools.mcp``'s
    ``_server_side_only``): ~0.5 s of CPU before ``initialize`` was answered."""
    call = {"name": "write", "arguments": {"path": "/workspace/a.txt", "content": "x\n"}}
    replies, loaded = _mcp_loaded(
        tmp_path, [*MCP_HANDSHAKE, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}]
    )
    assert replies[0]["result"]["serverInfo"]["name"] == "computer"
    assert replies[2]["result"]["isError"] is False, replies[2]
    assert "mcp" in loaded["modules"]
    assert not {"mcp.client", "mcp.server.mcpserver"} & set(loaded["modules"])


def test_the_start_is_frozen_and_the_collector_turned_back_on(tmp_path: Path) -> None:
    """A command's start runs with the collector off; once its workspace is open (or its imports are
    done) what the start made is frozen and the collector is on again (``cli._gc``): ``mcp`` answered
    ``initialize`` ~25% sooner. Checked at the exit of each kind of command."""
    write = json.dumps({"path": "/workspace/a.txt", "content": "x\n"})
    for args in (["tool", "quick", "write", write], ["ls"], ["log", "quick"], ["shell", "quick", "-c", "ls"]):
        proc, loaded = _run(tmp_path, *args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        enabled, frozen = loaded["gc"]  # type: ignore[misc]
        assert enabled is True and frozen > 10_000, (args, loaded)
    _, loaded = _mcp_loaded(tmp_path, MCP_HANDSHAKE)
    assert loaded["gc"][0] is True and loaded["gc"][1] > 10_000, loaded
    # A command that fails before opening its workspace (a bad JSON argument) turns it back on too.
    proc, loaded = _run(tmp_path, "tool", "quick", "write", "{not json")
    assert proc.returncode != 0 and loaded["gc"][0] is True, (proc.stdout, loaded)


async def _stored(assets_dir: Path, key: str) -> str | None:
    """The file name of the share link ``key`` (``<id>/<file name>``) in the SQLite store at ``assets_dir``."""
    from computer.assets import SqliteAssetStore

    store = SqliteAssetStore(assets_dir)
    try:
        record = await store.get(key)
        return None if record is None else record.filename
    finally:
        await store.close()
