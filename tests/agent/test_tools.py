"""The tool merge: workspace tools first, then get_tools(), extensions, MCP; later wins; bash; before_turn."""

from __future__ import annotations

import json

from ._agents import NoBashAgent, RestrictedAgent, RestrictedCodeAgent, ScriptedAgent, ShadowingAgent
from ._scripted import outcome, plan
from .conftest import Agents

WORKSPACE_TOOLS = {"read", "write", "edit", "ls", "list", "find", "grep", "delete"}


async def test_workspace_tools_bash_and_own_tools_are_offered(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    tools = set(outcome((await agent.chat.remote(plan())).text)["tools"])
    assert tools == WORKSPACE_TOOLS | {"bash", "weather", "archive", "wipe"}


async def test_list_is_the_ls_tool_under_the_seed_name(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    message = plan(
        ("write", {"path": "/workspace/a.txt", "content": "a"}),
        [("list", {"path": "/workspace"}), ("ls", {"path": "/workspace"})],
    )
    answer = outcome((await agent.chat.remote(message)).text)
    listed, ls = answer["results"][1]["content"], answer["results"][2]["content"]
    assert '"name": "a.txt"' in listed.replace('":"', '": "')
    assert listed == ls
    assert answer["descriptions"]["list"] == answer["descriptions"]["ls"]


async def test_a_user_tool_replaces_a_workspace_tool_of_the_same_name(agents: Agents) -> None:
    agent = agents.spawn(ShadowingAgent)
    answer = outcome((await agent.chat.remote(plan(("read", {"path": "/x"})))).text)
    assert answer["results"] == [{"tool": "read", "content": "user read of /x"}]
    assert answer["descriptions"]["read"] == "A user tool that shadows the workspace's read."


async def test_bash_runs_in_the_shell_backend_and_writes_back(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    message = plan(
        ("write", {"path": "/workspace/in.txt", "content": "one\ntwo\n"}),
        ("bash", {"command": "wc -l < in.txt > count.txt && cat count.txt"}),
        ("read", {"path": "/workspace/count.txt"}),
    )
    answer = outcome((await agent.chat.remote(message)).text)
    bash = answer["results"][1]
    assert bash["tool"] == "bash" and '"status":"completed"' in bash["content"].replace(" ", "")
    assert answer["results"][2]["content"].strip() == "2"


async def test_workspace_bash_false_leaves_bash_out(agents: Agents) -> None:
    agent = agents.spawn(NoBashAgent)
    answer = outcome((await agent.chat.remote(plan(("bash", {"command": "echo hi"})))).text)
    assert "bash" not in answer["tools"]
    assert WORKSPACE_TOOLS <= set(answer["tools"])
    assert "Unknown tool name: 'bash'" in answer["results"][0]["content"]


async def test_before_turn_restricts_tools_and_adds_a_turn_only_tool(agents: Agents) -> None:
    agent = agents.spawn(RestrictedAgent)
    answer = outcome(
        (await agent.chat.remote(plan(("emergency", {}), ("write", {"path": "/w", "content": "x"})))).text
    )
    assert answer["tools"] == ["emergency", "read", "weather"]
    assert answer["results"][0] == {"tool": "emergency", "content": "emergency during turn 0"}
    assert "Unknown tool name: 'write'" in answer["results"][1]["content"]  # not active this turn
    second = outcome((await agent.chat.remote(plan(("emergency", {})))).text)
    assert second["results"][0]["content"] == "emergency during turn 6"  # 6 messages so far


async def test_execute_code_sees_only_the_active_tools(agents: Agents) -> None:
    agent = agents.spawn(RestrictedCodeAgent)
    code = "result = {'names': sorted(dir(tools)), 'weather': tools.weather(city='Lima')}"
    blocked = "result = tools.archive(key='routine')"
    answer = outcome(
        (await agent.chat.remote(plan(("execute", {"code": code}), ("execute", {"code": blocked})))).text
    )
    allowed = json.loads(answer["results"][0]["content"])
    assert allowed["value"] == {"names": ["weather"], "weather": "sunny in Lima"}
    refused = json.loads(answer["results"][1]["content"])
    assert refused["status"] == "failed" and "no tool 'archive'" in refused["error"]
