"""One demo agent: a chat model driving the OpenAI-format tools of its own workspace until done."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..dashboard import keep_transcript
from ..storage import audit_caller
from ..surface import WorkspaceSurface
from ..tools.openai import create_openai_tools
from ._projects import Project
from ._prompt import TEST_COMMAND, task_messages

__all__ = ["AgentState", "ChatModel", "run_agent"]

MAX_TURNS = 30


class ChatModel(Protocol):
    name: str

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


@dataclass
class AgentState:
    """What the live table shows about one agent, updated as it works."""

    name: str
    project: Project
    step: str = "waiting"
    calls: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds per tool call
    by_tool: dict[str, list[float]] = field(default_factory=dict)  # the same, per tool name
    test_runs: int = 0
    tests_green: bool | None = None  # result of the latest test run
    url: str | None = None
    answer: str | None = None
    failure: str | None = None
    done: bool = False

    @property
    def green(self) -> bool:
        """Succeeded by what the tools observed (not by what the model claims)."""
        return bool(self.tests_green) and self.url is not None and self.failure is None


async def run_agent(
    workspace: WorkspaceSurface, model: ChatModel, state: AgentState, *, max_turns: int = MAX_TURNS
) -> None:
    """Run the conversation to its end; failures are recorded in ``state``, never raised.

    The agent's tool calls carry its name in the audit log, and its transcript (the model's messages
    and tool calls) is kept in its workspace after every turn, for the dashboard (issue 21).
    """
    with audit_caller(agent=state.name):
        await _converse(workspace, model, state, max_turns)


async def _converse(workspace: WorkspaceSurface, model: ChatModel, state: AgentState, max_turns: int) -> None:
    messages: list[dict[str, Any]] = []
    try:
        tools, execute = create_openai_tools(workspace)
        messages = task_messages(state.project)
        for _ in range(max_turns):
            state.step = "thinking"
            message = await model.complete(messages, tools)
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                state.answer = str(message.get("content") or "")
                break
            for call in calls:
                messages.append(await _run_call(execute, call, state))
            await keep_transcript(workspace, messages)
        else:
            state.failure = f"no answer after {max_turns} turns"
    except Exception as exc:  # one broken agent must not stop the others
        state.failure = f"{type(exc).__name__}: {exc}"
    finally:
        if messages:
            await keep_transcript(workspace, messages)
        state.done = True
        state.step = "done" if state.green else "failed"


async def _run_call(execute: Any, call: dict[str, Any], state: AgentState) -> dict[str, Any]:
    name = call["function"]["name"]
    args = _arguments(call)
    state.step = f"{name} {_brief(name, args)}".strip()
    started = time.perf_counter()
    outcome = await execute(call)
    elapsed = time.perf_counter() - started
    state.latencies.append(elapsed)
    state.by_tool.setdefault(name, []).append(elapsed)
    state.calls += 1
    state.errors += int(bool(outcome["is_error"]))
    text = "\n".join(part["text"] for part in outcome["content"] if part.get("type") == "text")
    _observe(state, name, args, text)
    return {"role": "tool", "tool_call_id": call["id"], "content": text}


def _observe(state: AgentState, name: str, args: dict[str, Any], text: str) -> None:
    """Track test runs and the published link from the tool results themselves."""
    try:
        result = json.loads(text)
    except ValueError:
        return
    if not isinstance(result, dict):
        return
    if name == "exec" and "unittest" in str(args.get("command", TEST_COMMAND)):
        state.test_runs += 1
        state.tests_green = result.get("exitCode") == 0
    elif name == "publish" and result.get("ok"):
        state.url = str(result["url"])


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    try:
        args = json.loads(call["function"].get("arguments") or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def _brief(name: str, args: dict[str, Any]) -> str:
    if name == "exec":
        return str(args.get("command", ""))[:40]
    if name == "grep":
        return repr(args.get("query", ""))[:40]
    return str(args.get("path", ""))[-40:]
