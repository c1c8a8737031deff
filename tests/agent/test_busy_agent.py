"""An agent whose slots are all held by calls that wait: turns (each waits for the one before it, the
first for its command) or exec streams of its workspace (a run's snapshots, as long as the run).

They held slots of the agent's one concurrency group, so once they held all of them every other call
(``ping``, ``pending``, a read of its workspace) queued until a turn or a run ended. The actor
``spawn`` makes now serves them on a group of their own (the owner's wait group: ``chat``,
``chat_stream``, ``approve``, ``reject`` by the method's own group, exec streams because ``describe``
says where). The agent's slots are lowered here (the real count is 1,000: the behaviour is the same).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

import computer
import computer.agent._spawn as spawning
from computer.agent import AgentMovedError

from ._agents import ScriptedAgent
from ._scripted import outcome, plan
from .conftest import Agents

SLOTS = 3
# A command that waits (bounded) for the file ``go`` to appear in its directory.
WAIT_FOR_GO = "for i in $(seq 900); do [ -e go ] && break; sleep 0.1; done; echo went"


async def _events(agent: Any, message: str) -> list[dict[str, Any]]:
    return [await ref async for ref in agent.chat_stream.remote(message)]


async def _snapshots(run: Any) -> Any:
    last = None
    async for snapshot in run:
        last = snapshot
    return last


@pytest.mark.parametrize("waiting", ["turns", "snapshots"])
async def test_control_calls_answer_while_waiting_calls_hold_every_slot(
    agents: Agents, monkeypatch: pytest.MonkeyPatch, waiting: str
) -> None:
    monkeypatch.setattr(spawning, "AGENT_MAX_CONCURRENCY", SLOTS)
    name = agents.name()
    agent = agents.spawn(ScriptedAgent, name)
    async with computer.get_workspace(agent) as ws:
        runs: list[Any] = []
        if waiting == "turns":  # the first runs its command, the others wait for it, one after another
            turns = [plan(("bash", {"command": WAIT_FOR_GO}), reply=f"turn {i}") for i in range(SLOTS + 1)]
            calls: list[Any] = [agent.chat.remote(t) for t in turns[:-1]]
            calls.append(_events(agent, turns[-1]))
        else:
            await ws.fs.mkdir("/workspace", recursive=True)  # a turn makes it: no turn here
            runs = [await ws.runtime.exec("sleep 120") for _ in range(SLOTS + 1)]
            calls = [_snapshots(run) for run in runs]
        queued = [asyncio.ensure_future(c) for c in calls]
        done, _ = await asyncio.wait(queued, timeout=2.0)
        assert not done  # every one waits
        async with asyncio.timeout(30):  # before: until a turn or a run ended
            assert await agent.ping.remote() == name
            assert await agent.pending.remote() == []
            await ws.fs.write_file("/workspace/other", b"other")
            assert await ws.fs.read_file("/workspace/other") == b"other"
        assert not any(q.done() for q in queued)
        async with asyncio.timeout(120):
            if waiting == "turns":
                await ws.fs.write_file("/workspace/go", b"")
            for run in runs:
                await ws.runtime.kill_exec(run.id)
            ended = await asyncio.gather(*queued)
        if waiting == "turns":
            replies = [outcome(r.text) for r in ended[:-1]] + [outcome(ended[-1][-1]["reply"].text)]
            assert [r["reply"] for r in replies] == [f"turn {i}" for i in range(SLOTS + 1)]
            assert all("went" in r["results"][0]["content"] for r in replies), replies
        else:
            assert all(s.status == "cancelled" for s in ended), ended


async def test_a_class_decorated_with_ray_remote_gets_the_groups_too(agents: Agents) -> None:
    """``spawn`` makes a ``@ray.remote`` class again with the groups (``.options()`` cannot add them),
    keeping the options it was decorated with; the agent says which groups it has."""
    decorated = ray.remote(max_restarts=1)(ScriptedAgent)
    agent = agents.spawn(decorated)
    async with computer.get_workspace(agent) as ws:
        assert (ws._conn.wait_group, ws._conn.control_group) == ("waits", "control")
    reply = await agent.chat.remote(plan(("weather", {"city": "Oslo"}), reply="decorated"))
    assert outcome(reply.text)["reply"] == "decorated"
    assert (await _events(agent, plan(reply="streamed")))[-1]["type"] == "reply"


async def test_turn_calls_arriving_while_the_agent_exits_raise_agent_moved(tmp_path: Any) -> None:
    """``chat``, ``approve``, ``reject`` and ``chat_stream`` hop to the agent's own loop; one arriving
    once that loop has closed (the agent exiting) got the owners' wire reply, a ``("moved", …)`` tuple,
    as its reply (and its stream's first event), where callers expect a ``Reply`` or
    :class:`AgentMovedError`. They raise it now, unrun."""
    agent = ScriptedAgent("exiting", {"data_dir": str(tmp_path)})
    assert await agent.ping() == "exiting"
    ended = asyncio.new_event_loop()
    ended.close()
    agent._own_loop = ended  # what a call of another group finds while the agent exits
    for call in (lambda: agent.chat("hi"), lambda: agent.approve("c1"), lambda: agent.reject("c1")):
        with pytest.raises(AgentMovedError):
            await call()
    with pytest.raises(AgentMovedError):
        async for event in agent.chat_stream("hi"):
            raise AssertionError(f"an event of an exiting agent: {event!r}")
    assert (await agent.history()) == []  # nothing ran
