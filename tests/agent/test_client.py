"""``AgentClient`` re-spawns a hibernated or killed agent; retried requests never run a turn twice."""

from __future__ import annotations

import ray

from computer.agent import AgentClient

from ._agents import ScriptedAgent, SleepyAgent
from ._scripted import outcome, plan
from .conftest import Agents, until_dead


async def test_client_reaches_a_hibernated_agent_through_a_new_actor(agents: Agents) -> None:
    client = AgentClient(SleepyAgent, agents.name())
    assert outcome((await client.chat(plan())).text)["turns"] == 1
    first = client.handle
    await until_dead(first)
    assert outcome((await client.chat(plan())).text)["turns"] == 2
    assert client.handle != first  # Ray handles compare by actor id


async def test_client_recovers_from_a_kill_with_the_paused_turn(agents: Agents) -> None:
    client = AgentClient(ScriptedAgent, agents.name())
    reply = await client.chat(plan(("wipe", {}), reply="after kill"))
    ray.kill(client.handle)
    assert [c.id for c in await client.pending()] == [reply.pending[0].id]
    assert outcome((await client.reject(reply.pending[0].id, "no")).text)["reply"] == "after kill"
    events = [e async for e in client.chat_stream(plan(reply="streamed"))]
    assert outcome(events[-1]["reply"].text)["turns"] == 2


async def test_a_retried_turn_returns_the_committed_reply_without_running_again(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    first = await agent.chat.remote(plan(("weather", {"city": "Oslo"})), "turn-1")
    again = await agent.chat.remote(plan(("weather", {"city": "Oslo"})), "turn-1")
    assert again == first
    assert len(await agent.history.remote()) == 4  # one turn: request, call, return, answer


async def test_a_retried_approval_returns_the_resumed_reply(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    paused = await agent.chat.remote(plan(("wipe", {})))
    resumed = await agent.approve.remote(paused.pending[0].id)
    assert outcome(resumed.text)["results"][0]["content"] == "wiped"
    assert await agent.approve.remote(paused.pending[0].id) == resumed
