"""Discoverability: ``computer tool NAME TOOL --help`` and ``computer tools`` describe every tool (its
description, JSON schema and an example call), and every example call works as shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from computer.cli import app
from computer.cli._tool import EXAMPLES, TOOL_NAMES

runner = CliRunner()


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_tool_help_prints_description_schema_and_example(tool: str) -> None:
    result = runner.invoke(app, ["tool", "any-name", tool, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"computer tool NAME {tool} ")
    schema_text = result.output.split("Arguments (JSON schema):\n")[1].split("\n\nExample:")[0]
    schema = json.loads(schema_text)
    assert schema["type"] == "object" and schema["properties"]
    assert set(EXAMPLES[tool]) <= set(schema["properties"])  # the example uses real argument names
    assert set(schema.get("required", ())) <= set(EXAMPLES[tool])  # and every required one
    assert f"computer tool my-workspace {tool} '" in result.output


def test_find_help_says_how_star_and_double_star_differ() -> None:
    text = runner.invoke(app, ["tool", "w", "find", "-h"]).output
    assert '"*.md" matches only directly in path; "**/*.md" matches at any depth' in text


def test_tools_lists_every_tool_with_its_arguments() -> None:
    result = runner.invoke(app, ["tools"])
    assert result.exit_code == 0
    for tool in TOOL_NAMES:
        assert f"\n{tool}: " in result.output
    assert "arguments: command, cwd?, env?, backend?, input?, timeout?" in result.output
    one = runner.invoke(app, ["tools", "grep"])
    assert one.exit_code == 0 and "Arguments (JSON schema):" in one.output


def test_tool_without_a_tool_name_is_one_line_naming_the_tools() -> None:
    """It printed the whole help and every tool's overview (~50 lines) for a missing argument; every
    other missing argument is one line. ``computer tool`` alone (and ``--help``) still prints it."""
    result = runner.invoke(app, ["tool", "ws"])
    assert result.exit_code == 2
    assert result.output.startswith(
        "error: Missing argument 'TOOL': read, ls, find, grep, write, edit, delete"
    )
    assert len(result.output.splitlines()) == 1 and "publish" in result.output
    alone = runner.invoke(app, ["tool"])
    assert alone.exit_code == 0 and "Usage:" in alone.output and "\npublish: " in alone.output


def test_help_of_an_unknown_tool_lists_the_tools() -> None:
    result = runner.invoke(app, ["tool", "ws", "nope", "--help"])
    assert result.exit_code == 2 and "tools: read, ls, find, grep" in result.output


def test_every_example_call_works_as_shown(tmp_path: Path) -> None:
    for tool, args in EXAMPLES.items():  # in order: write first, delete last
        result = runner.invoke(app, ["--data-dir", str(tmp_path), "tool", "examples", tool, json.dumps(args)])
        assert result.exit_code == 0, f"{tool}: {result.output}"
        out = json.loads(result.output)
        assert "error" not in out, (tool, out)
    found = runner.invoke(app, ["--data-dir", str(tmp_path), "tool", "examples", "find", '{"pattern": "*"}'])
    assert json.loads(found.output)["count"] == 0  # delete removed the only file
