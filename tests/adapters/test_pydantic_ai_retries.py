"""pydantic-ai: invalid arguments are retries the model can act on, and never end the run by default."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from computer.tools import Tool
from computer.tools.pydantic_ai import DEFAULT_MAX_RETRIES, create_pydantic_ai_tools

BAD = ("get", {"path": "/a", "lmit": 2})
GOOD = ("put", {"path": "/a", "content": "one\ntwo\n"})
FIXED = ("get", {"path": "/a", "limit": 1})


def scripted(calls: list[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """One tool call per turn, in order, then the text "done"."""
    pending = list(calls)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if pending:
            name, args = pending.pop(0)
            return ModelResponse(
                parts=[ToolCallPart(name, json.dumps(args), tool_call_id=f"c{len(pending)}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(model)


def outcomes(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    return [
        (part.outcome, str(part.content))
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    ]


async def test_a_misspelled_field_is_a_retry_naming_it_and_the_corrected_call_runs(
    sample_tools: dict[str, Tool],
) -> None:
    agent = Agent(scripted([GOOD, BAD, FIXED]), toolsets=[create_pydantic_ai_tools(sample_tools)])
    result = await agent.run("go")
    assert result.output == "done"
    (_, (retry, message), (fixed, content)) = outcomes(result.all_messages())
    assert retry == "retried"
    assert "Unknown argument 'lmit' (did you mean 'limit'?). Valid arguments: path, offset, limit." in message
    assert fixed == "success" and json.loads(content)["content"] == "one"


async def test_invalid_calls_past_the_budget_fail_but_the_run_goes_on(sample_tools: dict[str, Tool]) -> None:
    calls = [GOOD] + [BAD] * (DEFAULT_MAX_RETRIES + 3)
    agent = Agent(scripted(calls), toolsets=[create_pydantic_ai_tools(sample_tools)])
    result = await agent.run("go")
    assert result.output == "done"
    seen = outcomes(result.all_messages())[1:]
    assert [o for o, _ in seen] == ["retried"] * DEFAULT_MAX_RETRIES + ["failed"] * 3
    assert all("'lmit' (did you mean 'limit'?)" in text for _, text in seen)
    assert "The call was not run" in seen[-1][1]


async def test_a_valid_call_restores_the_budget(sample_tools: dict[str, Tool]) -> None:
    calls = [GOOD, BAD, BAD, FIXED, BAD, BAD]
    agent = Agent(scripted(calls), toolsets=[create_pydantic_ai_tools(sample_tools, max_retries=2)])
    result = await agent.run("go")
    assert [o for o, _ in outcomes(result.all_messages())] == [
        "success",
        "retried",
        "retried",
        "success",
        "retried",
        "retried",
    ]


async def test_max_retries_zero_answers_the_first_invalid_call_as_a_failure(
    sample_tools: dict[str, Tool],
) -> None:
    agent = Agent(scripted([BAD, BAD]), toolsets=[create_pydantic_ai_tools(sample_tools, max_retries=0)])
    result = await agent.run("go")
    assert [o for o, _ in outcomes(result.all_messages())] == ["failed", "failed"]


async def test_end_run_keeps_pydantic_ais_own_rule(sample_tools: dict[str, Tool]) -> None:
    toolset = create_pydantic_ai_tools(sample_tools, max_retries=1, retries_exhausted="end_run")
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 1"):
        await Agent(scripted([BAD, BAD]), toolsets=[toolset]).run("go")


async def test_other_tools_keep_their_own_budget(sample_tools: dict[str, Tool]) -> None:
    bad_put = ("put", {"path": "/a", "contents": "x"})
    calls = [BAD, BAD, bad_put, BAD, bad_put]
    toolset = create_pydantic_ai_tools(sample_tools, max_retries=2)
    result = await Agent(scripted(calls), toolsets=[toolset]).run("go")
    assert [o for o, _ in outcomes(result.all_messages())] == [
        "retried",
        "retried",
        "retried",
        "failed",
        "retried",
    ]


@pytest.mark.parametrize(
    "options", [{"max_retries": -1}, {"max_retries": True}, {"retries_exhausted": "ignore"}]
)
def test_bad_retry_options_are_errors(sample_tools: dict[str, Tool], options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        create_pydantic_ai_tools(sample_tools, **options)
