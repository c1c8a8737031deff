"""A durable agent on Ray, offline: it owns a workspace, asks before deleting, and outlives its process.

The model is a ``FunctionModel`` following a script (swap in any pydantic-ai model). The agent writes
a file with the workspace tools, counts lines with ``bash``, then wants to delete the file: that call
needs approval, so the turn pauses durably. The actor is killed; a new one picks the paused turn up,
the approval resumes it, and the conversation continues.

    python examples/agent_durable.py
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from typing import Any

import ray
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

import computer
from computer.agent import Agent, spawn, tool
from computer.runtime import Backend, ShellBackend

SCRIPT = [
    ToolCallPart(
        "write", {"path": "/workspace/todo.txt", "content": "milk\neggs\nbread\n"}, tool_call_id="w"
    ),
    ToolCallPart("bash", {"command": "wc -l < todo.txt"}, tool_call_id="b"),
    ToolCallPart("remove", {"path": "/workspace/todo.txt"}, tool_call_id="rm"),
]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turns = sum(
        isinstance(p, UserPromptPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts
    )
    if turns > 1:
        return ModelResponse(parts=[TextPart(f"This is turn {turns}; I remember the list.")])
    step = sum(isinstance(m, ModelResponse) for m in messages)
    if step < len(SCRIPT):
        return ModelResponse(parts=[SCRIPT[step]])
    return ModelResponse(parts=[TextPart("Wrote a 3-item list, counted it, and removed it.")])


class Shopper(Agent):
    def get_model(self) -> Model:
        return FunctionModel(scripted)

    def get_backends(self) -> Sequence[Backend]:
        return [ShellBackend()]  # in-process; by default the cluster's exec pools are used

    def get_tools(self) -> list[Any]:
        async def remove(path: str) -> str:
            """Delete a file."""
            await self.workspace.fs.rm(path)
            return f"removed {path}"

        return [tool(remove, needs_approval=lambda args: args["path"].endswith(".txt"))]


async def main() -> None:
    # A data directory of its own, removed at the end: the example leaves nothing behind.
    with tempfile.TemporaryDirectory(prefix="agent-example-", ignore_cleanup_errors=True) as data_dir:
        await run(data_dir)


async def run(data_dir: str) -> None:
    # Starting Ray and the agent's actor takes a few seconds (10-30 on a small, busy machine): say so.
    print("starting a local Ray and the agent's actor...", flush=True)
    computer.init(data_dir=data_dir)
    agent = spawn(Shopper, "shopper")
    reply = await agent.chat.remote("Make a shopping list, count it, then clean up.")
    for call in reply.pending:
        print(f"waiting for approval: {call.tool}({call.args}) [{call.id}]")

    ray.kill(agent)  # the process is gone; the paused turn is in the workspace's SQLite file
    while True:
        try:
            agent = spawn(Shopper, "shopper")
            pending = await agent.pending.remote()
            break
        except ray.exceptions.RayActorError:
            await asyncio.sleep(0.1)  # the killed actor's name is still being released
    print("after the restart, still pending:", [c.id for c in pending])
    reply = await agent.approve.remote(pending[0].id)
    print("agent:", reply.text)
    print("agent:", (await agent.chat.remote("Do you remember?")).text)
    async with computer.get_workspace(agent) as ws:
        print("todo.txt exists:", await ws.fs.exists("/workspace/todo.txt"))
    ray.kill(agent)


if __name__ == "__main__":
    asyncio.run(main())
