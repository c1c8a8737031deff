"""A durable agent's tool calls carry its name in its workspace's audit log (issue 21: "caller: ...
agent name when known"), read from the workspace file beside the agent that owns it."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from computer.actors.naming import workspace_file
from computer.agent import Agent, agent_actor_name, spawn
from computer.config import Settings
from computer.storage import FileSystem

pytestmark = pytest.mark.ray

CALLS = [
    ("write", {"path": "/workspace/a.txt", "content": "a"}),
    ("list", {"path": "/workspace"}),
    ("read", {"path": "/workspace/missing.txt"}),
]


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """One planned call per step, then an answer (decided from the messages alone)."""
    done = sum(1 for m in messages if isinstance(m, ModelResponse))
    if done < len(CALLS):
        name, args = CALLS[done]
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{done}")])
    return ModelResponse(parts=[TextPart("done")])


class AuditedAgent(Agent):
    def get_model(self) -> Model:
        return FunctionModel(_model)


@pytest.fixture
def agent_name(cluster: Settings) -> Iterator[str]:
    import ray
    from ray import cloudpickle

    from computer.actors import NAMESPACE

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    name = f"audit-agent-{uuid.uuid4().hex[:10]}"
    yield name
    try:
        ray.kill(ray.get_actor(agent_actor_name(name), namespace=NAMESPACE))
    except ValueError:
        pass


async def test_a_durable_agents_calls_carry_its_name(cluster: Settings, agent_name: str) -> None:
    agent: Any = spawn(AuditedAgent, agent_name)
    assert (await agent.chat.remote("go")).text == "done"
    # The owner commits its audit batch up to FLUSH_DELAY after the call, off the call's path (a
    # reader in another process sees it then, later on a loaded machine): wait for it, bounded.
    fs = FileSystem.open(str(workspace_file(cluster, agent_name)), readonly=True)
    try:
        deadline = time.monotonic() + 30.0
        records = await fs.audit.query(kind="tool")
        while len(records) < len(CALLS) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            records = await fs.audit.query(kind="tool")
    finally:
        fs.close()
    assert [(r.tool, r.status) for r in records] == [("write", "ok"), ("list", "ok"), ("read", "error")]
    assert {r.caller.get("agent") for r in records} == {agent_name}
