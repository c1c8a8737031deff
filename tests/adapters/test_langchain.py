"""LangChain adapter: tool invocation, LangGraph agents, approval interrupts, lazy tools, stream events."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command

from computer.runtime.types import ExecSnapshot
from computer.tools import Tool
from computer.tools.exec import create_exec_tool
from computer.tools.langchain import WorkspaceTool, create_langchain_tools, visible_tools

from ._fake_runtime import SHELL, ScriptedRuntime, ScriptedWorkspace
from .conftest import PNG
from .lc_fakes import scripted, tool_calls_turn

# create_react_agent is LangGraph's own agent graph; its successor lives in the separate `langchain` package.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


def tool_call(name: str, args: dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    return {"type": "tool_call", "name": name, "args": args, "id": call_id}


def by_name(tools: Any) -> dict[str, Any]:
    return {t.name: t for t in tools}


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_tools_carry_the_core_names_descriptions_and_schemas(sample_tools: dict[str, Tool]) -> None:
    tools = create_langchain_tools(sample_tools)
    assert isinstance(tools, list)
    for tool in tools:
        core = sample_tools[tool.name]
        assert tool.description == core.description
        assert tool.args_schema == core.parameters
        assert tool.tool_call_schema["properties"] == core.parameters["properties"]


async def test_invoking_a_tool_call_returns_content_and_the_result_artifact(
    sample_tools: dict[str, Tool],
) -> None:
    tools = by_name(create_langchain_tools(sample_tools))
    msg = await tools["put"].ainvoke(tool_call("put", {"path": "/a", "content": "hey"}))
    assert isinstance(msg, ToolMessage)
    assert msg.status == "success"
    assert json.loads(msg.content) == {"path": "/a", "bytesWritten": 3}
    assert msg.artifact == {"path": "/a", "bytesWritten": 3}


async def test_a_failed_call_is_an_error_tool_message(sample_tools: dict[str, Tool]) -> None:
    tools = by_name(create_langchain_tools(sample_tools))
    msg = await tools["get"].ainvoke(tool_call("get", {"path": "/missing"}))
    assert msg.status == "error"
    assert "No such file or directory: /missing" in msg.content
    bad = await tools["get"].ainvoke(tool_call("get", {"path": "/a", "limit": 0}))
    assert bad.status == "error" and "limit" in bad.content


async def test_an_image_is_a_multimodal_content_block(sample_tools: dict[str, Tool]) -> None:
    tools = by_name(create_langchain_tools(sample_tools))
    msg = await tools["show"].ainvoke(tool_call("show", {"kind": "image"}))
    text, image = msg.content
    assert text == {"type": "text", "text": "Read /p.png"}
    assert image["type"] == "image" and image["mime_type"] == "image/png"
    assert base64.b64decode(image["base64"]) == PNG
    pdf = (await tools["show"].ainvoke(tool_call("show", {"kind": "pdf"}))).content[1]
    assert pdf["type"] == "file" and pdf["mime_type"] == "application/pdf"


def test_object_format_keys_tools_by_name(sample_tools: dict[str, Tool]) -> None:
    tools = create_langchain_tools(sample_tools, format="object")
    assert isinstance(tools, dict) and list(tools) == list(sample_tools)
    assert all(isinstance(t, WorkspaceTool) for t in tools.values())


async def test_agent_graph_with_a_fake_model_runs_the_tools(sample_tools: dict[str, Tool]) -> None:
    model = scripted(
        tool_calls_turn(("put", {"path": "/n", "content": "a\nb"})),
        tool_calls_turn(("get", {"path": "/n", "limit": 1}), prefix="second"),
    )
    agent = create_react_agent(model, create_langchain_tools(sample_tools))
    state = await agent.ainvoke({"messages": [("user", "go")]})
    put, get = tool_messages(state)
    assert put.artifact == {"path": "/n", "bytesWritten": 3}
    assert get.artifact["content"] == "a"
    assert state["messages"][-1].content == "done"


async def test_approval_interrupts_and_resumes_under_langgraph(sample_tools: dict[str, Tool]) -> None:
    model = scripted(tool_calls_turn(("put", {"path": "/x", "content": "1"})))
    agent = create_react_agent(
        model, create_langchain_tools(sample_tools, approve="mutating"), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "approve-1"}}
    paused = await agent.ainvoke({"messages": [("user", "go")]}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value == {"type": "approval", "tool": "put", "args": {"path": "/x", "content": "1"}}
    assert "error" in await sample_tools["get"].run({"path": "/x"})

    state = await agent.ainvoke(Command(resume=True), config)
    (done,) = tool_messages(state)
    assert done.artifact == {"path": "/x", "bytesWritten": 1}
    assert "error" not in await sample_tools["get"].run({"path": "/x"})


async def test_a_denied_approval_does_not_run_and_tells_the_model(sample_tools: dict[str, Tool]) -> None:
    model = scripted(tool_calls_turn(("put", {"path": "/y", "content": "1"})))
    agent = create_react_agent(
        model, create_langchain_tools(sample_tools, approve=["put"]), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "deny-1"}}
    await agent.ainvoke({"messages": [("user", "go")]}, config)
    state = await agent.ainvoke(Command(resume={"approved": False, "message": "Ask first."}), config)
    (denied,) = tool_messages(state)
    assert denied.status == "error" and "denied" in denied.content and "Ask first." in denied.content
    assert "error" in await sample_tools["get"].run({"path": "/y"})


async def test_an_approval_can_edit_the_arguments(sample_tools: dict[str, Tool]) -> None:
    model = scripted(tool_calls_turn(("put", {"path": "/z", "content": "draft"})))
    agent = create_react_agent(
        model, create_langchain_tools(sample_tools, approve=["put"]), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "edit-1"}}
    await agent.ainvoke({"messages": [("user", "go")]}, config)
    await agent.ainvoke(
        Command(resume={"approved": True, "args": {"path": "/z", "content": "final"}}), config
    )
    assert (await sample_tools["get"].run({"path": "/z"}))["content"] == "final"


async def test_lazy_tools_are_withheld_until_discovered(sample_tools: dict[str, Tool]) -> None:
    tools = create_langchain_tools(sample_tools, lazy=["show", "run"])
    assert [t.name for t in visible_tools(tools)] == ["put", "get", "change", "discover_tools"]
    discover = by_name(tools)["discover_tools"]
    listing = await discover.ainvoke({})
    assert "- show: Show media." in listing and "- run: Run something." in listing
    assert "Enabled: show" in await discover.ainvoke({"names": ["show"]})
    assert [t.name for t in visible_tools(tools)] == ["put", "get", "change", "show", "discover_tools"]
    unknown = await discover.ainvoke(tool_call("discover_tools", {"names": ["nope"]}))
    assert unknown.status == "error"


async def test_lazy_discovery_in_an_agent_rebinds_the_model(sample_tools: dict[str, Tool]) -> None:
    tools = create_langchain_tools(sample_tools, lazy="all")
    model = scripted(
        tool_calls_turn(("discover_tools", {"names": ["put"]})),
        tool_calls_turn(("put", {"path": "/l", "content": "x"}), prefix="p"),
    )
    agent = create_react_agent(lambda state, runtime: model.bind_tools(visible_tools(tools)), tools)
    state = await agent.ainvoke({"messages": [("user", "go")]})
    assert model.bound[0] == ["discover_tools"]
    assert model.bound[1] == ["put", "discover_tools"]
    assert tool_messages(state)[-1].artifact == {"path": "/l", "bytesWritten": 1}


async def test_exec_snapshots_stream_as_custom_events() -> None:
    snaps = [
        ExecSnapshot("exec-1", "shell", "running", None, "a\n", "", seq=1),
        ExecSnapshot("exec-1", "shell", "completed", 0, "a\nb\n", "", done=True, seq=2),
    ]
    rt = ScriptedRuntime([SHELL], snapshots=snaps)
    core = {"exec": create_exec_tool(ScriptedWorkspace(rt))}
    tools = create_langchain_tools(core, stream_event_name="exec_progress")
    agent = create_react_agent(scripted(tool_calls_turn(("exec", {"command": "x"}))), tools)
    custom = [chunk async for chunk in agent.astream({"messages": [("user", "go")]}, stream_mode="custom")]
    assert [(c["event"], c["data"]["stdout"]) for c in custom] == [
        ("exec_progress", "a\n"),
        ("exec_progress", "a\nb\n"),
    ]
    events = [
        e
        async for e in tools[0].astream_events(tool_call("exec", {"command": "x"}), version="v2")
        if e["event"] == "on_custom_event"
    ]
    assert [(e["name"], e["data"]["status"]) for e in events] == [
        ("exec_progress", "running"),
        ("exec_progress", "completed"),
    ]


async def test_cancelling_the_graph_run_kills_a_running_exec() -> None:
    rt = ScriptedRuntime(
        [SHELL], hang=True, snapshots=[ExecSnapshot("exec-1", "shell", "running", None, "", "")]
    )
    tools = create_langchain_tools({"exec": create_exec_tool(ScriptedWorkspace(rt))})
    agent = create_react_agent(scripted(tool_calls_turn(("exec", {"command": "sleep 100"}))), tools)
    run = asyncio.create_task(agent.ainvoke({"messages": [("user", "go")]}))
    await asyncio.wait_for(rt.waiting.wait(), 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert rt.handles[0].killed


def test_fixed_result_tools_carry_an_output_schema_covering_failures() -> None:
    import computer
    from computer.tools import create_tools

    core = create_tools(computer.Workspace())
    tools = by_name(create_langchain_tools(core))
    for name in ("write", "edit", "delete"):
        schema = tools[name].output_json_schema
        assert schema is not None, name
        branches = schema.get("anyOf", [schema])
        assert any("error" in b.get("properties", {}) for b in branches), name
    assert tools["ls"].output_json_schema is None


def test_unknown_names_in_options_are_rejected(sample_tools: dict[str, Tool]) -> None:
    with pytest.raises(ValueError, match="approve"):
        create_langchain_tools(sample_tools, approve=["pu"])
    with pytest.raises(ValueError, match="lazy"):
        create_langchain_tools(sample_tools, lazy="some")


def test_sync_invoke_runs_the_async_tool(sample_tools: dict[str, Tool]) -> None:
    tools = by_name(create_langchain_tools(sample_tools))
    msg = tools["put"].invoke(tool_call("put", {"path": "/s", "content": "sync"}))
    assert msg.artifact == {"path": "/s", "bytesWritten": 4}


def test_naming_a_tool_the_set_lacks_is_accepted_when_it_is_optional() -> None:
    import computer

    tools = create_langchain_tools(computer.Workspace(), approve=["exec", "publish"], readonly=True)
    assert [t.name for t in tools] == ["read", "ls", "find", "grep"]
    assert not any(isinstance(t, WorkspaceTool) and t.needs_approval for t in tools)


async def test_parallel_calls_pause_separately_and_each_runs_once(sample_tools: dict[str, Tool]) -> None:
    runs: list[str] = []
    core = dict(sample_tools)
    put = sample_tools["put"]

    async def counting(params: Any, update: Any) -> dict[str, Any]:
        runs.append(params.path)
        return await put.handler(params, update)

    core["put"] = Tool("put", put.description, put.input_model, counting, mutating=True)
    model = scripted(
        tool_calls_turn(("put", {"path": "/p1", "content": "1"}), ("put", {"path": "/p2", "content": "2"}))
    )
    agent = create_react_agent(
        model, create_langchain_tools(core, approve=["put"]), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "parallel-1"}}
    paused = await agent.ainvoke({"messages": [("user", "go")]}, config)
    pending = paused["__interrupt__"]
    assert sorted(i.value["args"]["path"] for i in pending) == ["/p1", "/p2"]
    state = await agent.ainvoke(Command(resume={i.id: True for i in pending}), config)
    assert sorted(m.artifact["path"] for m in tool_messages(state)) == ["/p1", "/p2"]
    assert sorted(runs) == ["/p1", "/p2"]


async def test_openai_strict_declarations_pass_through_bind_tools_unchanged() -> None:
    """The documented way to strict mode with LangChain (``bind_tools(declarations)``): LangChain's
    conversion keeps each declaration, its own ``strict`` included (exec's free-form ``input`` is
    not strict; ``bind_tools(strict=True)`` would close it, and strict mode refuses a typeless value)."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from computer import Workspace
    from computer.runtime import PythonBackend
    from computer.tools.openai import create_openai_tools

    async with Workspace(backends=[PythonBackend()]) as ws:
        declarations, _ = create_openai_tools(ws)
    strict = {d["function"]["name"]: d["function"].get("strict") for d in declarations}
    assert strict["read"] is True and strict["edit"] is True and strict["exec"] is None
    assert [convert_to_openai_tool(d) for d in declarations] == declarations


async def test_every_failed_tool_call_is_an_error_message_carrying_its_result(
    sample_tools: dict[str, Tool],
) -> None:
    """``content_and_artifact`` promises an artifact on every message (langchain-tests'
    ``ToolsIntegrationTests``): a failed call's is its result, ``{"error": ...}`` as every adapter
    reports it. A bare error (a missing file, bad arguments, arguments that are no JSON object) was
    raised as a ``ToolException``, whose message had ``artifact=None``."""
    tools = by_name(create_langchain_tools(sample_tools))
    calls = [
        ({"path": "/missing"}, "No such file or directory: /missing"),
        ({"path": "/a", "limit": 0}, "limit"),
        ("[not an object", "not valid JSON"),
    ]
    for args, says in calls:
        msg = await tools["get"].ainvoke({"type": "tool_call", "name": "get", "args": args, "id": "c9"})
        assert isinstance(msg, ToolMessage) and msg.status == "error" and msg.tool_call_id == "c9"
        assert msg.content.startswith("Error: ") and says in msg.content
        assert msg.artifact == {"error": msg.content.removeprefix("Error: ")}
    # Invoked with bare arguments (no call id, so no message): the error's text, as before.
    assert (await tools["get"].ainvoke({"path": "/missing"})).startswith("Error: No such file")


async def test_a_denied_call_carries_its_error_as_artifact(sample_tools: dict[str, Tool]) -> None:
    model = scripted(tool_calls_turn(("put", {"path": "/y", "content": "1"})))
    agent = create_react_agent(
        model, create_langchain_tools(sample_tools, approve=["put"]), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "deny-artifact"}}
    await agent.ainvoke({"messages": [("user", "go")]}, config)
    state = await agent.ainvoke(Command(resume={"approved": False, "message": "Ask first."}), config)
    (denied,) = tool_messages(state)
    assert denied.status == "error"
    assert denied.artifact == {"error": "the user denied this put call. Ask first."}
    assert denied.content == "Error: the user denied this put call. Ask first."


async def test_the_input_schema_is_the_tools_own(sample_tools: dict[str, Tool]) -> None:
    """``get_input_schema()`` is the core tool's input model (its JSON schema is ``args_schema``), and
    ``discover_tools``' a model of its own: for a JSON-schema ``args_schema`` LangChain answers
    ``Runnable``'s generic input (a string, any dict or a tool call), which described no argument and
    refused a call with none."""
    from pydantic import ValidationError

    tools = by_name(create_langchain_tools(sample_tools, lazy=["show"]))
    for name, core in sample_tools.items():
        assert tools[name].get_input_schema() is core.input_model
        assert tools[name].get_input_jsonschema() == tools[name].args_schema
    assert tools["get"].get_input_schema()(path="/a", limit=3)
    discover = tools["discover_tools"].get_input_schema()
    assert discover().names is None and discover(names=["show"]).names == ["show"]
    with pytest.raises(ValidationError):
        discover(bogus=1)


async def test_a_failed_call_with_more_to_show_keeps_it_with_or_without_a_call_id(
    sample_tools: dict[str, Tool],
) -> None:
    """A failure carrying more than its error (an exec's partial output): an error message with that
    result as artifact under a call id; invoked with bare arguments, its content (never an exception)."""
    run = sample_tools["run"]

    async def timed_out(params: Any, update: Any) -> dict[str, Any]:
        return {"status": "cancelled", "timedOut": True, "stdout": "partial\n", "error": "timed out"}

    tools = by_name(create_langchain_tools({"run": Tool("run", run.description, run.input_model, timed_out)}))
    msg = await tools["run"].ainvoke(tool_call("run", {"command": "x"}))
    assert msg.status == "error" and msg.artifact["stdout"] == "partial\n" and "partial" in msg.content
    bare = await tools["run"].ainvoke({"command": "x"})
    assert json.loads(bare)["stdout"] == "partial\n"
