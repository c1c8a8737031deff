"""Every example under examples/ runs offline to completion and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("openai_loop.py", ["strict: read", '"stdout": "hello from the sandbox\\n"', "assistant: All done."]),
        ("pydantic_ai_agent.py", ["approve write(", '"stdout": "6\\n"', "agent: The y column sums to 6."]),
        (
            "langgraph_agent.py",
            ["[exec_progress] completed", "approval requested: delete(", "agent: Cleaned up."],
        ),
        ("mcp_server.py", ["read: read-only", "delete: destructive", "'stdout': '8 readme.md\\n'"]),
    ],
)
def test_example_runs_offline(script: str, expected: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for needle in expected:
        assert needle in done.stdout, f"{needle!r} not in output of {script}:\n{done.stdout}"
