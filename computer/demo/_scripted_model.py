"""A scripted stand-in for an LLM: reads the conversation so far and answers with the next tool calls.

It is stateless (everything it needs is in the messages), so the same logic also backs the fake
OpenAI-compatible server of the tests. It reacts to real tool results: the failing test named by the
test run, the line grep found, the text read back. Its only built-in knowledge is what a model would
bring: how each demo project's bug should be fixed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._projects import PROJECT_ROOT, Project, project_by_label
from ._prompt import REPORT_PATH, TEST_COMMAND

__all__ = ["ScriptedModel", "scripted_reply"]

_PROJECT_LINE = re.compile(r"^Project: (\S+)$", re.MULTILINE)
_FAILING_TEST = re.compile(r"^(?:FAIL|ERROR): test_(\w+) ", re.MULTILINE)
_MAX_TEST_RUNS = 4


class ScriptedModel:
    """The ``complete(messages, tools)`` interface of a chat model, answered by :func:`scripted_reply`."""

    name = "scripted"

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        return scripted_reply(messages)

    async def aclose(self) -> None:
        return None


def scripted_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message that follows ``messages`` (OpenAI chat format)."""
    project = _project(messages)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    last = _last_calls(messages)
    if not last:
        return _calls(turn, [("delete", {"path": PROJECT_ROOT, "recursive": True})])
    name, args, result = last[-1]
    if name == "delete":
        return _calls(
            turn,
            [
                ("write", {"path": project.source_path, "content": project.source}),
                ("write", {"path": project.tests_path, "content": project.tests}),
            ],
        )
    if name == "write" and args.get("path") != REPORT_PATH:
        return _run_tests(turn)
    if name == "exec":
        return _after_test_run(turn, messages, project, result)
    if name == "grep":
        matches = _json(result).get("matches") or []
        if not matches:
            return _answer(f"I could not find the function under test: {result}")
        hit = matches[0]
        return _calls(turn, [("read", {"path": hit["path"], "offset": hit["line"], "limit": 20})])
    if name == "read":
        text = _json(result).get("content", result)  # a positioned read answers JSON
        if project.bug not in text:
            return _answer("The code I read does not show the fault I expected; stopping here.")
        edit = {"oldText": project.bug, "newText": project.fix}
        return _calls(turn, [("edit", {"path": args["path"], "edits": [edit]})])
    if name == "edit":
        if _json(result).get("error"):
            return _answer(f"The edit failed: {result}")
        return _run_tests(turn)
    if name == "write":
        return _calls(turn, [("publish", {"path": REPORT_PATH})])
    if name == "publish":
        outcome = _json(result)
        if outcome.get("ok"):
            return _answer(f"Tests pass. Report: {outcome['url']}")
        return _answer(f"Tests pass, but publishing failed: {outcome.get('error', result)}")
    return _answer(f"Unexpected tool {name}; stopping.")


def _after_test_run(
    turn: int, messages: list[dict[str, Any]], project: Project, result: str
) -> dict[str, Any]:
    outcome = _json(result)
    if outcome.get("exitCode") == 0:
        report = _report(messages, project, outcome)
        return _calls(turn, [("write", {"path": REPORT_PATH, "content": report})])
    runs = sum(1 for name, _, _ in _all_calls(messages) if name == "exec")
    output = f"{outcome.get('stdout', '')}{outcome.get('stderr', '')}"
    failing = _FAILING_TEST.search(output)
    if failing is None or runs >= _MAX_TEST_RUNS:
        return _answer(f"The tests still fail and I cannot tell why:\n{output[-2000:] or result}")
    query = f"def {failing.group(1)}("
    return _calls(turn, [("grep", {"path": PROJECT_ROOT, "query": query, "include": "*.py"})])


def _report(messages: list[dict[str, Any]], project: Project, final: dict[str, Any]) -> str:
    calls = _all_calls(messages)
    first_run = next((_json(r) for n, _, r in calls if n == "exec"), {})
    failure = f"{first_run.get('stdout', '')}{first_run.get('stderr', '')}"
    failing = [
        line for line in failure.splitlines() if line.startswith(("FAIL:", "ERROR:", "AssertionError"))
    ]
    diff = next((_json(r).get("diff", "") for n, _, r in calls if n == "edit"), "")
    tail = f"{final.get('stdout', '')}{final.get('stderr', '')}".strip().splitlines()[-3:]
    return (
        f"# Report: {project.label}\n\n"
        f"## What failed\n\n```\n{chr(10).join(failing) or failure.strip()[-500:]}\n```\n\n"
        f"## The fix\n\n{project.summary}.\n\n```diff\n{diff.strip(chr(10))}\n```\n\n"
        f"## Final test run\n\n```\n{chr(10).join(tail)}\n```\n"
    )


def _run_tests(turn: int) -> dict[str, Any]:
    return _calls(turn, [("exec", {"backend": "shell", "command": TEST_COMMAND, "cwd": PROJECT_ROOT})])


def _project(messages: list[dict[str, Any]]) -> Project:
    for message in messages:
        if message.get("role") == "user":
            found = _PROJECT_LINE.search(str(message.get("content") or ""))
            if found:
                return project_by_label(found.group(1))
    raise ValueError("the conversation names no demo project (a 'Project: key#n' line)")


def _all_calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """Every tool call so far as (name, arguments, result text), in order."""
    results = {m.get("tool_call_id"): _text(m.get("content")) for m in messages if m.get("role") == "tool"}
    calls: list[tuple[str, dict[str, Any], str]] = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call["function"]
            args = json.loads(function.get("arguments") or "{}")
            calls.append((function["name"], args, results.get(call["id"], "")))
    return calls


def _last_calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """The tool calls of the latest assistant message that made any, with their results."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant" and messages[index].get("tool_calls"):
            return _all_calls(messages[index:])
    return []


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _calls(turn: int, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{turn}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }


def _answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}
