"""The README says what it shows: every ```python block runs (each in its own subprocess) and prints
the output block that follows it; the command-line session prints what it shows; the two set-up
commands are the ones CI runs (``.ci/run`` takes command 2 from the README); the first screen says
what, who and why without the project's internal words.

In an expected output, ``…`` stands for any text (ids, sizes, times); runs of spaces match any.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import COMPUTER, REPO, cli_env

README = (REPO / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = [(lang, body) for lang, body in FENCE.findall(README)]
PYTHON = [
    (body, BLOCKS[i + 1][1] if i + 1 < len(BLOCKS) and BLOCKS[i + 1][0] == "" else None)
    for i, (lang, body) in enumerate(BLOCKS)
    if lang == "python"
]
# Console sessions made only of `computer` commands that need no cluster and no server (after an
# optional first line choosing a scratch data directory, which the test does with its own).
SCRATCH = "$ export COMPUTER_DATA_DIR=$(mktemp -d)"
SESSIONS = [
    body.removeprefix(SCRATCH + "\n")
    for lang, body in BLOCKS
    if lang == "console"
    and all(
        re.match(r"\$ computer (tool|tools|ls|rm)\b", line)
        for line in body.removeprefix(SCRATCH + "\n").splitlines()
        if line.startswith("$")
    )
]


def same_output(expected: str, actual: str) -> bool:
    """Line by line; ``…`` matches anything, a run of spaces any run of spaces."""
    want = [line for line in expected.strip("\n").splitlines()]
    got = [line for line in actual.strip("\n").splitlines()]
    if len(want) != len(got):
        return False
    for pattern, line in zip(want, got, strict=True):
        words = [".*".join(re.escape(piece) for piece in word.split("…")) for word in pattern.split()]
        if not re.fullmatch(r"\s*" + r"\s+".join(words) + r"\s*", line):
            return False
    return True


def test_same_output_treats_ellipsis_as_anything_and_spaces_loosely() -> None:
    assert same_output(
        '  "id": "exec-…",\nnotes  asleep  … KiB', '  "id": "exec-1f2e",\nnotes asleep  56.0 KiB'
    )
    assert not same_output("deleted notes", "deleted other")
    assert not same_output("a\nb", "a")


def test_the_readme_has_python_blocks_each_with_its_output_and_only_known_fences() -> None:
    assert len(PYTHON) >= 6
    assert {lang for lang, _ in BLOCKS} <= {"python", "bash", "console", ""}
    assert [code for code, output in PYTHON if output is None] == []
    assert SESSIONS, "the command-line session is missing"


def test_the_two_setup_commands_are_the_only_bash_blocks_and_ci_runs_the_second() -> None:
    bash = [body for lang, body in BLOCKS if lang == "bash"]
    assert len(bash) == 2
    demo, tests = (next(line for line in body.splitlines() if not line.startswith("#")) for body in bash)
    assert demo == "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/computer demo"
    assert tests.startswith("apt-get update") and "apt-get install -y" in tests
    assert {"redis-server", "bubblewrap"} <= set(tests.split("&&")[1].split())
    assert tests.endswith(
        "&& python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/python -m pytest"
    )
    printed = subprocess.run(
        ["bash", str(REPO / ".ci" / "run"), "--print"], capture_output=True, text=True, timeout=30, check=True
    )
    assert printed.stdout == tests + "\n"  # what CI runs is exactly command 2


def test_the_first_screen_says_what_who_and_why_in_plain_words() -> None:
    first = README.split("\n## ")[0]
    assert "It is for" in first and "Why:" in first
    for jargon in ("seed", "Think model", "durable object", "this 2-core machine", "Decisions the"):
        assert jargon not in README, jargon
    examples = (REPO / "examples" / "README.md").read_text()  # where "More: examples/" sends a reader
    assert [word for word in ("seed", "Decisions the") if word in examples] == []


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_block_runs_and_prints_what_the_readme_shows(index: int, tmp_path: Path) -> None:
    code, expected = PYTHON[index]
    script = tmp_path / f"readme_{index}.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=cli_env(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"README block {index}:\n{code}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert expected is not None and same_output(expected, proc.stdout), (
        f"README block {index} printed:\n{proc.stdout}\nthe README shows:\n{expected}"
    )


@pytest.mark.parametrize("index", range(len(SESSIONS)))
def test_the_command_line_session_prints_what_the_readme_shows(index: int, tmp_path: Path) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in SESSIONS[index].splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    for command, expected in commands:
        args = shlex.split(command)[1:]
        proc = subprocess.run(
            [*COMPUTER, *args],
            env=cli_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr[-3000:]}"
        assert same_output("\n".join(expected), proc.stdout), (
            f"{command} printed:\n{proc.stdout}\nthe README shows:\n" + "\n".join(expected)
        )


def test_the_command_table_has_a_row_for_every_command() -> None:
    """``computer ps`` and ``computer kill`` were in ``computer --help`` but not in the README's table."""
    import typer.main

    from computer.cli import app

    first_cells = [line.split("|")[1] for line in README.splitlines() if line.startswith("| `computer ")]
    listed = {name for cell in first_cells for name in re.findall(r"`computer ([a-z]+)", cell)}
    assert sorted(set(typer.main.get_command(app).commands) - listed) == []  # type: ignore[attr-defined]
