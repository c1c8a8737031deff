"""OpenAI adapter with ``api="responses"`` (SPEC section 10): Responses API function tools, and an
``execute`` that takes a ``function_call`` item and returns a ``function_call_output`` item."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest

from computer.tools import Tool
from computer.tools.openai import create_openai_tools

from .conftest import PNG
from .strict_rules import strict_violations


def item(name: str, args: Any, call_id: str = "call_9") -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name, "arguments": arguments}


def test_declarations_are_flat_function_tools_with_an_explicit_strict(sample_tools: dict[str, Tool]) -> None:
    tools, _ = create_openai_tools(sample_tools, api="responses")
    by_name = {t["name"]: t for t in tools}
    assert list(by_name) == list(sample_tools)
    for name, declaration in by_name.items():
        assert set(declaration) == {"type", "name", "description", "parameters", "strict"}
        assert declaration["type"] == "function"
        assert declaration["description"] == sample_tools[name].description
    assert by_name["put"]["strict"] is True and strict_violations(by_name["put"]["parameters"]) == []
    # Strict is the Responses default, so a tool strict mode cannot express says strict: false.
    assert by_name["run"]["strict"] is False
    assert by_name["run"]["parameters"] == sample_tools["run"].parameters
    loose, _ = create_openai_tools(sample_tools, api="responses", constrained_sampling=False)
    assert all(t["strict"] is False for t in loose)


async def test_execute_returns_a_function_call_output_item(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools, api="responses")
    output = await execute(item("put", {"path": "/a", "content": "hey"}))
    assert output == {
        "type": "function_call_output",
        "call_id": "call_9",
        "output": json.dumps({"path": "/a", "bytesWritten": 3}),
    }
    # A strict-mode model sends null for an optional field; it is dropped as in the chat shape.
    got = await execute(item("get", {"path": "/a", "offset": None, "limit": None}))
    assert json.loads(got["output"])["content"] == "hey"


async def test_sdk_objects_work_too(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools, api="responses")
    call = SimpleNamespace(
        type="function_call", call_id="c2", name="put", arguments='{"path": "/b", "content": "x"}'
    )
    output = await execute(call)
    assert output["call_id"] == "c2" and json.loads(output["output"])["bytesWritten"] == 1


async def test_media_becomes_input_image_and_input_file(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools, api="responses")
    image = (await execute(item("show", {"kind": "image"})))["output"]
    assert image[0] == {"type": "input_text", "text": "Read /p.png"}
    assert image[1]["type"] == "input_image"
    assert image[1]["image_url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    pdf = (await execute(item("show", {"kind": "pdf"})))["output"]
    assert pdf[1]["type"] == "input_file" and pdf[1]["filename"] == "d.pdf"
    assert pdf[1]["file_data"].startswith("data:application/pdf;base64,")


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (item("get", "{not json"), "not valid JSON"),
        (item("get", "[1]"), "JSON object"),
        (item("get", '{"path": ' + "[" * 3000 + "]" * 3000 + "}"), "nested"),
        (item("nope", {}), "Unknown tool"),
        (item("get", {"path": "/a", "bogus": 1}), "bogus"),
        ({"type": "message", "call_id": "c3", "name": "get"}, "function_call"),
        ({"type": "function_call", "call_id": "c4", "arguments": "{}"}, "name"),
    ],
)
async def test_bad_items_come_back_as_error_output_never_raise(
    sample_tools: dict[str, Tool], call: dict[str, Any], needle: str
) -> None:
    _, execute = create_openai_tools(sample_tools, api="responses")
    output = await execute(call)
    assert output["type"] == "function_call_output"
    assert output["output"].startswith("Error:") and needle in output["output"]
    assert output["call_id"] == call.get("call_id")


def test_bad_api_choices_are_errors(sample_tools: dict[str, Tool]) -> None:
    with pytest.raises(ValueError, match="api"):
        create_openai_tools(sample_tools, api="completions")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format"):
        create_openai_tools(sample_tools, api="responses", format="anthropic")


def test_chat_stays_the_default(sample_tools: dict[str, Tool]) -> None:
    default, _ = create_openai_tools(sample_tools)
    chat, _ = create_openai_tools(sample_tools, api="chat")
    assert default == chat and all("function" in t for t in chat)


async def test_an_integer_call_id_is_echoed_as_its_digits(sample_tools: dict[str, Tool]) -> None:
    """A ``call_id`` sent as an integer came back as ``""``: the output paired with no call."""
    _, execute = create_openai_tools(sample_tools, api="responses")
    call = {
        "type": "function_call",
        "call_id": 7,
        "name": "put",
        "arguments": '{"path": "/c", "content": "x"}',
    }
    assert (await execute(call))["call_id"] == "7"
    sdk = SimpleNamespace(type="function_call", call_id=12, name="get", arguments='{"path": "/c"}')
    assert (await execute(sdk))["call_id"] == "12"
    assert (await execute({**call, "call_id": None}))["call_id"] == ""
    assert (await execute({**call, "call_id": True}))["call_id"] == ""
    bad = await execute({"type": "function_call", "call_id": 8, "name": "nope", "arguments": "{}"})
    assert bad["call_id"] == "8" and "nope" in bad["output"]
