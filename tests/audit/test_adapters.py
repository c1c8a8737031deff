"""Each tool called through each adapter leaves exactly one audit record naming that adapter."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from computer import Workspace
from computer.assets import SqliteAssetStore
from computer.runtime.shell import ShellBackend

# One call of every tool, in an order where each succeeds.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": "/workspace/src/a.py", "content": "print('hi')\n"}),
    ("read", {"path": "/workspace/src/a.py"}),
    ("ls", {"path": "/workspace/src"}),
    ("find", {"pattern": "**/*.py"}),
    ("grep", {"query": "hi"}),
    ("edit", {"path": "/workspace/src/a.py", "edits": [{"oldText": "hi", "newText": "hello"}]}),
    ("exec", {"command": "cat src/a.py"}),
    ("publish", {"path": "/workspace/src/a.py"}),
    ("delete", {"path": "/workspace/src/a.py"}),
]

Runner = Callable[[str, dict[str, Any]], Awaitable[Any]]


async def _openai(ws: Workspace) -> Runner:
    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(ws)

    async def run(name: str, args: dict[str, Any]) -> Any:
        call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        return await execute(call)

    return run


async def _langchain(ws: Workspace) -> Runner:
    pytest.importorskip("langchain_core")
    from computer.tools.langchain import create_langchain_tools

    tools = create_langchain_tools(ws, format="object")

    async def run(name: str, args: dict[str, Any]) -> Any:
        return await tools[name].ainvoke({"type": "tool_call", "name": name, "args": args, "id": "c1"})

    return run


async def _mcp(ws: Workspace) -> Runner:
    pytest.importorskip("mcp")
    from mcp import Client

    from computer.tools.mcp import create_mcp_server

    server = create_mcp_server(ws)

    async def run(name: str, args: dict[str, Any]) -> Any:
        async with Client(server) as client:
            return await client.call_tool(name, args)

    return run


async def _pydantic_ai(ws: Workspace) -> Runner:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from computer.tools.pydantic_ai import create_pydantic_ai_tools

    toolset = create_pydantic_ai_tools(ws)

    async def run(name: str, args: dict[str, Any]) -> Any:
        calls = [ToolCallPart(name, args, tool_call_id="c1")]

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[calls.pop()]) if calls else ModelResponse(parts=[TextPart("done")])

        return await Agent(FunctionModel(model), toolsets=[toolset]).run("go")

    return run


ADAPTERS = {"openai": _openai, "langchain": _langchain, "mcp": _mcp, "pydantic_ai": _pydantic_ai}


@pytest.mark.parametrize("adapter", list(ADAPTERS))
async def test_each_tool_through_each_adapter_leaves_one_record(adapter: str, tmp_path: Path) -> None:
    store = SqliteAssetStore(tmp_path / "assets")
    async with Workspace(str(tmp_path / "w.sqlite"), backends=[ShellBackend()], assets=store) as ws:
        run = await ADAPTERS[adapter](ws)
        for name, args in CALLS:
            top = ws.audit.top()
            await run(name, args)
            records = await ws.audit.query(since=top, kind="tool")
            assert [(r.tool, r.status, r.caller.get("adapter")) for r in records] == [
                (name, "ok", adapter)
            ], (
                name,
                records,
            )
            assert records[0].caller["client"] == "local"
        # The run and the link leave their own records too.
        (run_record,) = await ws.audit.query(kind="exec")
        assert run_record.detail["exit_code"] == 0 and run_record.args["command"] == "cat src/a.py"
        (share,) = await ws.audit.query(kind="share")
        assert share.args["path"] == "/workspace/src/a.py" and share.detail["url"].startswith("http")
    await store.close()


async def test_a_failed_call_through_an_adapter_is_one_error_record(tmp_path: Path) -> None:
    async with Workspace(str(tmp_path / "w.sqlite")) as ws:
        run = await _openai(ws)
        await run("read", {"path": "/nope"})
        await run("read", {"path": "/x", "unknown": 1})
        records = await ws.audit.query()
    assert [(r.tool, r.status) for r in records] == [("read", "error"), ("read", "error")]
    assert "unknown" in str(records[1].error)


@pytest.mark.parametrize("adapter", list(ADAPTERS))
async def test_a_call_refused_before_the_tool_runs_is_one_error_record(adapter: str) -> None:
    """A misspelled argument is refused by pydantic-ai's validation, before the tool runs: recorded too."""
    async with Workspace() as ws:
        run = await ADAPTERS[adapter](ws)
        await run("read", {"file_path": "/x"})
        ws.audit.flush()
        records = await ws.audit.query()
    assert [(r.tool, r.status, r.caller.get("adapter")) for r in records] == [("read", "error", adapter)]
    assert "'file_path' (did you mean 'path'?)" in str(records[0].error)


@pytest.mark.parametrize("shape", ["chat", "responses", "anthropic"])
async def test_unparsable_arguments_and_unknown_tools_are_recorded(shape: str) -> None:
    from computer.tools.openai import create_openai_tools

    async with Workspace() as ws:
        options: dict[str, Any] = {"format": "anthropic"} if shape == "anthropic" else {"api": shape}
        _, execute = create_openai_tools(ws, **options)
        for name, raw in [("read", "{not json"), ("rm_rf", '{"path": "/"}')]:
            if shape == "anthropic":
                await execute({"type": "tool_use", "id": "t1", "name": name, "input": raw})
            elif shape == "responses":
                await execute({"type": "function_call", "call_id": "c1", "name": name, "arguments": raw})
            else:
                await execute({"id": "c1", "type": "function", "function": {"name": name, "arguments": raw}})
        ws.audit.flush()
        records = await ws.audit.query()
    adapter = "anthropic" if shape == "anthropic" else "openai"
    assert [(r.tool, r.status, r.caller.get("adapter")) for r in records] == [
        ("read", "error", adapter),
        ("rm_rf", "error", adapter),
    ]
    assert "not valid JSON" in str(records[0].error) and records[0].args == {"arguments": "{not json"}
    assert "Unknown tool 'rm_rf'" in str(records[1].error)


async def test_langchain_and_mcp_record_what_they_refuse() -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from computer.tools.langchain import create_langchain_tools
    from computer.tools.mcp import create_mcp_server

    async with Workspace() as ws:
        tools = create_langchain_tools(ws, format="object")
        await tools["read"].ainvoke({"type": "tool_call", "name": "read", "args": "{not json", "id": "c1"})
        async with Client(create_mcp_server(ws)) as client:
            with pytest.raises(MCPError):
                await client.call_tool("rm_rf", {"path": "/"})
        ws.audit.flush()
        records = await ws.audit.query()
    assert [(r.tool, r.status, r.caller.get("adapter")) for r in records] == [
        ("read", "error", "langchain"),
        ("rm_rf", "error", "mcp"),
    ]


async def test_arguments_that_cannot_even_be_read_are_an_error_and_a_record() -> None:
    """An SDK object whose arguments raise when looked at: ``execute`` still answers, and records it."""
    from computer.tools.openai import create_openai_tools

    class Unreadable:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("cannot compare")

        __hash__ = object.__hash__

    async with Workspace() as ws:
        _, execute = create_openai_tools(ws)
        call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": Unreadable()}}
        outcome = await execute(call)
        ws.audit.flush()
        records = await ws.audit.query()
    assert outcome["is_error"] is True and "Malformed tool call" in outcome["content"][0]["text"]
    assert [(r.tool, r.status) for r in records] == [("read", "error")]
