"""``AgentClient`` re-spawns a hibernated or killed agent; retried requests never run a turn twice."""

from __future__ import annotations

import json

import ray

import computer
from computer.agent import AgentClient

from ._agents import ScriptedAgent, SleepyAgent
from ._scripted import outcome, plan
from .conftest import Agents, until_dead

STATE = "/.computer/agent/state.json"


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


async def test_a_retried_turn_is_replayed_after_other_turns_committed(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    first = await agent.chat.remote(plan(("weather", {"city": "Oslo"})), "turn-x")
    for n in range(3):
        await agent.chat.remote(plan(reply=f"other {n}"), f"turn-{n}")
    assert await agent.chat.remote(plan(("weather", {"city": "Oslo"})), "turn-x") == first
    assert outcome((await agent.chat.remote(plan(), "turn-last")).text)["turns"] == 5


async def test_a_state_file_of_older_code_still_replays_its_last_turn(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    first = await agent.chat.remote(plan(reply="old"), "turn-old")
    async with computer.get_workspace(agent) as ws:
        stored = json.loads(await ws.fs.read_file(STATE))
        assert stored["last"]["keys"] == ["turn-old"]
        del stored["recent"]  # as older code wrote it
        await ws.fs.write_file(STATE, json.dumps(stored).encode())
    assert await agent.chat.remote(plan(reply="old"), "turn-old") == first
    await agent.chat.remote(plan(reply="new"), "turn-new")
    async with computer.get_workspace(agent) as ws:
        stored = json.loads(await ws.fs.read_file(STATE))
    assert [r["keys"] for r in stored["recent"]] == [["turn-old"], ["turn-new"]]
    assert stored["last"]["keys"] == ["turn-new"]
