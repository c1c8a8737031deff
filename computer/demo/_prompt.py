"""The task every demo agent gets, as OpenAI-format chat messages (the same for a real or scripted model)."""

from __future__ import annotations

from typing import Any

from ._projects import PROJECT_ROOT, Project

__all__ = ["REPORT_PATH", "SYSTEM_PROMPT", "TEST_COMMAND", "task_messages"]

REPORT_PATH = f"{PROJECT_ROOT}/REPORT.md"
# -B: an edit that keeps the size within the same second would otherwise run a stale .pyc
TEST_COMMAND = "python3 -B -m unittest -v"

SYSTEM_PROMPT = (
    "You are a careful software engineer working in a durable workspace through tools. "
    "Paths are absolute; the user root is /workspace. Use the tools; do not guess file contents."
)


def task_messages(project: Project) -> list[dict[str, Any]]:
    """The system and user messages that start one agent's conversation."""
    user = (
        f"Project: {project.label}\n\n"
        f"1. Start clean: delete {PROJECT_ROOT} (recursively).\n"
        f"2. Write these two files exactly.\n\n"
        f"{project.source_path}:\n```python\n{project.source}```\n\n"
        f"{project.tests_path}:\n```python\n{project.tests}```\n\n"
        f"3. Run the tests with the exec tool: command `{TEST_COMMAND}` in cwd {PROJECT_ROOT} "
        "(the shell backend when several are offered).\n"
        "4. One test fails. Find the function it exercises with grep, read it, fix the bug with edit, "
        "and re-run the tests until they pass.\n"
        f"5. Write a short Markdown report to {REPORT_PATH} (what failed, the fix, the final test "
        "output), publish it with the publish tool, and answer with its link."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
