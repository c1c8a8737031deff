"""needs_approval pauses a turn durably; approve and reject resume it, also after the actor was killed."""

from __future__ import annotations

from typing import Any

import pytest
import ray

import computer
from computer.agent import PendingCall, TurnBusyError, tool

from ._agents import ScriptedAgent
from ._scripted import outcome, plan
from .conftest import Agents, until_dead, until_named_free


async def test_a_call_needing_approval_pauses_the_turn(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    reply = await agent.chat.remote(plan(("archive", {"key": "important-1"})))
    assert reply.text is None and reply.paused
    assert reply.pending == (PendingCall("call-1-0-0", "archive", {"key": "important-1"}),)
    assert await agent.pending.remote() == [PendingCall("call-1-0-0", "archive", {"key": "important-1"})]


async def test_approval_predicate_sees_the_arguments(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    reply = await agent.chat.remote(plan(("archive", {"key": "routine"})))
    assert outcome(reply.text)["results"] == [{"tool": "archive", "content": "archived routine"}]


async def test_approve_runs_the_call_and_finishes_the_turn(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    await agent.chat.remote(plan(("archive", {"key": "important-1"}), reply="finished"))
    reply = await agent.approve.remote("call-1-0-0")
    answer = outcome(reply.text)
    assert answer["reply"] == "finished"
    assert answer["results"] == [{"tool": "archive", "content": "archived important-1"}]
    assert await agent.pending.remote() == []


async def test_reject_tells_the_model_why_and_skips_the_call(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    await agent.chat.remote(plan(("wipe", {})))
    answer = outcome((await agent.reject.remote("call-1-0-0", "not today")).text)
    assert answer["results"][0]["tool"] == "wipe"
    assert "not today" in answer["results"][0]["content"]
    assert "wiped" not in answer["results"][0]["content"]


async def test_a_turn_waits_for_every_parallel_call(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    reply = await agent.chat.remote(
        plan([("wipe", {}), ("archive", {"key": "important-2"}), ("weather", {"city": "Rome"})])
    )
    assert {c.id for c in reply.pending} == {"call-1-0-0", "call-1-0-1"}
    partial = await agent.reject.remote("call-1-0-0")
    assert partial.pending == (PendingCall("call-1-0-1", "archive", {"key": "important-2"}),)
    answer = outcome((await agent.approve.remote("call-1-0-1")).text)
    contents = {r["tool"]: r["content"] for r in answer["results"]}
    assert contents["archive"] == "archived important-2"
    assert contents["weather"] == "sunny in Rome"
    assert "wiped" not in contents["wipe"]


async def test_a_new_message_while_paused_is_refused(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    await agent.chat.remote(plan(("wipe", {})))
    with pytest.raises(TurnBusyError):
        await agent.chat.remote(plan())
    with pytest.raises(LookupError):
        await agent.approve.remote("no-such-call")


async def test_a_paused_turn_resumes_after_the_actor_was_killed(agents: Agents) -> None:
    name = agents.name()
    agent = agents.spawn(ScriptedAgent, name)
    await agent.chat.remote(
        plan(
            ("write", {"path": "/workspace/a", "content": "1"}),
            ("archive", {"key": "important-3"}),
            reply="resumed",
        )
    )
    ray.kill(agent)
    await until_dead(agent)
    await until_named_free(name)
    again = agents.spawn(ScriptedAgent, name)
    assert [c.id for c in await again.pending.remote()] == ["call-1-1-0"]
    answer = outcome((await again.approve.remote("call-1-1-0")).text)
    assert answer["reply"] == "resumed"
    assert [r["tool"] for r in answer["results"]] == ["write", "archive"]
    assert answer["results"][1]["content"] == "archived important-3"
    assert outcome((await again.chat.remote(plan())).text)["turns"] == 2


async def test_workspace_tools_can_need_approval(agents: Agents) -> None:
    class Careful(ScriptedAgent):
        approve_workspace_tools = "mutating"

    agent = agents.spawn(Careful)
    reply = await agent.chat.remote(
        plan(("read", {"path": "/nothing"}), ("write", {"path": "/w", "content": "x"}))
    )
    assert [c.tool for c in reply.pending] == ["write"]


async def test_pydantic_ai_requires_approval_pauses_and_is_refused_from_code(agents: Agents) -> None:
    from pydantic_ai.tools import Tool

    from ._agents import CodeAgent

    def launch() -> str:
        """Launch."""
        return "launched"

    class Launcher(CodeAgent):
        def get_tools(self) -> list[Any]:
            return [*super().get_tools(), Tool(launch, requires_approval=True)]

    agent = agents.spawn(Launcher)
    reply = await agent.chat.remote(plan(("launch", {})))
    assert [c.tool for c in reply.pending] == ["launch"]
    assert (
        outcome((await agent.approve.remote(reply.pending[0].id)).text)["results"][0]["content"] == "launched"
    )
    code = outcome((await agent.chat.remote(plan(("execute", {"code": "result = tools.launch()"})))).text)
    assert "needs human approval" in code["results"][0]["content"]
    assert "launched" not in code["results"][0]["content"]


async def test_an_external_deferred_call_is_refused_and_the_turn_not_committed(agents: Agents) -> None:
    from pydantic_ai.exceptions import CallDeferred

    def ask_human() -> str:
        """Defer to an outside system."""
        raise CallDeferred

    class Deferring(ScriptedAgent):
        def get_tools(self) -> list[Any]:
            return [ask_human]

    agent = agents.spawn(Deferring)
    with pytest.raises(NotImplementedError, match="ask_human"):
        await agent.chat.remote(plan(("ask_human", {})))
    assert await agent.history.remote() == []
    assert await agent.pending.remote() == []


async def test_a_failed_resume_names_its_calls_so_they_can_be_decided_again(agents: Agents) -> None:
    def risky() -> str:
        """Fails every time it runs."""
        raise RuntimeError("risky failed")

    class Failing(ScriptedAgent):
        def get_tools(self) -> list[Any]:
            return [tool(risky, needs_approval=True)]

    agent = agents.spawn(Failing)
    paused = await agent.chat.remote(plan(("risky", {}), reply="gave up"))
    [call] = paused.pending
    with pytest.raises(RuntimeError, match="risky failed"):
        await agent.approve.remote(call.id)
    assert await agent.pending.remote() == [call]  # decided, but the turn never finished
    with pytest.raises(TurnBusyError, match=call.id):
        await agent.chat.remote(plan())
    answer = outcome((await agent.reject.remote(call.id, "leave it")).text)
    assert answer["reply"] == "gave up" and "leave it" in answer["results"][0]["content"]
    assert await agent.pending.remote() == []
    assert outcome((await agent.chat.remote(plan())).text)["turns"] == 2


ADD = """
def add(a, b):
    workspace.write_file("/workspace/added.txt", str(a + b))
    return a + b

tools = {"add": {"description": "Add", "parameters": {"a": {"type": "number"}, "b": {"type": "number"}},
                 "execute": add}}
"""


async def test_mutating_approval_also_gates_execute_and_extension_tools(agents: Agents) -> None:
    from ._agents import CodeAgent

    class Careful(CodeAgent):
        approve_workspace_tools = "mutating"

    agent = agents.spawn(Careful)
    await agent.load_extension.remote({"name": "math"}, ADD)
    code = "workspace.write_file('/workspace/planted.txt', 'planted')"
    reply = await agent.chat.remote(
        plan(
            [
                ("execute", {"code": code}),
                ("math_add", {"a": 1, "b": 2}),
                ("load_extension", {"manifest": {"name": "more"}, "source": ADD}),
                ("list_extensions", {}),
            ],
            reply="all rejected",
        )
    )
    assert sorted(c.tool for c in reply.pending) == ["execute", "load_extension", "math_add"]
    for call in reply.pending:
        last = await agent.reject.remote(call.id, "no changes today")
    answer = outcome(last.text)
    assert answer["reply"] == "all rejected"
    listed = next(r for r in answer["results"] if r["tool"] == "list_extensions")
    assert '"math"' in listed["content"] and '"more"' not in listed["content"]
    async with computer.get_workspace(agent) as ws:
        assert not await ws.fs.exists("/workspace/planted.txt")
        assert not await ws.fs.exists("/workspace/added.txt")
