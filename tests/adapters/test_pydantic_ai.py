"""pydantic-ai adapter: agent runs with FunctionModel/TestModel, retries, failures, media, approval."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, BinaryContent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from computer.tools import Tool
from computer.tools.pydantic_ai import create_pydantic_ai_tools

from .conftest import PNG


class ScriptedModel:
    """A FunctionModel body that makes one scripted tool call per turn, then answers "done"."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.calls = list(calls)
        self.tool_defs: dict[str, Any] = {}

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tool_defs = {t.name: t for t in info.function_tools}
        if self.calls:
            name, args = self.calls.pop(0)
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{len(self.calls)}")])
        return ModelResponse(parts=[TextPart("done")])


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart | RetryPromptPart]:
    return [
        part
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    ]


async def test_agent_sees_the_tools_own_names_descriptions_and_schemas(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel([])
    await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(sample_tools)]).run("hi")
    assert list(model.tool_defs) == list(sample_tools)
    for name, tool in sample_tools.items():
        assert model.tool_defs[name].parameters_json_schema == tool.parameters
        assert model.tool_defs[name].description == tool.description


async def test_a_scripted_run_calls_the_tools(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel(
        [("put", {"path": "/a", "content": "one\ntwo"}), ("get", {"path": "/a", "limit": 1})]
    )
    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(sample_tools)]).run("go")
    assert result.output == "done"
    put, get = returns(result.all_messages())
    assert isinstance(put, ToolReturnPart) and put.content == '{"path": "/a", "bytesWritten": 7}'
    assert isinstance(get, ToolReturnPart) and '"content": "one"' in str(get.content)


async def test_invalid_arguments_become_a_retry_prompt(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel([("get", {"path": "/a", "limit": 0})])
    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(sample_tools)]).run("go")
    (retry,) = returns(result.all_messages())
    assert isinstance(retry, ToolReturnPart) and retry.outcome == "retried"
    assert "limit" in str(retry.content)


async def test_a_failed_operation_reaches_the_model_as_a_failure(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel([("get", {"path": "/missing"})])
    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(sample_tools)]).run("go")
    (failed,) = returns(result.all_messages())
    assert isinstance(failed, ToolReturnPart) and failed.outcome == "failed"
    assert "No such file or directory: /missing" in str(failed.content)


async def test_an_image_reaches_the_model_as_binary_content(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel([("show", {"kind": "image"})])
    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(sample_tools)]).run("go")
    (shown,) = returns(result.all_messages())
    assert isinstance(shown, ToolReturnPart)
    binaries = [c for c in shown.content if isinstance(c, BinaryContent)]
    assert [(b.media_type, b.data) for b in binaries] == [("image/png", PNG)]


async def test_test_model_calls_every_tool_through_the_schemas(sample_tools: dict[str, Tool]) -> None:
    tools = {name: sample_tools[name] for name in ("put", "run")}
    agent = Agent(TestModel(), toolsets=[create_pydantic_ai_tools(tools)])
    result = await agent.run("go")
    called = {p.tool_name for p in returns(result.all_messages()) if isinstance(p, ToolReturnPart)}
    assert called == {"put", "run"}


async def test_approval_pauses_and_resumes_with_deferred_results(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel([("put", {"path": "/a", "content": "x"}), ("get", {"path": "/a"})])
    agent = Agent(
        FunctionModel(model),
        toolsets=[create_pydantic_ai_tools(sample_tools, approve="mutating")],
        output_type=[str, DeferredToolRequests],
    )
    first = await agent.run("go")
    assert isinstance(first.output, DeferredToolRequests)
    (pending,) = first.output.approvals
    assert pending.tool_name == "put"
    assert not await _written(sample_tools, "/a")

    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={pending.tool_call_id: True}),
    )
    assert second.output == "done"
    get = returns(second.all_messages())[-1]
    assert isinstance(get, ToolReturnPart) and '"content": "x"' in str(get.content)


async def test_a_denied_call_does_not_run(sample_tools: dict[str, Tool]) -> None:
    model = ScriptedModel([("put", {"path": "/a", "content": "x"})])
    agent = Agent(
        FunctionModel(model),
        toolsets=[create_pydantic_ai_tools(sample_tools, approve=["put"])],
        output_type=[str, DeferredToolRequests],
    )
    first = await agent.run("go")
    assert isinstance(first.output, DeferredToolRequests)
    call_id = first.output.approvals[0].tool_call_id
    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call_id: ToolDenied("not now")}),
    )
    assert "not now" in str(returns(second.all_messages())[-1].content)
    assert not await _written(sample_tools, "/a")


def test_approve_with_an_unknown_name_is_rejected(sample_tools: dict[str, Tool]) -> None:
    with pytest.raises(ValueError, match="wrtie"):
        create_pydantic_ai_tools(sample_tools, approve=["wrtie"])


async def _written(tools: dict[str, Tool], path: str) -> bool:
    """Whether the sample store holds ``path`` (its files are private to the tools)."""
    return "error" not in await tools["get"].run({"path": path})


async def test_cancelling_the_agent_run_kills_a_running_exec() -> None:
    import asyncio

    from computer.runtime.types import ExecSnapshot
    from computer.tools.exec import create_exec_tool

    from ._fake_runtime import SHELL, ScriptedRuntime, ScriptedWorkspace

    rt = ScriptedRuntime(
        [SHELL], hang=True, snapshots=[ExecSnapshot("exec-1", "shell", "running", None, "", "")]
    )
    toolset = create_pydantic_ai_tools({"exec": create_exec_tool(ScriptedWorkspace(rt))})
    agent = Agent(FunctionModel(ScriptedModel([("exec", {"command": "sleep 100"})])), toolsets=[toolset])
    run = asyncio.create_task(agent.run("go"))
    await asyncio.wait_for(rt.waiting.wait(), 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert rt.handles[0].killed


async def test_exec_snapshots_reach_the_event_stream() -> None:
    from collections.abc import AsyncIterable

    from pydantic_ai import RunContext

    from computer.runtime.types import ExecSnapshot
    from computer.tools.exec import create_exec_tool
    from computer.tools.pydantic_ai import ExecProgressEvent

    from ._fake_runtime import SHELL, ScriptedRuntime, ScriptedWorkspace

    snaps = [
        ExecSnapshot("exec-1", "shell", "running", None, "a\n", "", seq=1),
        ExecSnapshot("exec-1", "shell", "completed", 0, "a\nb\n", "", done=True, seq=2),
    ]
    rt = ScriptedRuntime([SHELL], snapshots=snaps)
    toolset = create_pydantic_ai_tools({"exec": create_exec_tool(ScriptedWorkspace(rt))})
    seen: list[ExecProgressEvent] = []

    async def handler(ctx: RunContext[Any], events: AsyncIterable[Any]) -> None:
        async for event in events:
            if isinstance(event, ExecProgressEvent):
                seen.append(event)

    # A streamed run (event_stream_handler needs one): TestModel streams and calls exec once.
    await Agent(TestModel(call_tools=["exec"]), toolsets=[toolset]).run("go", event_stream_handler=handler)
    assert [(e.tool_name, e.snapshot["stdout"]) for e in seen] == [("exec", "a\n"), ("exec", "a\nb\n")]
