"""Adapters over a Ray client (``get_workspace``) give the same results as over the owner itself."""

from __future__ import annotations

from typing import Any

import pytest

import computer

from .conftest import PNG
from .test_scenario import SCENARIO, run_core, run_mcp, run_openai

pytestmark = pytest.mark.ray

# The file part of the scenario; exec joins it when the client offers backends.
FILE_STEPS = [(name, args) for name, args in SCENARIO if name != "exec"]


async def _prepare(ws: Any) -> None:
    await ws.fs.mkdir("/workspace")
    await ws.fs.write_file("/workspace/pixel.png", PNG)


async def test_adapters_over_a_client_match_the_owner(cluster: Any, workspace_name: str) -> None:
    async with computer.Workspace() as owner:
        await _prepare(owner)
        want = await run_core(owner, FILE_STEPS)
    async with computer.get_workspace(workspace_name) as client:
        await _prepare(client)
        got_openai = await run_openai(client, FILE_STEPS)
        await client.fs.rm("/workspace", recursive=True)
        await _prepare(client)
        got_mcp = await run_mcp(client, FILE_STEPS)
    assert got_openai == want
    assert got_mcp == want


async def test_exec_over_a_client_streams_snapshots_and_syncs_files(
    cluster: Any, workspace_name: str
) -> None:
    from computer.tools.openai import create_openai_tools

    async with computer.get_workspace(workspace_name) as client:
        if not any(b.id == "shell" for b in client.runtime.backends()):
            pytest.skip("this build's computer.init configures no shell backend pool")
        await client.fs.mkdir("/workspace")
        _, execute = create_openai_tools(client, exec={"shell": {}})
        updates: list[dict[str, Any]] = []
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "exec", "arguments": '{"command": "echo made > out.txt; echo done"}'},
        }
        out = await execute(call, on_update=updates.append)
        assert out["is_error"] is False
        assert '"stdout": "done\\n"' in out["content"][0]["text"]
        assert updates and updates[-1]["status"] == "completed"
        assert await client.fs.read_text("/workspace/out.txt") == "made\n"
