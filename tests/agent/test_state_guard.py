"""The agent's own state under /.computer/agent is read-only for the model's tools; a damaged file says so."""

from __future__ import annotations

import json

import pytest

import computer
from computer.agent import AgentStateError
from computer.agent._guard import GuardedWorkspace
from computer.agent._sandbox_calls import AgentExecContext
from computer.runtime import MirrorFile, SyncPull
from computer.workspace import Workspace

from ._agents import CodeAgent
from ._scripted import outcome, plan
from .conftest import Agents

STATE = "/.computer/agent/state.json"

SANDBOX = """
def main():
    out = []
    for attempt in [
        lambda: workspace.write_file("/.computer/agent/mcp.json", b"[]"),
        lambda: workspace.rm("/.computer", recursive=True),
        lambda: workspace.write_file("/workspace/into/state.json", b"{}"),
    ]:
        try:
            attempt()
            out.append("ok")
        except PermissionError as exc:
            out.append("refused " + str(exc))
    return out
"""


async def test_the_models_tools_cannot_change_the_agents_state(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    await agent.chat.remote(plan(reply="first"))
    async with computer.get_workspace(agent) as ws:  # a link from outside leads in: writes through it
        await ws.fs.symlink("/.computer/agent", "/workspace/into")
    answer = outcome(
        (
            await agent.chat.remote(
                plan(
                    ("write", {"path": STATE, "content": "{}"}),
                    ("edit", {"path": STATE, "edits": [{"oldText": "messages", "newText": "x"}]}),
                    ("delete", {"path": "/.computer/agent", "recursive": True}),
                    ("delete", {"path": "/", "recursive": True}),
                    ("write", {"path": "/workspace/into/state.json", "content": "{}"}),
                    ("read", {"path": STATE}),
                    ("execute", {"code": SANDBOX}),
                )
            )
        ).text
    )
    results = answer["results"]
    for refused in (*results[:3], results[4]):
        assert "Permission denied" in refused["content"], refused
    # The root itself has its own refusal (EPERM), not the state directory's (045dbb9).
    assert "Operation not permitted: / (the workspace root) cannot be removed" in results[3]["content"]
    assert STATE in results[0]["content"] and "/.computer/agent" in results[2]["content"]
    assert "messages" in results[5]["content"]  # reads stay allowed
    executed = json.loads(results[6]["content"])
    assert executed["status"] == "completed", executed.get("stderr")
    sandbox = executed["value"]
    assert sandbox[0].startswith("refused") and "/.computer/agent/mcp.json" in sandbox[0]
    assert sandbox[1].startswith("refused")
    assert sandbox[2].startswith("refused")
    async with computer.get_workspace(agent) as ws:
        assert not await ws.fs.exists("/.computer/agent/mcp.json")
        assert await ws.fs.exists("/.computer/agent/executions")
    assert len(await agent.history.remote()) == 2 + 2 * 8  # both turns whole


async def test_a_damaged_state_file_fails_naming_the_file(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    await agent.chat.remote(plan())
    async with computer.get_workspace(agent) as ws:
        await ws.fs.write_file(STATE, b"{}")
    with pytest.raises(AgentStateError, match=r"state\.json is damaged"):
        await agent.history.remote()
    async with computer.get_workspace(agent) as ws:
        await ws.fs.write_file(STATE, b"{not json")
    with pytest.raises(AgentStateError, match=r"state\.json is damaged"):
        await agent.chat.remote(plan())


async def test_guarded_fs_and_sandbox_pulls_refuse_the_state_directory() -> None:
    async with Workspace() as ws:
        await ws.fs.mkdir("/.computer/agent", recursive=True)
        await ws.fs.write_file(STATE, b"{}")
        guarded = GuardedWorkspace(ws).fs
        await ws.fs.mkdir("/workspace", recursive=True)
        await ws.fs.symlink("/.computer", "/workspace/up")
        for attempt in (
            guarded.write_file("/workspace/up/agent/state.json", b"x"),
            guarded.rename(STATE, "/workspace/s"),
            guarded.rename("/workspace", "/.computer", overwrite=True),
            guarded.copy("/workspace/x", "/.computer/agent/extensions/e.json"),
            guarded.mkdir("/.computer/agent/extensions", recursive=True),
            guarded.rm("/.computer", recursive=True),
        ):
            with pytest.raises(PermissionError, match="Permission denied"):
                await attempt
        await guarded.mkdir("/.computer", recursive=True)  # an ancestor: harmless
        await guarded.write_file("/workspace/ok.txt", b"fine")
        assert await guarded.read_file(STATE) == b"{}"
        context = AgentExecContext(ws)
        pull = SyncPull(root="/.computer", files=[MirrorFile(STATE, b"{}")])
        with pytest.raises(PermissionError, match=r"state\.json"):
            await context.sync_pull(pull, ws.fs.rev)
        # A program's directory rename (``SyncPull.renames``) out of the state directory or into it.
        for renames in ([("/.computer/agent", "/.computer/moved")], [("/.computer/x", "/.computer/agent/x")]):
            with pytest.raises(PermissionError, match=r"agent"):
                await context.sync_pull(SyncPull(root="/.computer", renames=renames), ws.fs.rev)
        assert await ws.fs.read_file(STATE) == b"{}"
