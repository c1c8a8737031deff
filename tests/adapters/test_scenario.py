"""One scripted scenario through every adapter, each with its library's own machinery, same results.

Each adapter gets a fresh real ``Workspace(backends=[ShellBackend()])`` and the real ``create_tools``.
What the model would see (text, parsed as JSON where it is JSON, and images as bytes) must be identical
across the core tools, OpenAI-format ``execute``, a pydantic-ai ``FunctionModel`` agent, LangChain tool
invocation, a LangGraph agent with a fake chat model, and an MCP client session.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend
from computer.tools import create_tools

from .conftest import PNG

# Tool calls of the scenario, in order. Volatile fields (mtime, exec ids) are dropped before comparing.
SCENARIO: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": "/workspace/notes/todo.md", "content": "alpha\nbeta\ngamma\n"}),
    ("read", {"path": "/workspace/notes/todo.md"}),
    ("edit", {"path": "/workspace/notes/todo.md", "edits": [{"oldText": "beta", "newText": "BETA"}]}),
    ("grep", {"query": "BETA", "path": "/workspace"}),
    ("find", {"pattern": "**/*.md"}),
    ("ls", {"path": "/workspace/notes"}),
    ("exec", {"command": "wc -l < notes/todo.md; grep -c BETA notes/todo.md; echo made > notes/out.txt"}),
    ("read", {"path": "/workspace/notes/out.txt"}),
    ("read", {"path": "/workspace/pixel.png"}),
    ("read", {"path": "/workspace/missing.txt"}),
    ("delete", {"path": "/workspace/notes", "recursive": True}),
    ("ls", {"path": "/workspace"}),
]
VOLATILE = frozenset({"mtime", "id"})

Observed = list[Any]  # per call: a list of ("text", parsed) / ("image", media_type, bytes)
Steps = list[tuple[str, dict[str, Any]]]
Runner = Callable[[Any], Awaitable[list[Observed]]]


def text(value: str) -> tuple[str, Any]:
    try:
        return ("text", _strip(json.loads(value)))
    except ValueError:
        return ("text", value)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@pytest.fixture
async def workspace() -> AsyncIterator[Any]:
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/pixel.png", PNG)
        yield ws


async def run_core(ws: Any, steps: Steps = SCENARIO) -> list[Observed]:
    tools = create_tools(ws)
    observed = []
    for name, args in steps:
        parts = tools[name].to_model_output(await tools[name].run(args))
        observed.append(
            [
                text(p["text"])
                if p["type"] == "text"
                else ("image", p["media_type"], base64.b64decode(p["data"]))
                for p in parts
            ]
        )
    return observed


async def run_openai(ws: Any, steps: Steps = SCENARIO) -> list[Observed]:
    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(ws)
    observed = []
    for i, (name, args) in enumerate(steps):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        out = await execute(call)
        parts = []
        for part in out["content"]:
            if part["type"] == "text":
                parts.append(text(part["text"]))
            else:
                header, data = part["image_url"]["url"].split(",", 1)
                parts.append(("image", header[len("data:") : -len(";base64")], base64.b64decode(data)))
        observed.append(parts)
    return observed


async def run_pydantic_ai(ws: Any, steps: Steps = SCENARIO) -> list[Observed]:
    from pydantic_ai import Agent, BinaryContent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from computer.tools.pydantic_ai import create_pydantic_ai_tools

    pending = list(steps)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if pending:
            name, args = pending.pop(0)
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{len(pending)}")])
        return ModelResponse(parts=[TextPart("done")])

    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(ws)]).run("go")
    observed = []
    for message in result.all_messages():
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, ToolReturnPart):
                continue
            content = part.content if isinstance(part.content, list) else [part.content]
            items: list[Any] = []
            for item in content:
                if isinstance(item, BinaryContent):
                    items.append(("image", item.media_type, item.data))
                elif part.outcome == "failed":
                    items.append(text(f"Error: {item}"))  # ToolFailed carries the bare message
                else:
                    items.append(text(item))
            observed.append(items)
    return observed


def _langchain_content(content: Any) -> Observed:
    if isinstance(content, str):
        return [text(content)]
    return [
        text(b["text"]) if b["type"] == "text" else ("image", b["mime_type"], base64.b64decode(b["base64"]))
        for b in content
    ]


async def run_langchain(ws: Any, steps: Steps = SCENARIO) -> list[Observed]:
    from computer.tools.langchain import create_langchain_tools

    tools = create_langchain_tools(ws, format="object")
    assert isinstance(tools, dict)
    observed = []
    for i, (name, args) in enumerate(steps):
        msg = await tools[name].ainvoke({"type": "tool_call", "id": f"c{i}", "name": name, "args": args})
        observed.append(_langchain_content(msg.content))
    return observed


async def run_langgraph(ws: Any, steps: Steps = SCENARIO) -> list[Observed]:
    import warnings

    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt import create_react_agent

    from computer.tools.langchain import create_langchain_tools

    from .lc_fakes import scripted, tool_calls_turn

    turns = [tool_calls_turn((name, args), prefix=f"t{i}") for i, (name, args) in enumerate(steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(scripted(*turns), create_langchain_tools(ws))
    state = await agent.ainvoke({"messages": [("user", "go")]}, {"recursion_limit": 100})
    return [_langchain_content(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


async def run_mcp(ws: Any, steps: Steps = SCENARIO) -> list[Observed]:
    import mcp_types as types
    from mcp import Client

    from computer.tools.mcp import create_mcp_server

    observed = []
    async with Client(create_mcp_server(ws)) as client:
        for name, args in steps:
            result = await client.call_tool(name, args)
            parts: list[Any] = []
            for block in result.content:
                if isinstance(block, types.TextContent):
                    parts.append(text(block.text))
                elif isinstance(block, types.ImageContent):
                    parts.append(("image", block.mime_type, base64.b64decode(block.data)))
            observed.append(parts)
    return observed


RUNNERS: dict[str, Runner] = {
    "openai": run_openai,
    "pydantic_ai": run_pydantic_ai,
    "langchain": run_langchain,
    "langgraph": run_langgraph,
    "mcp": run_mcp,
}


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return {}


async def test_the_core_scenario_does_what_it_says(workspace: Any, reference: dict[str, Any]) -> None:
    observed = await run_core(workspace)
    by_step = dict(enumerate(observed))
    assert by_step[0] == [("text", {"path": "/workspace/notes/todo.md", "bytesWritten": 17})]
    assert by_step[1] == [("text", "alpha\nbeta\ngamma")]
    assert by_step[2][0][1]["editsApplied"] == 1
    assert by_step[3][0][1]["matches"] == [{"path": "/workspace/notes/todo.md", "line": 2, "text": "BETA"}]
    assert [e["path"] for e in by_step[4][0][1]["entries"]] == ["/workspace/notes/todo.md"]
    assert [e["name"] for e in by_step[5][0][1]["entries"]] == ["todo.md"]
    exec_result = by_step[6][0][1]
    assert (exec_result["status"], exec_result["exitCode"], exec_result["stdout"]) == (
        "completed",
        0,
        "3\n1\n",
    )
    assert by_step[7] == [("text", "made")]
    assert by_step[8][1] == ("image", "image/png", PNG)
    assert by_step[9] == [("text", "Error: No such file or directory: /workspace/missing.txt")]
    assert by_step[10][0][1] == {"deleted": "/workspace/notes"}
    assert [e["name"] for e in by_step[11][0][1]["entries"]] == ["pixel.png"]
    reference["core"] = observed


@pytest.mark.parametrize("adapter", list(RUNNERS))
async def test_every_adapter_yields_the_same_results(
    adapter: str, workspace: Any, reference: dict[str, Any]
) -> None:
    if "core" not in reference:
        async with computer.Workspace(backends=[ShellBackend()]) as ws:
            await ws.fs.mkdir("/workspace")
            await ws.fs.write_file("/workspace/pixel.png", PNG)
            reference["core"] = await run_core(ws)
    observed = await RUNNERS[adapter](workspace)
    assert len(observed) == len(SCENARIO)
    for step, ((name, _), want, got) in enumerate(zip(SCENARIO, reference["core"], observed, strict=True)):
        assert got == want, f"step {step} ({name}) differs through {adapter}"
