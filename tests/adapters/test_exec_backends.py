"""The exec tool over the real shell and python backends of an in-process Workspace."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.tools import create_tools
from computer.tools.exec import create_exec_tool


@pytest.fixture
async def workspace() -> AsyncIterator[Any]:
    async with computer.Workspace(backends=[ShellBackend(), PythonBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        yield ws


async def test_long_output_shows_the_tail_and_names_the_full_log(workspace: Any) -> None:
    tools = create_tools(workspace, exec={"shell": {}})
    result = await tools["exec"].run({"command": "seq 1 3000"})
    stdout = result["stdout"]
    assert stdout.startswith("1001\n")
    note = stdout.rsplit("\n", 1)[-1]
    match = re.fullmatch(r"\[Showing lines 1001-3000 of 3000\. Full output: (\S+)\]", note)
    assert match, note
    assert match.group(1).startswith("/.computer/output/shell.")
    full = await tools["read"].run({"path": match.group(1), "limit": 1})
    assert full["content"] == "1"


async def test_small_limits_are_passed_to_the_runtime(workspace: Any) -> None:
    tool = create_exec_tool(workspace, {"shell": {}}, max_lines=3, max_bytes=1000)
    result = await tool.run({"command": "seq 1 10"})
    assert result["stdout"].startswith("8\n9\n10\n\n[Showing lines 8-10 of 10.")
    assert result["truncated"]["stdout"]["reason"] == "lines"


async def test_a_callable_backend_gets_input_and_returns_a_value(workspace: Any) -> None:
    tool = create_tools(workspace)["exec"]
    result = await tool.run(
        {"backend": "python", "command": "def main(x):\n    return {'twice': x * 2}", "input": 21}
    )
    assert (result["status"], result["value"]) == ("completed", {"twice": 42})
    shell = await tool.run({"backend": "shell", "command": "pwd; echo $GREETING", "env": {"GREETING": "hi"}})
    assert shell["stdout"] == "/workspace\nhi\n"
    assert "value" not in shell


async def test_a_failing_command_reports_its_exit_code(workspace: Any) -> None:
    tool = create_tools(workspace, exec={"shell": {}})["exec"]
    result = await tool.run({"command": "echo oops >&2; exit 3"})
    assert (result["status"], result["exitCode"], result["stderr"]) == ("failed", 3, "oops\n")


async def test_cancelling_the_tool_call_kills_the_running_command(workspace: Any) -> None:
    tool = create_tools(workspace, exec={"shell": {}})["exec"]
    started: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_update(snapshot: dict[str, Any]) -> None:
        if "ready" in snapshot["stdout"]:
            started.put_nowait(snapshot)

    task = asyncio.create_task(
        tool.run({"command": "echo ready; sleep 60; echo late > late.txt"}, on_update=on_update)
    )
    snapshot = await asyncio.wait_for(started.get(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    handle = await workspace.runtime.get_exec(snapshot["id"])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "cancelled"
    assert not await workspace.fs.exists("/workspace/late.txt")


@pytest.mark.timeout(120)
async def test_a_hanging_command_is_stopped_by_its_timeout(workspace: Any) -> None:
    tool = create_tools(workspace)["exec"]
    result = await asyncio.wait_for(tool.run({"command": "echo started; sleep 600", "timeout": 1}), 60)
    assert result["status"] == "cancelled", result
    assert result["timedOut"] is True
    assert "started" in result["stdout"]
    after = await tool.run({"command": "echo next"})
    assert after["status"] == "completed" and after["stdout"] == "next\n"


@pytest.mark.timeout(120)
async def test_a_hanging_python_run_is_stopped_by_its_timeout(workspace: Any) -> None:
    tool = create_tools(workspace)["exec"]
    result = await asyncio.wait_for(
        tool.run({"backend": "python", "command": "import time\ntime.sleep(600)", "timeout": 1}), 60
    )
    assert result["status"] == "cancelled" and result["timedOut"] is True, result
