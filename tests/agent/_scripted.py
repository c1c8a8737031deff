"""A scripted pydantic-ai model: the user message is a JSON plan of tool calls, the reply reports back.

``plan(("write", {...}), ("read", {...}), reply="ok")`` builds the message. The model makes one step
per planned entry (an entry may be a list of calls made in parallel), with call ids
``call-<turn>-<step>-<n>``, then answers with JSON: the reply, the tool names it was offered, the
results of this turn's calls and the number of user turns in the conversation. It decides only from
the messages, so it behaves the same in any process and after any restart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

Call = tuple[str, dict[str, Any]]


def plan(*steps: Call | list[Call], reply: str = "done") -> str:
    """The user message that makes the model run ``steps`` and then reply."""
    encoded = [[list(c) for c in s] if isinstance(s, list) else [list(s)] for s in steps]
    return json.dumps({"steps": encoded, "reply": reply})


def outcome(text: str | None) -> dict[str, Any]:
    """The model's final JSON answer, decoded."""
    assert text is not None, "the turn did not finish"
    return dict(json.loads(text))


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompts = [i for i, m in enumerate(messages) if _plan_of(m) is not None]
    start = prompts[-1]
    script = _plan_of(messages[start])
    step = sum(isinstance(m, ModelResponse) for m in messages[start:])
    if step < len(script["steps"]):
        parts = [
            ToolCallPart(name, args, tool_call_id=f"call-{len(prompts)}-{step}-{n}")
            for n, (name, args) in enumerate(script["steps"][step])
        ]
        return ModelResponse(parts=parts)
    results: list[dict[str, str | None]] = []
    for message in messages[start:]:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    results.append({"tool": part.tool_name, "content": part.model_response_str()})
                elif isinstance(part, RetryPromptPart):
                    results.append({"tool": part.tool_name, "retry": part.model_response()})
    answer = {
        "reply": script["reply"],
        "tools": sorted(t.name for t in info.function_tools),
        "descriptions": {t.name: t.description for t in info.function_tools},
        "results": results,
        "turns": len(prompts),
    }
    return ModelResponse(parts=[TextPart(json.dumps(answer))])


def _plan_of(message: ModelMessage) -> Any:
    """The plan a user prompt carries (other user content, e.g. from tools, is not a plan)."""
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                if part.content.startswith('{"steps"'):
                    return json.loads(part.content)
    return None


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    response = _respond(messages, info)
    calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
    if calls:
        yield {
            n: DeltaToolCall(c.tool_name, json.dumps(c.args), tool_call_id=c.tool_call_id)
            for n, c in enumerate(calls)
        }
        return
    text = next(p for p in response.parts if isinstance(p, TextPart)).content
    half = len(text) // 2
    yield text[:half]
    yield text[half:]


def scripted_model() -> FunctionModel:
    return FunctionModel(_respond, stream_function=_stream)
