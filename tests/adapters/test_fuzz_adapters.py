"""Random JSON thrown at every tool through every adapter: nothing escapes, misspellings are named.

Each adapter is driven the way its library drives it (an OpenAI chat tool call, a Responses
``function_call`` item, an Anthropic ``tool_use`` block, a LangChain tool call, an MCP client
``tools/call``, a pydantic-ai agent run). Arguments are arbitrary JSON, or a valid call with extra
random names, or a valid call with one name misspelled (case, a letter dropped or added, snake case).
Whatever comes in, the adapter answers with its own result shape; and when a name was misspelled,
the answer quotes it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")
pytest.importorskip("pydantic_ai")
pytest.importorskip("langchain_core")

from computer.tools import Tool, create_tools
from computer.tools._arguments import argument_names

from ._every_tool import GOOD, EverySurface, every_surface

ADAPTERS = ["chat", "responses", "anthropic", "langchain", "mcp", "pydantic_ai"]

# Text as models send it, lone surrogates included (a JSON escape such as "\ud83d" of a string cut
# inside a pair: json.loads reads it; hypothesis's default text has none).
texts = st.text(max_size=12) | st.builds(
    lambda a, s, b: a + s + b,
    st.text(max_size=4),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=4),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def misspellings(name: str) -> list[str]:
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    variants = [name.lower(), name.upper(), name + "s", name[:-1], "_" + name, snake + "_", name.title()]
    if len(name) > 3:
        variants.append(name[0] + name[2:])  # a letter dropped
    return variants


def misspelled_call(tool: Tool, draw: Any) -> tuple[dict[str, Any], str] | None:
    accepted, shown = argument_names(tool.input_model)
    accepted = accepted | set(getattr(tool.input_model, "extra_argument_names", ()))
    candidates = [
        (key, wrong) for key in shown for wrong in misspellings(key) if wrong and wrong not in accepted
    ]
    if not candidates:
        return None
    key, wrong = draw(st.sampled_from(candidates))
    args = {k: v for k, v in GOOD[tool.name].items() if k != key}
    args[wrong] = GOOD[tool.name].get(key, draw(json_values))
    return args, wrong


@st.composite
def calls(draw: Any, tools: dict[str, Tool]) -> tuple[str, Any, str | None]:
    name = draw(st.sampled_from(sorted(tools)))
    kind = draw(st.sampled_from(["random", "extra", "misspelled", "surrogate"]))
    texts_of = [key for key, value in GOOD[name].items() if isinstance(value, str)]
    if kind == "surrogate" and texts_of:  # a valid call, one text cut inside a surrogate pair
        key = draw(st.sampled_from(texts_of))
        return name, {**GOOD[name], key: GOOD[name][key] + "\ud83d"}, None
    if kind == "misspelled":
        found = misspelled_call(tools[name], draw)
        if found is not None:
            return name, found[0], found[1]
    if kind == "extra":
        extra = draw(st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=3))
        return name, {**GOOD[name], **extra}, None
    return name, draw(json_values), None


Runner = Callable[[str, Any], Awaitable[tuple[str, bool]]]


def chat_runner(tools: dict[str, Tool]) -> Runner:
    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(tools)

    async def run(name: str, args: Any) -> tuple[str, bool]:
        out = await execute(
            {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        )
        assert set(out) == {"content", "is_error"} and isinstance(out["is_error"], bool)
        return json.dumps(out["content"]), out["is_error"]

    return run


def responses_runner(tools: dict[str, Tool]) -> Runner:
    from openai.types.responses.response_input_item_param import FunctionCallOutput
    from pydantic import TypeAdapter

    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(tools, api="responses")
    adapter = TypeAdapter(FunctionCallOutput)

    async def run(name: str, args: Any) -> tuple[str, bool]:
        item = {"type": "function_call", "call_id": "c1", "name": name, "arguments": json.dumps(args)}
        out = await execute(item)
        assert adapter.validate_python(out) == out
        text = out["output"] if isinstance(out["output"], str) else json.dumps(out["output"])
        return text, text.startswith("Error:")

    return run


def anthropic_runner(tools: dict[str, Tool]) -> Runner:
    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(tools, format="anthropic")

    async def run(name: str, args: Any) -> tuple[str, bool]:
        out = await execute({"type": "tool_use", "id": "toolu_1", "name": name, "input": args})
        assert set(out) == {"content", "is_error"}
        return json.dumps(out["content"]), out["is_error"]

    return run


def langchain_runner(tools: dict[str, Tool]) -> Runner:
    from langchain_core.messages import ToolMessage

    from computer.tools.langchain import create_langchain_tools

    wrapped = create_langchain_tools(tools, format="object")

    async def run(name: str, args: Any) -> tuple[str, bool]:
        message = await wrapped[name].ainvoke({"type": "tool_call", "id": "t1", "name": name, "args": args})
        assert isinstance(message, ToolMessage)
        return str(message.content), message.status == "error"

    return run


def mcp_runner(tools: dict[str, Tool]) -> Runner:
    from mcp import Client

    from computer.tools.mcp import create_mcp_server

    server = create_mcp_server(tools)

    async def run(name: str, args: Any) -> tuple[str, bool]:
        if not isinstance(args, dict):
            return "not sent: MCP arguments are an object by the protocol's own types", True
        async with Client(server) as client:
            result = await client.call_tool(name, args)
        return json.dumps([c.model_dump() for c in result.content]), bool(result.is_error)

    return run


def pydantic_ai_runner(tools: dict[str, Tool]) -> Runner:
    from pydantic_ai import Agent
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

    toolset = create_pydantic_ai_tools(tools)

    async def run(name: str, args: Any) -> tuple[str, bool]:
        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart(name, json.dumps(args), tool_call_id="c1")])
            return ModelResponse(parts=[TextPart("done")])

        result = await Agent(FunctionModel(model), toolsets=[toolset]).run("go")
        assert result.output == "done"
        (answer,) = [
            part
            for message in result.all_messages()
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        return str(
            answer.model_response_str() if hasattr(answer, "model_response_str") else answer.content
        ), (answer.outcome != "success")

    return run


RUNNERS: dict[str, Callable[[dict[str, Tool]], Runner]] = {
    "chat": chat_runner,
    "responses": responses_runner,
    "anthropic": anthropic_runner,
    "langchain": langchain_runner,
    "mcp": mcp_runner,
    "pydantic_ai": pydantic_ai_runner,
}


@pytest.fixture(scope="module")
async def surface() -> AsyncIterator[EverySurface]:
    s = await every_surface()
    yield s
    await s.close()


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_every_adapter_names_a_misspelled_field_and_lists_the_valid_ones(
    surface: EverySurface, adapter: str
) -> None:
    tools = create_tools(surface, processes=True)
    run = RUNNERS[adapter](tools)
    text, is_error = await run("grep", {"query": "alpha", "ignorecase": True})
    assert is_error
    assert "'ignorecase' (did you mean 'ignoreCase'?)" in text, text
    assert (
        "Valid arguments: limit, offset, path, query, include, exclude, regex, ignoreCase, context." in text
    )
    text, is_error = await run("read", {"path": "/workspace/a.txt", "startLine": 2})
    assert is_error and "'startLine' (did you mean 'offset'?)" in text, text


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_every_adapter_takes_null_for_an_optional_field(surface: EverySurface, adapter: str) -> None:
    """What a strict-mode model sends for a field it leaves out; the tool's default applies."""
    run = RUNNERS[adapter](create_tools(surface, processes=True))
    text, is_error = await run("ls", {"path": "/workspace", "limit": None, "offset": None})
    assert not is_error and "a.txt" in text, text
    text, is_error = await run("grep", {"query": "beta", "path": None, "include": None, "ignoreCase": None})
    assert not is_error and "/workspace/a.txt" in text, text
    text, is_error = await run("processes", {"backend": None})
    assert not is_error and "sleep 1000" in text, text


@pytest.mark.parametrize("adapter", ADAPTERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
async def test_random_json_through_every_adapter_never_escapes(
    surface: EverySurface, adapter: str, data: st.DataObject
) -> None:
    tools = create_tools(surface, processes=True)
    name, args, misspelled = data.draw(calls(tools))
    text, is_error = await RUNNERS[adapter](tools)(name, args)
    assert isinstance(text, str)
    text.encode("utf-8")  # an answer an agent loop can send on to its model
    if misspelled is not None:
        assert is_error, (name, args, text)
        assert repr(misspelled) in text or json.dumps(repr(misspelled))[1:-1] in text, (name, args, text)


@pytest.mark.parametrize("adapter", [a for a in ADAPTERS if a != "responses"])  # Responses has no flag
async def test_every_adapter_flags_a_result_carrying_an_error_and_keeps_its_output(
    surface: EverySurface, adapter: str
) -> None:
    """A run that failed outside the program (timed out, could not start) answers with its partial
    output and an ``error``: OpenAI and MCP flagged it as an error, LangChain and pydantic-ai as a
    success. A program's own non-zero exit is a result everywhere."""
    from computer.runtime.types import ExecResult

    run = RUNNERS[adapter](create_tools(surface, processes=True))
    before = surface.runtime.final
    try:
        surface.runtime.final = ExecResult(
            "cancelled", 124, "partial output\n", "", error="timed out after 1 s"
        )
        text, is_error = await run("exec", {"command": "sleep 100", "timeout": 1})
        assert is_error and "partial output" in text and "timed out after 1 s" in text, text
        surface.runtime.final = ExecResult("failed", 3, "", "boom\n")
        text, is_error = await run("exec", {"command": "exit 3"})
        assert not is_error and "boom" in text, text
    finally:
        surface.runtime.final = before


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_every_adapter_refuses_a_string_for_a_boolean(adapter: str) -> None:
    """``delete {"recursive": "yes"}`` deleted a tree: pydantic's lax mode took "yes" as true."""
    from computer import Workspace

    async with Workspace() as ws:
        await ws.fs.mkdir("/workspace/d/inner", recursive=True)
        run = RUNNERS[adapter](create_tools(ws))
        text, is_error = await run("delete", {"path": "/workspace/d", "recursive": "yes"})
        assert is_error and "recursive" in text and "true or false" in text, text
        assert await ws.fs.exists("/workspace/d/inner")
        text, is_error = await run("delete", {"path": "/workspace/d", "recursive": True})
        assert not is_error, text
        assert not await ws.fs.exists("/workspace/d")
