"""Every ```python block of the README runs (each in its own subprocess), and the README's two set-up
commands are the ones CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, cli_env

README = (REPO / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = [(lang, body) for lang, body in FENCE.findall(README)]
PYTHON = [body for lang, body in BLOCKS if lang == "python"]


def test_the_readme_has_python_blocks_and_only_known_fences() -> None:
    assert len(PYTHON) >= 6
    assert {lang for lang, _ in BLOCKS} <= {"python", "bash", "console", ""}


def test_the_two_setup_commands_are_the_only_bash_blocks_and_ci_runs_the_second() -> None:
    bash = [body for lang, body in BLOCKS if lang == "bash"]
    assert len(bash) == 2
    demo, tests = (next(line for line in body.splitlines() if not line.startswith("#")) for body in bash)
    assert demo == "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/computer demo"
    assert tests in (REPO / ".ci" / "run").read_text().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_block_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / f"readme_{index}.py"
    script.write_text(PYTHON[index])
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=cli_env(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, (
        f"README block {index}:\n{PYTHON[index]}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    )
