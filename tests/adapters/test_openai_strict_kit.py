"""OpenAI strict mode judged by the ``openai`` package itself, and a Chat Completions round trip with
the real ``AsyncOpenAI`` client carrying arguments a model really sends: non-ASCII text, every kind of
line break, NUL, and strings of megabytes.

- Every declaration we mark ``strict`` is a fixed point of the SDK's own strict converter
  (``openai.lib._pydantic._ensure_strict_json_schema``, what ``openai.pydantic_function_tool`` and
  ``to_strict_json_schema`` run): it finds nothing to add, require, close or strip. The set of strict
  tools passes ``chat.completions.parse``'s own check (``validate_input_tools``: only strict function
  tools), and our independent rule checker (``strict_rules``) agrees.
- The round trip: a fake ``/v1/chat/completions`` on loopback plays the model; ``client.chat.
  completions.parse(tools=...)`` (the strict-mode entry point, which parses each call's arguments)
  reads its replies, ``execute`` runs the SDK's own tool-call objects over a real ``Workspace``, and
  the tool messages go back in the next request, where the fake checks them with openai's types.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("openai")

from openai import AsyncOpenAI
from openai.lib._parsing._completions import validate_input_tools
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import ChatCompletion, ChatCompletionToolMessageParam
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import computer
from computer.tools import Tool
from computer.tools.openai import create_openai_tools

from ._loopback import serving
from .conftest import materialised
from .strict_rules import strict_violations

CONSTRAINED = ["prefer", "require", False]
MIB = 1024 * 1024  # the write cap is 2 MiB (WriteOptions.max_bytes)


def _strict(declarations: list[dict[str, Any]], api: str) -> dict[str, dict[str, Any]]:
    functions = [d["function"] if api == "chat" else d for d in declarations]
    return {f["name"]: f["parameters"] for f in functions if f.get("strict")}


@pytest.mark.parametrize("constrained", CONSTRAINED)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_strict_schemas_are_fixed_points_of_the_openai_packages_converter(
    every_tool: dict[str, Tool], constrained: Any, api: Any
) -> None:
    tools = every_tool if constrained != "require" else {n: t for n, t in every_tool.items() if n != "exec"}
    declarations, _ = create_openai_tools(tools, api=api, constrained_sampling=constrained)
    strict = _strict(declarations, api)
    expected = set(tools) - {"exec"} if constrained else set()
    assert set(strict) == expected
    for name, schema in strict.items():
        converted = copy.deepcopy(schema)
        assert _ensure_strict_json_schema(converted, path=(), root=converted) == schema, name
        assert strict_violations(schema) == [], name
    if api == "chat":
        # parse() refuses any function tool that is not strict: these pass its check.
        validate_input_tools([d for d in declarations if d["function"].get("strict")])  # type: ignore[arg-type]


# Text a model sends: every line break JSON and Python know (\n, \r\n, \r, U+2028/9, U+0085, \v, \f),
# tabs, quotes, combining marks, emoji with joiners and skin tones, right-to-left and CJK text.
ODD = (
    "line one\nline two\r\nline three\rfour\u2028five\u2029six\u0085seven\x0beight\x0cnine\n"
    'tab\there "quotes" \\backslash\\ {braces} </script> \\u0000 (spelled, not a NUL)\n'
    "e\u0301 (e + combining acute) 👩🏽‍💻 👨‍👩‍👧 שלום עולם 你好，世界 Ωμέγα\n"
)
PATH = "/workspace/dïr ✓/名前 👩🏽‍💻.txt"
# Most of the 2 MiB write cap, of text whose UTF-8 is 1 to 4 bytes a character; its first line unique.
HUGE = ("FIRST ✓\n" + ODD * (int(1.9 * MIB) // len(ODD.encode())))[: int(1.9 * MIB)]
OLD = "FIRST ✓\nline one\nline two\r\nline three\r"
# (No \r\n: edit's inserted text takes the style of the file's first line break, a documented rule.)
NEW = "ẞ\u2028\u0085\x0b" + "y" * 100_000 + "\t"
# A real NUL makes a file binary to read and grep (the sniff: a NUL in its first bytes); written exact.
WITH_NUL = "a\x00b\x00\n" + ODD
OVER_CAP = "x" * (2 * MIB + 1)

SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": PATH, "content": HUGE}),
    ("read", {"path": PATH, "offset": None, "byteOffset": None, "limit": 3}),
    ("edit", {"path": PATH, "edits": [{"oldText": OLD, "newText": NEW}]}),
    ("write", {"path": "/workspace/over.txt", "content": OVER_CAP}),
    ("write", {"path": "/workspace/nul.bin", "content": WITH_NUL}),
    ("grep", {"query": "👨‍👩‍👧", "path": "/workspace", "include": None, "ignoreCase": None}),
]


class FakeChat:
    """``/v1/chat/completions``: one scripted call a turn, then a message; each tool message checked."""

    def __init__(self) -> None:
        self.turn = 0
        self.tool_messages: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.tool_message = TypeAdapter(ChatCompletionToolMessageParam)

    async def completions(self, request: Request) -> JSONResponse:
        body = await request.json()
        for message in body["messages"]:
            if message.get("role") == "tool" and message not in self.tool_messages:
                self.tool_messages.append(message)
                if materialised(self.tool_message.validate_python(message)) != message:
                    self.problems.append(f"not a ChatCompletionToolMessageParam: {str(message)[:200]}")
        if self.turn < len(SCRIPT):
            name, args = SCRIPT[self.turn]
            call = {
                "id": f"call_{self.turn}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "done"}, "stop"
        self.turn += 1
        reply = {
            "id": f"chatcmpl-{self.turn}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        }
        ChatCompletion.model_validate(reply)
        return JSONResponse(reply)


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, FakeChat]]:
    fake = FakeChat()
    async with serving(
        Starlette(routes=[Route("/v1/chat/completions", fake.completions, methods=["POST"])])
    ) as url:
        yield f"{url}/v1", fake


@pytest.mark.timeout(300)
async def test_a_strict_chat_loop_round_trips_unicode_line_breaks_and_megabytes(
    endpoint: tuple[str, FakeChat],
) -> None:
    base_url, fake = endpoint
    client = AsyncOpenAI(api_key="test-key", base_url=base_url, max_retries=0, timeout=120)
    async with computer.Workspace() as ws:
        await ws.fs.mkdir("/workspace")
        declarations, execute = create_openai_tools(ws)
        strict = [d for d in declarations if d["function"].get("strict")]
        messages: list[Any] = [{"role": "user", "content": "go"}]
        outputs: list[dict[str, Any]] = []
        for _ in range(len(SCRIPT) + 1):  # bounded: the script ends after len(SCRIPT) turns
            completion = await client.chat.completions.parse(model="fake", messages=messages, tools=strict)
            message = completion.choices[0].message
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                # The SDK parsed the strict call's arguments itself: exactly what the model sent.
                assert call.function.parsed_arguments == SCRIPT[len(outputs)][1]  # type: ignore[union-attr]
                result = await execute(call)
                outputs.append(result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result["content"]})
        await client.close()
        stored = await ws.fs.read_file(PATH)
        nul = await ws.fs.read_file("/workspace/nul.bin")
        assert not await ws.fs.exists("/workspace/over.txt")
    assert completion.choices[0].message.content == "done"
    assert fake.problems == []
    assert [m["tool_call_id"] for m in fake.tool_messages] == [f"call_{i}" for i in range(len(SCRIPT))]
    wrote, read, edited, over, wrote_nul, found = outputs
    assert [o["is_error"] for o in outputs] == [False, False, False, True, False, False]
    assert json.loads(wrote["content"][0]["text"])["bytesWritten"] == len(HUGE.encode())
    # Byte for byte what the model sent, the one edit applied.
    assert stored == HUGE.replace(OLD, NEW, 1).encode()
    assert nul == WITH_NUL.encode()
    assert json.loads(wrote_nul["content"][0]["text"])["bytesWritten"] == len(nul)
    assert json.loads(edited["content"][0]["text"])["editsApplied"] == 1
    # read's page: lines split on \n alone (a \r, U+2028, NUL stay inside their line, as in the file).
    page = json.loads(read["content"][0]["text"]) if read["content"][0]["text"].startswith("{") else None
    shown = page["content"] if page else read["content"][0]["text"]
    assert shown.split("\n")[:3] == HUGE.split("\n")[:3]
    assert "2097153 bytes (2 MiB), over the 2 MiB (2097152-byte) write cap" in over["content"][0]["text"]
    assert json.loads(found["content"][0]["text"])["matches"][0]["path"] == PATH
    # The tool messages reached the endpoint as sent (unicode intact, nothing re-escaped or cut).
    assert fake.tool_messages[1]["content"] == read["content"]
