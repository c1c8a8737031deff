"""Every adapter turns any argument parse failure into a tool error, never an exception (issue 17, item 8).

The hostile inputs: JSON nested 1,000+ deep (``json.loads`` raised ``RecursionError`` out of the
OpenAI ``execute``), the same depth as an already-parsed dict (LangChain's ``str()`` of its input raised
``RecursionError``), invalid JSON and JSON that is not an object. Each must come back as the adapter's
own error shape, and the next call must still work.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from computer.tools import Tool
from computer.tools._arguments import MAX_ARGUMENT_DEPTH, ArgumentError, nesting_problem, parse_arguments
from computer.tools.openai import create_openai_tools

DEEP = 5_000


def deep_json(depth: int = DEEP) -> str:
    return '{"path": "/a", "content": ' + "[" * depth + "]" * depth + "}"


def deep_dict(depth: int = DEEP) -> dict[str, Any]:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return {"path": "/a", "content": value}


BAD_STRINGS = {
    "deep-array": deep_json(),
    "deep-object": '{"path": "/a", "content": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}",
    "just-over-the-cap": deep_json(MAX_ARGUMENT_DEPTH + 1),
    "invalid": '{"path": ',
    "array": "[1, 2]",
    "string": '"put"',
    "number": "1e999999",
    "null": "null",
}
NEEDLES = {
    "deep-array": "nested",
    "deep-object": "nested",
    "just-over-the-cap": "nested",
    "invalid": "not valid JSON",
    "array": "JSON object",
    "string": "JSON object",
    "number": "JSON object",
    "null": "JSON object",
}


@pytest.mark.parametrize("case", list(BAD_STRINGS))
def test_parse_arguments_names_the_problem(case: str) -> None:
    with pytest.raises(ArgumentError, match=NEEDLES[case]):
        parse_arguments(BAD_STRINGS[case], "put")


def test_parse_arguments_accepts_objects_and_nothing() -> None:
    assert parse_arguments(None) == {} and parse_arguments("") == {}
    assert parse_arguments('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    assert parse_arguments({"a": 1}) == {"a": 1}
    assert nesting_problem(deep_dict(MAX_ARGUMENT_DEPTH - 2)) is None
    assert nesting_problem(deep_dict(MAX_ARGUMENT_DEPTH)) is not None


async def test_core_tool_run_rejects_a_deep_dict(sample_tools: dict[str, Tool]) -> None:
    result = await sample_tools["put"].run(deep_dict())
    assert "nested" in result["error"]


# --- OpenAI-format (chat and anthropic shapes) ---------------------------------------------------


def openai_call(arguments: Any) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "put", "arguments": arguments}}


@pytest.mark.parametrize("case", list(BAD_STRINGS))
async def test_openai_execute_returns_an_error_for_bad_argument_strings(
    sample_tools: dict[str, Tool], case: str
) -> None:
    _, execute = create_openai_tools(sample_tools)
    outcome = await execute(openai_call(BAD_STRINGS[case]))
    assert outcome["is_error"] is True
    assert NEEDLES[case] in outcome["content"][0]["text"]
    ok = await execute(openai_call(json.dumps({"path": "/a", "content": "fine"})))
    assert ok["is_error"] is False


async def test_openai_execute_returns_an_error_for_a_deep_dict_and_odd_calls(
    sample_tools: dict[str, Tool],
) -> None:
    _, execute = create_openai_tools(sample_tools)
    assert (await execute(openai_call(deep_dict())))["is_error"] is True
    assert (await execute(openai_call(["not", "an", "object"])))["is_error"] is True

    class Exploding:
        @property
        def function(self) -> Any:
            raise RuntimeError("boom")

    assert (await execute(Exploding()))["is_error"] is True
    _, anthropic = create_openai_tools(sample_tools, format="anthropic")
    outcome = await anthropic({"id": "t1", "name": "put", "input": deep_json()})
    assert outcome["is_error"] is True and "nested" in outcome["content"][0]["text"]


# --- LangChain ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(BAD_STRINGS))
async def test_langchain_tool_returns_an_error_for_bad_string_input(
    sample_tools: dict[str, Tool], case: str
) -> None:
    pytest.importorskip("langchain_core")
    from computer.tools.langchain import create_langchain_tools

    tool = create_langchain_tools(sample_tools, format="object")["put"]
    content = await tool.ainvoke(BAD_STRINGS[case])
    assert isinstance(content, str) and content.startswith("Error:") and NEEDLES[case] in content


async def test_langchain_tool_call_with_deep_or_odd_args_is_an_error_message(
    sample_tools: dict[str, Tool],
) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.messages import ToolMessage

    from computer.tools.langchain import create_langchain_tools

    tool = create_langchain_tools(sample_tools, format="object")["put"]
    message = await tool.ainvoke({"name": "put", "args": deep_dict(), "id": "c1", "type": "tool_call"})
    assert isinstance(message, ToolMessage) and message.status == "error" and "nested" in message.content
    for odd in ([1, 2], 7):
        assert "JSON object" in await tool.ainvoke(odd)
    ok = await tool.ainvoke(
        {"name": "put", "args": {"path": "/a", "content": "x"}, "id": "c2", "type": "tool_call"}
    )
    assert isinstance(ok, ToolMessage) and ok.status == "success"
    assert await tool.ainvoke(json.dumps({"path": "/b", "content": "y"}))  # a JSON object string is fine


# --- pydantic-ai -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["deep-array", "deep-object", "invalid", "array", "null"])
async def test_pydantic_ai_bad_argument_strings_become_retry_prompts(
    sample_tools: dict[str, Tool], case: str
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from computer.tools.pydantic_ai import create_pydantic_ai_tools

    sent = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not sent:
            sent.append(True)
            return ModelResponse(parts=[ToolCallPart("put", BAD_STRINGS[case], tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(sample_tools)])
    result = await agent.run("go")
    assert result.output == "done"
    retries = [
        part
        for message in result.all_messages()
        for part in getattr(message, "parts", [])
        if isinstance(part, RetryPromptPart)
        or (isinstance(part, ToolReturnPart) and part.outcome == "retried")
    ]
    assert len(retries) == 1 and NEEDLES[case] in str(retries[0].content)


async def test_pydantic_ai_deep_dict_is_a_retry_not_a_crash(sample_tools: dict[str, Tool]) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import ModelRetry

    from computer.tools.pydantic_ai import _ArgsValidator

    validator = _ArgsValidator(sample_tools["put"])
    with pytest.raises(ModelRetry, match="nested"):
        validator.validate_python(deep_dict())
    with pytest.raises(ModelRetry, match="nested"):
        validator.validate_json(deep_json())
    assert validator.validate_json('{"path": "/a", "content": "x"}') == {"path": "/a", "content": "x"}


# --- MCP ---------------------------------------------------------------------------------------


async def test_mcp_call_with_deep_arguments_is_an_error_result(sample_tools: dict[str, Tool]) -> None:
    pytest.importorskip("mcp")
    import mcp_types as types
    from mcp import Client

    from computer.tools.mcp import create_mcp_server

    async with Client(create_mcp_server(sample_tools)) as client:
        deep = await client.call_tool("put", deep_dict(MAX_ARGUMENT_DEPTH + 10))
        ok = await client.call_tool("put", {"path": "/a", "content": "x"})
    assert deep.is_error is True
    assert isinstance(deep.content[0], types.TextContent) and "nested" in deep.content[0].text
    assert ok.is_error is False


async def test_langchain_discover_tools_screens_its_input_too(sample_tools: dict[str, Tool]) -> None:
    pytest.importorskip("langchain_core")
    from computer.tools.langchain import create_langchain_tools

    discover = create_langchain_tools(sample_tools, lazy="all", format="object")["discover_tools"]
    assert "nested" in await discover.ainvoke({"names": deep_dict()})
    assert "not valid JSON" in await discover.ainvoke("{bad")
    assert "Tools you can enable" in await discover.ainvoke({})
