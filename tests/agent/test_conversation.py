"""A turn, its reply, streaming, and a conversation that survives a kill and a hibernation."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

import computer
from computer.agent import Reply, agent_actor_name, spawn
from computer.config import Settings

from ._agents import ScriptedAgent, SleepyAgent
from ._scripted import outcome, plan
from .conftest import Agents, until_dead, until_named_free


async def test_chat_runs_workspace_tools_and_replies(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    message = plan(
        ("write", {"path": "/workspace/notes.txt", "content": "hello\n"}),
        ("read", {"path": "/workspace/notes.txt"}),
        reply="wrote it",
    )
    reply: Reply = await agent.chat.remote(message)
    answer = outcome(reply.text)
    assert answer["reply"] == "wrote it"
    assert [r["tool"] for r in answer["results"]] == ["write", "read"]
    assert answer["results"][1]["content"] == "hello"
    async with computer.get_workspace(agent) as ws:
        assert await ws.fs.read_text("/workspace/notes.txt") == "hello\n"


async def test_chat_stream_yields_tool_events_text_and_the_reply_last(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    events = []
    async for ref in agent.chat_stream.remote(plan(("weather", {"city": "Oslo"}), reply="streamed")):
        events.append(await ref)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "tool_call" and events[0]["tool"] == "weather"
    assert events[0]["args"] == {"city": "Oslo"}
    assert kinds[1] == "tool_result" and events[1]["content"] == "sunny in Oslo"
    assert kinds[-1] == "reply"
    text = "".join(e["delta"] for e in events if e["type"] == "text")
    assert text == events[-1]["reply"].text
    assert outcome(text)["reply"] == "streamed"


async def test_conversation_survives_killing_the_actor(agents: Agents) -> None:
    name = agents.name()
    agent = agents.spawn(ScriptedAgent, name)
    first = outcome((await agent.chat.remote(plan(reply="one"))).text)
    assert first["turns"] == 1
    ray.kill(agent)
    await until_dead(agent)
    await until_named_free(name)
    again = agents.spawn(ScriptedAgent, name)
    second = outcome((await again.chat.remote(plan(reply="two"))).text)
    assert second["turns"] == 2
    history = await again.history.remote()
    assert len(history) == 4  # request, response, request, response


async def test_conversation_survives_hibernation(agents: Agents) -> None:
    name = agents.name()
    agent = agents.spawn(SleepyAgent, name)
    assert outcome((await agent.chat.remote(plan(reply="before"))).text)["turns"] == 1
    await until_dead(agent)  # idle for hibernate_after: the actor exits by itself
    await until_named_free(name)
    woken = agents.spawn(SleepyAgent, name)
    assert outcome((await woken.chat.remote(plan(reply="after"))).text)["turns"] == 2


async def test_spawn_returns_the_same_actor_for_a_name(agents: Agents) -> None:
    name = agents.name()
    first = agents.spawn(ScriptedAgent, name)
    assert await first.ping.remote() == name
    second = spawn(ScriptedAgent, name)
    assert first == second  # Ray handles compare by actor id


async def test_an_agent_name_is_scoped_by_data_directory(
    agents: Agents, cluster: Settings, tmp_path: Path
) -> None:
    name = agents.name()
    here = agents.spawn(ScriptedAgent, name)
    other = {**cluster.model_dump(mode="json"), "data_dir": str(tmp_path / "other-data")}
    there = spawn(ScriptedAgent, name, config=other)
    try:
        assert agent_actor_name(name) != agent_actor_name(name, other)
        assert here != there  # two agents, one per data directory
        assert await here.ping.remote() == await there.ping.remote() == name
    finally:
        ray.kill(there)


async def test_get_model_is_required(agents: Agents) -> None:
    from computer.agent import Agent

    class Modelless(Agent):
        pass

    agent = agents.spawn(Modelless)
    with pytest.raises(NotImplementedError):
        await agent.chat.remote("hi")
