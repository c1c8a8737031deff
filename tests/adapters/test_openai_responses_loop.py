"""A whole Responses API loop: the real ``openai.AsyncOpenAI`` client against a fake ``/v1/responses``
endpoint on loopback, with ``create_openai_tools(ws, api="responses")`` declaring and executing.

The fake endpoint plays the model (a script of function calls, then a message) and checks every
request with the ``openai`` package's own types: each declared tool must be a ``FunctionToolParam``,
each ``function_call_output`` item a ``FunctionCallOutput``. What the SDK then parses out of its
replies is what ``execute`` is given, so the loop is exactly the documented one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("openai")

from openai import AsyncOpenAI
from openai.types.responses import FunctionToolParam, Response
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import computer
from computer.tools.openai import create_openai_tools

from ._loopback import serving
from .conftest import PNG

# The "model": each turn is the function calls it makes; the last turn answers in text.
SCRIPT: list[list[tuple[str, dict[str, Any]]]] = [
    [
        ("write", {"path": "/workspace/todo.md", "content": "alpha\nbeta\n"}),
        ("grep", {"query": "BETA", "ignorecase": True}),  # misspelled: must come back named
    ],
    [("grep", {"query": "BETA", "ignoreCase": True, "path": None, "include": None})],  # strict-style nulls
    [("read", {"path": "/workspace/pixel.png", "offset": None, "byteOffset": None, "limit": None})],
    [("edit", {"path": "/workspace/todo.md", "edits": [{"oldText": "beta", "newText": "BETA"}]})],
]
FINAL = "All done."


class FakeResponses:
    """The ``/v1/responses`` endpoint: scripted replies, every request checked with openai's types."""

    def __init__(self) -> None:
        self.turn = 0
        self.requests: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.tools = TypeAdapter(FunctionToolParam)
        self.outputs = TypeAdapter(FunctionCallOutput)

    async def responses(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        for tool in body.get("tools", []):
            self._check(self.tools, tool, "tool")
        for item in body.get("input", []):
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                self._check(self.outputs, item, "function_call_output")
        output: list[dict[str, Any]]
        if self.turn < len(SCRIPT):
            output = [
                {
                    "type": "function_call",
                    "id": f"fc_{self.turn}_{i}",
                    "call_id": f"call_{self.turn}_{i}",
                    "name": name,
                    "arguments": json.dumps(args),
                    "status": "completed",
                }
                for i, (name, args) in enumerate(SCRIPT[self.turn])
            ]
        else:
            output = [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": FINAL, "annotations": []}],
                }
            ]
        self.turn += 1
        reply = {
            "id": f"resp_{self.turn}",
            "object": "response",
            "created_at": 1_700_000_000,
            "model": body.get("model", "fake"),
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools", []),
        }
        Response.model_validate(reply)  # the fake answers in the real shape too
        return JSONResponse(reply)

    def _check(self, adapter: TypeAdapter[Any], value: Any, what: str) -> None:
        try:
            if adapter.validate_python(value) != value:
                self.problems.append(f"{what} has keys the openai type does not know: {value}")
        except Exception as exc:
            self.problems.append(f"{what} is invalid: {exc}: {value}")


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, FakeResponses]]:
    fake = FakeResponses()
    async with serving(Starlette(routes=[Route("/v1/responses", fake.responses, methods=["POST"])])) as url:
        yield f"{url}/v1", fake


async def test_a_full_responses_loop_with_the_real_client(endpoint: tuple[str, FakeResponses]) -> None:
    base_url, fake = endpoint
    client = AsyncOpenAI(api_key="test-key", base_url=base_url, max_retries=0)
    async with computer.Workspace() as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/pixel.png", PNG)
        tools, execute = create_openai_tools(ws, api="responses")
        items: list[Any] = [{"role": "user", "content": "Keep a todo list."}]
        outputs: list[dict[str, Any]] = []
        for _ in range(len(SCRIPT) + 2):  # bounded: the script ends after len(SCRIPT) tool turns
            response = await client.responses.create(model="fake-model", input=items, tools=tools)  # type: ignore[arg-type]
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            items += [item.model_dump(exclude_none=True) for item in response.output]
            for call in calls:
                result = await execute(call)  # the SDK's own ResponseFunctionToolCall object
                outputs.append(result)
                items.append(result)
        await client.close()
        assert response.output_text == FINAL
        assert await ws.fs.read_text("/workspace/todo.md") == "alpha\nBETA\n"
    assert fake.problems == []
    assert len(fake.requests) == len(SCRIPT) + 1
    assert [o["call_id"] for o in outputs] == ["call_0_0", "call_0_1", "call_1_0", "call_2_0", "call_3_0"]
    wrote, misspelled, found, image, edited = (o["output"] for o in outputs)
    assert json.loads(wrote)["bytesWritten"] == 11
    assert misspelled.startswith("Error: Invalid arguments: Unknown argument 'ignorecase'")
    assert "did you mean 'ignoreCase'?" in misspelled
    assert json.loads(found)["matches"][0]["text"] == "beta"
    assert [part["type"] for part in image] == ["input_text", "input_image"]
    assert json.loads(edited)["editsApplied"] == 1
    # Every request declared the tools as the API expects, strict where strict mode can say it.
    declared = {t["name"]: t["strict"] for t in fake.requests[0]["tools"]}
    assert declared == {n: True for n in ("read", "ls", "find", "grep", "write", "edit", "delete")}
