"""A LangGraph agent with workspace tools: approval interrupts and exec progress events, offline.

A fake chat model replays scripted tool calls; pass any LangChain chat model instead. ``approve``
pauses mutating calls with ``interrupt()``; ``stream_event_name`` forwards exec snapshots to the
``custom`` stream mode while the command runs.

    python examples/langgraph_agent.py
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command

import computer
from computer.runtime import ShellBackend
from computer.tools.langchain import create_langchain_tools


class ScriptedChatModel(GenericFakeChatModel):
    """Replays scripted messages; a real model would choose the calls itself."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


async def main() -> None:
    async with computer.Workspace(backends=[ShellBackend()]) as workspace:
        await workspace.fs.mkdir("/workspace")
        tools = create_langchain_tools(workspace, approve=["delete"], stream_event_name="exec_progress")
        model = ScriptedChatModel(
            messages=iter(
                [
                    call(
                        "exec",
                        {"command": "for i in 1 2 3; do echo step $i | tee -a log.txt; sleep 0.3; done"},
                        "c1",
                    ),
                    call("ls", {"path": "/workspace"}, "c2"),
                    call("delete", {"path": "/workspace/log.txt"}, "c3"),
                    AIMessage(content="Cleaned up."),
                ]
            )
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent's successor lives in the `langchain` package
            agent = create_react_agent(model, tools, checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "demo"}}

        async for mode, chunk in agent.astream(
            {"messages": [("user", "Run a job, then clean up.")]}, config, stream_mode=["custom", "updates"]
        ):
            if mode == "custom":
                print(f"[{chunk['event']}] {chunk['data']['status']}: {chunk['data']['stdout']!r}")
            elif "__interrupt__" in chunk:
                request = chunk["__interrupt__"][0].value
                print(f"approval requested: {request['tool']}({request['args']})")

        state = await agent.ainvoke(Command(resume=True), config)
        for message in state["messages"]:
            if isinstance(message, ToolMessage):
                print(f"{message.name}: {str(message.content)[:100]}")
        print("agent:", state["messages"][-1].content)


if __name__ == "__main__":
    asyncio.run(main())
