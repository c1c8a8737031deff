"""examples/agent_durable.py runs offline to completion (its own local Ray, in a subprocess)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_durable.py"


def test_durable_agent_example_resumes_an_approval_after_a_kill(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Ray and the actor take 10-30 s on a small machine: the example says so before it waits.
    assert done.stdout.startswith("starting a local Ray and the agent's actor...\n"), done.stdout
    for needle in (
        "waiting for approval: remove({'path': '/workspace/todo.txt'}) [rm]",
        "after the restart, still pending: ['rm']",
        "agent: Wrote a 3-item list, counted it, and removed it.",
        "agent: This is turn 2; I remember the list.",
        "todo.txt exists: False",
    ):
        assert needle in done.stdout, f"{needle!r} not in:\n{done.stdout}"


README = Path(__file__).resolve().parents[2] / "computer" / "agent" / "README.md"


def test_the_agent_readme_example_runs_as_it_is_and_prints_what_it_shows(tmp_path: Path) -> None:
    """It was a sketch: top-level ``await``, and names it never defined (``OpenAIChatModel``,
    ``lookup_order``, ``refund``, ``one_off_tool``), so a copy of it failed at its first line that used one."""
    code, shown = re.findall(r"^```python\n(.*?)^```\n\n```\n(.*?)^```", README.read_text(), re.M | re.S)[0]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == shown
