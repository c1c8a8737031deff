"""The exec tool looks and answers the same through every adapter (SPEC section 10, "Exec tool").

Parameters ``command`` (required), ``backend``, ``cwd``, ``env``, ``input``, ``timeout``; a result that
carries ``skipped: [{path, reason}]`` when the run left something out. Runs use the scripted runtime.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from computer.runtime.types import ExecResult
from computer.tools import Tool
from computer.tools.exec import create_exec_tool
from computer.tools.openai import create_openai_tools

from ._fake_runtime import PYTHON, SHELL, ScriptedRuntime, ScriptedWorkspace

PARAMETERS = {"command", "backend", "cwd", "env", "input", "timeout"}
FINAL = ExecResult(
    "completed",
    0,
    "ok\n",
    "",
    skipped=["/workspace/pipe", "/workspace/huge.bin"],
    skipped_reasons={"/workspace/pipe": "a FIFO is never pulled"},
)
SKIPPED = [
    {"path": "/workspace/pipe", "reason": "a FIFO is never pulled"},
    {"path": "/workspace/huge.bin", "reason": "left out of the sync"},
]
CALL = {"command": "mkfifo pipe", "timeout": 5}


def exec_tools() -> tuple[dict[str, Tool], ScriptedRuntime]:
    rt = ScriptedRuntime([SHELL, PYTHON], final=FINAL)
    return {"exec": create_exec_tool(ScriptedWorkspace(rt))}, rt


def check_schema(schema: dict[str, Any]) -> None:
    assert set(schema["properties"]) == PARAMETERS
    assert schema["required"] == ["command"]
    assert schema["properties"]["timeout"]["maximum"] == 3600


async def test_openai_chat_and_anthropic_declare_and_answer_the_same() -> None:
    tools, rt = exec_tools()
    for format, key in (("openai", "function"), ("anthropic", None)):
        declarations, execute = create_openai_tools(tools, format=format)  # type: ignore[arg-type]
        declaration = declarations[0][key] if key else declarations[0]
        check_schema(declaration["parameters"] if key else declaration["input_schema"])
        call: dict[str, Any] = (
            {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": json.dumps(CALL)}}
            if key
            else {"id": "c1", "name": "exec", "input": CALL}
        )
        outcome = await execute(call)
        assert outcome["is_error"] is False
        assert json.loads(outcome["content"][0]["text"])["skipped"] == SKIPPED
    assert [c["timeout"] for c in rt.calls] == [5.0, 5.0]
    assert {c["backend"] for c in rt.calls} == {"shell"}


async def test_langchain_declares_and_answers_the_same() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.messages import ToolMessage

    from computer.tools.langchain import create_langchain_tools

    tools, rt = exec_tools()
    tool = create_langchain_tools(tools, format="object")["exec"]
    assert isinstance(tool.args_schema, dict)
    check_schema(tool.args_schema)
    message = await tool.ainvoke({"name": "exec", "args": CALL, "id": "c1", "type": "tool_call"})
    assert isinstance(message, ToolMessage)
    assert message.artifact["skipped"] == SKIPPED
    assert rt.calls[0]["timeout"] == 5.0


async def test_pydantic_ai_declares_and_answers_the_same() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from computer.tools.pydantic_ai import create_pydantic_ai_tools

    tools, rt = exec_tools()
    seen: dict[str, Any] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.update({t.name: t.parameters_json_schema for t in info.function_tools})
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("exec", CALL, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(tools)]).run("go")
    check_schema(seen["exec"])
    returned = [
        part
        for message in result.all_messages()
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]
    assert json.loads(str(returned[0].content))["skipped"] == SKIPPED
    assert rt.calls[0]["timeout"] == 5.0


async def test_mcp_declares_and_answers_the_same() -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from computer.tools.mcp import create_mcp_server

    tools, rt = exec_tools()
    async with Client(create_mcp_server(tools)) as client:
        listing = await client.list_tools()
        result = await client.call_tool("exec", CALL)
    check_schema(listing.tools[0].input_schema)
    assert result.is_error is False
    assert result.structured_content is not None and result.structured_content["skipped"] == SKIPPED
    assert rt.calls[0]["timeout"] == 5.0


async def test_openai_responses_declares_and_answers_the_same() -> None:
    tools, rt = exec_tools()
    declarations, execute = create_openai_tools(tools, api="responses")
    check_schema(declarations[0]["parameters"])
    assert declarations[0]["strict"] is False  # env is a map: strict mode cannot express it
    output = await execute(
        {"type": "function_call", "call_id": "c1", "name": "exec", "arguments": json.dumps(CALL)}
    )
    assert json.loads(output["output"])["skipped"] == SKIPPED
    assert rt.calls[0]["timeout"] == 5.0
