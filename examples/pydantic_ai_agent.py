"""A pydantic-ai agent with workspace tools and human approval of mutating calls, offline.

The model is a ``FunctionModel`` that follows a script; swap in ``Agent("openai:gpt-5", ...)`` for a
real one. Mutating tools (write, edit, delete, exec) need approval: the run ends with
``DeferredToolRequests``, and the next run resumes with ``DeferredToolResults``.

    python examples/pydantic_ai_agent.py
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import computer
from computer.runtime import ShellBackend
from computer.tools.pydantic_ai import create_pydantic_ai_tools

SCRIPT = [
    ToolCallPart("write", {"path": "/workspace/data.csv", "content": "x,y\n1,2\n3,4\n"}, tool_call_id="w"),
    ToolCallPart("exec", {"command": "awk -F, 'NR>1 {s+=$2} END {print s}' data.csv"}, tool_call_id="e"),
    ToolCallPart("grep", {"query": "3,4"}, tool_call_id="g"),
]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn < len(SCRIPT):
        return ModelResponse(parts=[SCRIPT[turn]])
    return ModelResponse(parts=[TextPart("The y column sums to 6.")])


async def main() -> None:
    async with computer.Workspace(backends=[ShellBackend()]) as workspace:
        await workspace.fs.mkdir("/workspace")
        agent = Agent(
            FunctionModel(scripted),
            toolsets=[create_pydantic_ai_tools(workspace, approve="mutating")],
            output_type=[str, DeferredToolRequests],
        )
        result = await agent.run("Sum the y column of a small CSV.")
        while isinstance(result.output, DeferredToolRequests):
            approvals = {}
            for call in result.output.approvals:
                print(f"approve {call.tool_name}({call.args_as_dict()})? yes")
                approvals[call.tool_call_id] = True
            result = await agent.run(
                message_history=result.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals=approvals),
            )
        for message in result.all_messages():
            for part in message.parts if isinstance(message, ModelRequest) else ():
                if isinstance(part, ToolReturnPart):
                    print(f"{part.tool_name} -> {str(part.content)[:100]}")
        print("agent:", result.output)
        print("file:", (await workspace.fs.read_text("/workspace/data.csv")).replace("\n", " | "))


if __name__ == "__main__":
    asyncio.run(main())
