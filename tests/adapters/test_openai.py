"""OpenAI-format adapter: declarations, strict mode, execute over tool-call dicts and SDK-like objects."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.tools import Tool
from computer.tools._adapter_schema import StrictSchemaError, drop_unaccepted_nulls, strict_schema
from computer.tools.openai import create_openai_tools

from .conftest import PNG, json_of, text_of
from .strict_rules import strict_violations


def call(name: str, args: Any, call_id: str = "call_1") -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_declarations_have_the_openai_shape(sample_tools: dict[str, Tool]) -> None:
    tools, _ = create_openai_tools(sample_tools, constrained_sampling=False)
    assert [t["function"]["name"] for t in tools] == list(sample_tools)
    put = tools[0]
    assert put["type"] == "function"
    assert put["function"]["description"] == "Write a file."
    assert put["function"]["parameters"] == sample_tools["put"].parameters
    assert all("strict" not in t["function"] for t in tools)


def test_prefer_makes_every_expressible_tool_strict(sample_tools: dict[str, Tool]) -> None:
    tools, _ = create_openai_tools(sample_tools)
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    for name in ("put", "get", "change", "show"):
        assert by_name[name]["strict"] is True
        assert strict_violations(by_name[name]["parameters"]) == [], name
    # `run` has a free-form `input`: strict mode cannot express it, so it stays open.
    assert "strict" not in by_name["run"]
    assert by_name["run"]["parameters"] == sample_tools["run"].parameters


def test_strict_schema_makes_optional_fields_required_and_nullable(sample_tools: dict[str, Tool]) -> None:
    schema = strict_schema(sample_tools["get"].parameters)
    assert schema["required"] == ["path", "offset", "limit"]
    assert schema["properties"]["limit"]["type"] == ["integer", "null"]
    assert "default" not in schema["properties"]["limit"]
    nested = strict_schema(sample_tools["change"].parameters)
    assert strict_violations(nested) == []
    assert nested["$defs"]["Change"]["required"] == ["oldText", "newText"]


def test_strict_schema_refuses_free_form_values_and_maps() -> None:
    with pytest.raises(StrictSchemaError, match="free-form"):
        strict_schema({"type": "object", "properties": {"x": {}}})
    with pytest.raises(StrictSchemaError, match="map"):
        strict_schema(
            {
                "type": "object",
                "properties": {"env": {"type": "object", "additionalProperties": {"type": "string"}}},
            }
        )


def test_require_fails_creation_when_a_constrained_tool_cannot_be_strict(
    sample_tools: dict[str, Tool],
) -> None:
    tools = dict(sample_tools)
    tools["read"] = Tool(
        "read", "free-form read", sample_tools["run"].input_model, sample_tools["run"].handler
    )
    with pytest.raises(ValueError, match=r"require.*read"):
        create_openai_tools(tools, constrained_sampling="require")
    declared, _ = create_openai_tools(tools, constrained_sampling="prefer")
    assert "strict" not in next(d for d in declared if d["function"]["name"] == "read")["function"]


def test_require_with_strict_capable_tools_declares_them_strict(sample_tools: dict[str, Tool]) -> None:
    tools = {"read": sample_tools["get"], "write": sample_tools["put"], "edit": sample_tools["change"]}
    declared, _ = create_openai_tools(tools, constrained_sampling="require")
    assert all(d["function"]["strict"] for d in declared)


async def test_execute_runs_a_call_and_returns_text(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    out = await execute(call("put", {"path": "/a", "content": "x\ny"}))
    assert out == {
        "content": [{"type": "text", "text": '{"path": "/a", "bytesWritten": 3}'}],
        "is_error": False,
    }


async def test_execute_accepts_sdk_like_objects(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    await execute(call("put", {"path": "/a", "content": "hello"}))
    sdk_call = SimpleNamespace(
        id="call_9", type="function", function=SimpleNamespace(name="get", arguments='{"path": "/a"}')
    )
    out = await execute(sdk_call)
    assert json_of(out["content"])["content"] == "hello"


async def test_strict_nulls_are_dropped_where_the_tool_refuses_them(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    await execute(call("put", {"path": "/a", "content": "1\n2\n3"}))
    out = await execute(call("get", {"path": "/a", "offset": None, "limit": None}))
    assert not out["is_error"], out
    assert json_of(out["content"])["content"] == "1\n2\n3"


async def test_a_null_the_tool_accepts_is_kept(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    out = await execute(call("run", {"command": "go", "input": None}))
    assert json_of(out["content"])["inputWasNull"] is True
    assert drop_unaccepted_nulls({"command": "go", "input": None}, sample_tools["run"].parameters) == {
        "command": "go",
        "input": None,
    }


async def test_a_null_on_a_required_field_still_fails(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    out = await execute(call("get", {"path": None}))
    assert out["is_error"] is True
    assert "path" in text_of(out["content"])


@pytest.mark.parametrize(
    ("tool_call", "needle"),
    [
        (call("get", "{not json"), "not valid JSON"),
        (call("nope", {}), "Unknown tool 'nope'"),
        (call("get", {"path": "/a", "limit": 0}), "limit"),
        (call("get", "[1, 2]"), "must be a JSON object"),
        ({"id": "x"}, "Malformed tool call"),
        (call("get", {"path": "/missing"}), "No such file"),
    ],
)
async def test_bad_calls_come_back_as_errors(
    sample_tools: dict[str, Tool], tool_call: Any, needle: str
) -> None:
    _, execute = create_openai_tools(sample_tools)
    out = await execute(tool_call)
    assert out["is_error"] is True
    assert needle in text_of(out["content"])


async def test_an_image_becomes_an_image_url_part(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    out = await execute(call("show", {"kind": "image"}))
    image = out["content"][1]
    assert image["type"] == "image_url"
    prefix = "data:image/png;base64,"
    assert image["image_url"]["url"].startswith(prefix)
    assert base64.b64decode(image["image_url"]["url"][len(prefix) :]) == PNG


async def test_a_pdf_becomes_text_saying_it_cannot_be_attached(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    out = await execute(call("show", {"kind": "pdf"}))
    assert [p["type"] for p in out["content"]] == ["text", "text"]
    assert "cannot be attached" in out["content"][1]["text"]


async def test_execute_forwards_updates(sample_tools: dict[str, Tool]) -> None:
    _, execute = create_openai_tools(sample_tools)
    seen: list[dict[str, Any]] = []

    async def on_update(update: dict[str, Any]) -> None:
        seen.append(update)

    await execute(call("run", {"command": "go"}), on_update=on_update)
    assert seen == [{"status": "running", "stdout": "tick\n"}]


async def test_anthropic_format_declares_and_runs_tool_use_blocks(sample_tools: dict[str, Tool]) -> None:
    tools, execute = create_openai_tools(sample_tools, format="anthropic")
    put = tools[0]
    assert set(put) >= {"name", "description", "input_schema"}
    assert strict_violations(put["input_schema"]) == []
    out = await execute(
        {"type": "tool_use", "id": "toolu_1", "name": "put", "input": {"path": "/a", "content": "x"}}
    )
    assert out["is_error"] is False
    image = (await execute({"id": "t2", "name": "show", "input": {"kind": "image"}}))["content"][1]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()},
    }
    pdf = (await execute({"id": "t3", "name": "show", "input": {"kind": "pdf"}}))["content"][1]
    assert pdf["type"] == "document" and pdf["source"]["media_type"] == "application/pdf"


def test_invalid_options_are_rejected(sample_tools: dict[str, Tool]) -> None:
    with pytest.raises(ValueError, match="constrained_sampling"):
        create_openai_tools(sample_tools, constrained_sampling="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format"):
        create_openai_tools(sample_tools, format="gemini")  # type: ignore[arg-type]


async def test_the_real_tool_set_declares_strict_schemas_that_obey_the_rules() -> None:
    import computer
    from computer.runtime import PythonBackend, ShellBackend

    async with computer.Workspace(backends=[ShellBackend(), PythonBackend()]) as ws:
        for mode in ("prefer", "require"):
            tools, _ = create_openai_tools(ws, constrained_sampling=mode)
            strict = {t["function"]["name"]: t["function"] for t in tools if t["function"].get("strict")}
            assert set(strict) == {"read", "ls", "find", "grep", "write", "edit", "delete"}
            for name, function in strict.items():
                assert strict_violations(function["parameters"]) == [], name
            exec_decl = next(t["function"] for t in tools if t["function"]["name"] == "exec")
            assert "strict" not in exec_decl


async def test_real_tools_accept_what_a_strict_model_sends() -> None:
    import computer
    from computer.runtime import PythonBackend, ShellBackend

    async with computer.Workspace(backends=[ShellBackend(), PythonBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        _, execute = create_openai_tools(ws)
        await execute(call("write", {"path": "/workspace/f.txt", "content": "a\nb\n"}))
        read = await execute(
            call("read", {"path": "/workspace/f.txt", "offset": None, "byteOffset": None, "limit": None})
        )
        assert read == {"content": [{"type": "text", "text": "a\nb"}], "is_error": False}
        grep_args = {
            "path": None, "query": "b", "include": None, "exclude": None, "regex": None,
            "ignoreCase": None, "context": None, "limit": None, "offset": None,
        }  # fmt: skip
        grep = await execute(call("grep", grep_args))
        assert not grep["is_error"], grep
        assert json_of(grep["content"])["matches"][0]["line"] == 2
        value = await execute(
            call("exec", {"backend": "python", "command": "def main(x):\n    return x", "input": None})
        )
        assert json_of(value["content"])["value"] is None


def test_a_ref_with_a_description_is_inlined_for_strict_mode() -> None:
    schema = {
        "type": "object",
        "$defs": {"Item": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}},
        "properties": {"item": {"$ref": "#/$defs/Item", "description": "One item."}},
        "required": ["item"],
    }
    strict = strict_schema(schema)
    assert strict_violations(strict) == []
    assert strict["properties"]["item"]["description"] == "One item."
    assert strict["properties"]["item"]["properties"] == {"a": {"type": "string"}}


REQUIRED_ARGS = {
    "read": {"path": "/workspace/n.txt"},
    "ls": {"path": "/workspace"},
    "find": {"pattern": "*.txt"},
    "grep": {"query": "x"},
    "write": {"path": "/workspace/n.txt", "content": "x"},
    "edit": {"path": "/workspace/n.txt", "edits": [{"oldText": "x", "newText": "y"}]},
    "delete": {"path": "/workspace/gone"},
}


@pytest.mark.parametrize("name", list(REQUIRED_ARGS))
async def test_every_optional_field_sent_as_null_is_accepted(name: str) -> None:
    import computer

    async with computer.Workspace() as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/n.txt", "x\n")
        tools, execute = create_openai_tools(ws)
        declared = next(t["function"] for t in tools if t["function"]["name"] == name)
        args = {key: REQUIRED_ARGS[name].get(key) for key in declared["parameters"]["properties"]}
        assert set(args) == set(declared["parameters"]["required"])  # what a strict model must send
        out = await execute(call(name, args))
        assert out["is_error"] is False, out


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_calls = st.one_of(
    _json,
    st.builds(
        lambda name, args: {"id": "c", "type": "function", "function": {"name": name, "arguments": args}},
        st.sampled_from(["put", "get", "change", "show", "run", "nope", ""]) | st.text(max_size=8),
        _json | _json.map(json.dumps) | st.text(max_size=30),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tool_call=_calls, fmt=st.sampled_from(["openai", "anthropic"]))
async def test_execute_never_raises(sample_tools: dict[str, Tool], tool_call: Any, fmt: str) -> None:
    _, execute = create_openai_tools(sample_tools, format=fmt)  # type: ignore[arg-type]
    out = await execute(tool_call)
    assert set(out) == {"content", "is_error"} and isinstance(out["is_error"], bool)
    assert all(part["type"] in ("text", "image_url", "image", "document") for part in out["content"])
