"""Every declaration and result shape checked by the ecosystems' own validators, not by ours.

- ``openai``: ``ChatCompletionToolParam`` (chat), ``FunctionToolParam`` (Responses declarations),
  ``FunctionCallOutput`` (Responses results);
- ``anthropic``: ``ToolParam``, and ``transform_schema`` leaving every strict schema unchanged;
- ``jsonschema``: Draft 2020-12 meta-schema on every schema every adapter emits, and the declared
  schemas accept the calls the tools accept;
- pydantic-ai's ``OpenAIJsonSchemaTransformer``: every schema we declare strict, it finds strict too.

A TypedDict validated by pydantic drops keys it does not know, so "valid" here means the validated
value equals the input: an unknown or misspelled key fails the test.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import TypeAdapter

pytest.importorskip("openai")
pytest.importorskip("anthropic")

import anthropic
from anthropic.types import ToolParam, ToolResultBlockParam
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from openai.types.responses import FunctionToolParam
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer

from computer.tools import Tool
from computer.tools.openai import create_openai_tools

from ._every_tool import GOOD
from .conftest import make_sample_tools, materialised

CONSTRAINED = ["prefer", "require", False]


def _exactly(adapter: TypeAdapter[Any], value: Any) -> None:
    assert materialised(adapter.validate_python(value)) == value


@pytest.mark.parametrize("constrained", CONSTRAINED)
@pytest.mark.parametrize(
    ("api", "param_type", "parameters_key"),
    [
        ("chat", ChatCompletionToolParam, ("function", "parameters")),
        ("responses", FunctionToolParam, ("parameters",)),
    ],
)
def test_openai_declarations_are_the_openai_packages_tool_params(
    every_tool: dict[str, Tool], constrained: Any, api: Any, param_type: Any, parameters_key: tuple[str, ...]
) -> None:
    """Chat: ``ChatCompletionToolParam``; Responses: ``FunctionToolParam``; schemas Draft 2020-12."""
    tools, _ = create_openai_tools(every_tool, api=api, constrained_sampling=constrained)
    adapter = TypeAdapter(param_type)
    for declaration in tools:
        _exactly(adapter, declaration)
        schema: Any = declaration
        for key in parameters_key:
            schema = schema[key]
        jsonschema.Draft202012Validator.check_schema(schema)


def _call(name: str, args: Any, call_id: str = "call_1") -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


async def test_every_responses_output_is_a_function_call_output(every_tool: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(every_tool, api="responses")
    adapter = TypeAdapter(FunctionCallOutput)
    calls = [_call(name, args) for name, args in GOOD.items()]
    calls += [
        _call("read", {"path": "/workspace/missing"}),
        _call("grep", {"query": "x", "ignorecase": True}),
        _call("nope", {}),
        _call("ls", "{not json"),
        {"type": "message", "call_id": "c"},
    ]
    for call in calls:
        _exactly(adapter, await execute(call))
    # Media: the sample set's image and PDF become input_image / input_file items.
    _, media = create_openai_tools(make_sample_tools(), api="responses")
    for kind in ("image", "pdf"):
        output = await media(_call("show", {"kind": kind}))
        _exactly(adapter, output)
        assert isinstance(output["output"], list)


@pytest.mark.parametrize("constrained", CONSTRAINED)
def test_anthropic_declarations_are_tool_params_and_strict_ones_survive_transform_schema(
    every_tool: dict[str, Tool], constrained: Any
) -> None:
    tools, _ = create_openai_tools(every_tool, format="anthropic", constrained_sampling=constrained)
    adapter = TypeAdapter(ToolParam)
    strict = set()
    for declaration in tools:
        _exactly(adapter, declaration)
        schema = declaration["input_schema"]
        jsonschema.Draft202012Validator.check_schema(schema)
        if declaration.get("strict"):
            strict.add(declaration["name"])
            # Anthropic's own normaliser must have nothing left to move, strip or refuse.
            assert anthropic.transform_schema(schema) == schema, declaration["name"]
    expected = {"read", "write", "edit", "delete", "publish", "kill"} if constrained else set()
    assert strict == expected


def test_anthropic_strict_schemas_state_their_bounds_in_words(every_tool: dict[str, Tool]) -> None:
    tools, _ = create_openai_tools(every_tool, format="anthropic")
    by_name = {t["name"]: t for t in tools}
    read = by_name["read"]["input_schema"]["properties"]
    assert read["offset"] == {
        "type": "integer",
        "description": "1-based line to start from. Pass the previous result's nextOffset. (at least 1)",
        "title": "Offset",
    }
    assert by_name["read"]["input_schema"]["required"] == ["path"]
    kill = by_name["kill"]["input_schema"]["properties"]
    assert kill["pid"]["type"] == "integer" and "(at least 1)" in kill["pid"]["description"]
    # The listing tools are not strict and keep their bounds as JSON Schema keywords.
    assert by_name["ls"].get("strict") is None
    assert by_name["ls"]["input_schema"]["properties"]["limit"]["maximum"] == 1000


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses"])
async def test_declared_schemas_accept_what_the_tools_accept_and_reject_unknown_names(
    every_tool: dict[str, Tool], fmt: str
) -> None:
    if fmt == "responses":
        tools, _ = create_openai_tools(every_tool, api="responses")
        schemas = {t["name"]: t["parameters"] for t in tools}
    elif fmt == "anthropic":
        tools, _ = create_openai_tools(every_tool, format="anthropic")
        schemas = {t["name"]: t["input_schema"] for t in tools}
    else:
        tools, _ = create_openai_tools(every_tool)
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for name, args in GOOD.items():
        validator = jsonschema.Draft202012Validator(schemas[name])
        sent = dict(args)
        if fmt != "anthropic" and schemas[name].get("required") == list(schemas[name]["properties"]):
            # A strict OpenAI model sends every field, null for the ones it leaves out.
            sent = {key: args.get(key) for key in schemas[name]["properties"]}
        assert list(validator.iter_errors(sent)) == [], (name, sent)
        result = await every_tool[name].run(sent)
        assert "error" not in result or name == "kill", (name, result)
        assert not validator.is_valid({**sent, "bogus": 1})


def test_pydantic_ai_finds_our_strict_schemas_strict(every_tool: dict[str, Tool]) -> None:
    tools, _ = create_openai_tools(every_tool)
    checked = 0
    for declaration in tools:
        function = declaration["function"]
        judged = OpenAIJsonSchemaTransformer(function["parameters"], strict=None)
        walked = judged.walk()
        if function.get("strict"):
            checked += 1
            assert judged.is_strict_compatible, function["name"]
            # Forcing strict changes nothing but the titles pydantic-ai strips anyway.
            forced = OpenAIJsonSchemaTransformer(function["parameters"], strict=True).walk()
            assert forced == walked
        else:
            assert not judged.is_strict_compatible, function["name"]
    assert checked == len(tools) - 1


def test_only_exec_is_open_in_openai_strict_mode(every_tool: dict[str, Tool]) -> None:
    """exec's free-form ``input`` and ``env`` map cannot be strict; everything else is."""
    tools, _ = create_openai_tools(every_tool)
    assert {t["function"]["name"] for t in tools if not t["function"].get("strict")} == {"exec"}


async def test_bounds_moved_out_of_anthropic_schemas_are_still_enforced_by_the_tools(
    every_tool: dict[str, Tool],
) -> None:
    tools, execute = create_openai_tools(every_tool, format="anthropic")
    schemas = {t["name"]: t["input_schema"] for t in tools}
    for name, args in [("read", {"path": "/workspace/a.txt", "limit": 0}), ("kill", {"pid": 0})]:
        assert jsonschema.Draft202012Validator(schemas[name]).is_valid(args)  # the grammar allows it
        out = await execute({"type": "tool_use", "id": "t", "name": name, "input": args})
        assert out["is_error"] is True and "greater than or equal to 1" in out["content"][0]["text"]


def test_every_input_and_output_schema_is_draft_2020_12(every_tool: dict[str, Tool]) -> None:
    """What MCP (inputSchema/outputSchema), LangChain (args_schema) and pydantic-ai pass on as is."""
    for tool in every_tool.values():
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
        if tool.output_schema is not None:
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)


async def test_anthropic_results_are_tool_result_blocks(every_tool: dict[str, Tool]) -> None:
    """``{"type": "tool_result", "tool_use_id", "content": out["content"], "is_error"}`` as documented."""
    adapter = TypeAdapter(ToolResultBlockParam)
    for tools in (every_tool, make_sample_tools()):
        _, execute = create_openai_tools(tools, format="anthropic")
        calls = [(name, args) for name, args in GOOD.items() if name in tools]
        calls += [("show", {"kind": "image"}), ("show", {"kind": "pdf"}), ("read", {"path": 1}), ("nope", {})]
        for name, args in calls:
            out = await execute({"type": "tool_use", "id": "toolu_1", "name": name, "input": args})
            block = {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": out["content"],
                "is_error": out["is_error"],
            }
            _exactly(adapter, block)


async def test_chat_results_are_tool_messages_and_media_user_content(every_tool: dict[str, Tool]) -> None:
    """Text parts make the ``role: "tool"`` message; an image part is valid user-message content."""
    message = TypeAdapter(ChatCompletionToolMessageParam)
    part = TypeAdapter(ChatCompletionContentPartParam)
    for tools in (every_tool, make_sample_tools()):
        _, execute = create_openai_tools(tools)
        calls = [(name, args) for name, args in GOOD.items() if name in tools]
        calls += [("show", {"kind": "image"}), ("show", {"kind": "pdf"}), ("nope", {})]
        for name, args in calls:
            out = await execute(
                {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            )
            text = [p for p in out["content"] if p["type"] == "text"]
            _exactly(message, {"role": "tool", "tool_call_id": "c1", "content": text})
            for media in (p for p in out["content"] if p["type"] != "text"):
                _exactly(part, media)
