"""``computer.cli.main`` runs the everyday command lines without typer (``_fast``, issue 22 CLI speed):
what it runs gets the same values as the typer app would pass, prints the same and exits the same;
anything else goes to typer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from computer.cli import _fast, _log, _ls, _mcp, _shell, _tool, app

from .conftest import COMPUTER, REPO, cli_env

# Each runs through the fast path; typer parses the same line (CliRunner) for the comparison.
SAME = [
    ["tool", "w", "read", '{"path": "/a"}'],
    ["tool", "w", "ls"],
    ["--data-dir", "/tmp/d", "tool", "w", "write", '{"path": "/a", "content": "-x"}'],
    ["--data-dir=/tmp/d", "--address", "h:1", "tool", "w", "read", "{}"],
    ["tool", "w", "exec", "-"],
    ["tool", "w", "write", "--path", "/a", "--content", "-x"],  # the tool's arguments as options
    ["tool", "w", "read", '{"path": "/a"}', "--limit=3", "--byte-offset", "0"],
    ["tool", "w", "grep", "--query", "x", "--ignoreCase"],
    ["tool", "w", "read", "{}", "extra"],  # a usage error on both paths
    ["shell", "w", "-c", "ls /"],
    ["shell", "w", "--command=!make -k"],
    ["shell", "w", "-c", "-x"],
    ["shell", "w"],
    ["mcp", "w"],
    ["mcp", "--readonly", "w"],
    ["mcp", "--processes", "w"],
    ["ls"],
    ["ls", "--json", "--prefix", "demo-"],
    ["--data-dir", "/tmp/d", "ls", "--prefix=", "--json"],
    ["log", "w"],
    ["log", "w", "-f", "--json", "--tool", "exec", "--errors", "-n", "5"],
    ["log", "--limit=0", "w"],
]

# Typer's: help, unknown or combined options, bad values, missing or extra arguments, other commands.
TYPER = [
    [],
    ["--help"],
    ["tool"],
    ["tool", "w"],
    ["tool", "w", "read", "--help"],
    ["tool", "w", "read", "--path", "/a", "-h"],
    ["tool", "--", "w", "read"],
    ["--data-dir"],
    ["--verbose", "ls"],
    ["shell", "w", "-c"],
    ["shell", "w", "x"],
    ["mcp", "w", "--readonly=yes"],
    ["ls", "--bogus"],
    ["ls", "extra"],
    ["log", "w", "-n", "-1"],
    ["log", "w", "--limit", "five"],
    ["log", "w", "-fn", "5"],
    ["rm", "w", "--yes"],
    ["tools"],
    ["demo"],
]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, dict[str, Any]]]:
    """What each command's implementation was called with (it runs nothing)."""
    seen: list[tuple[str, Any, dict[str, Any]]] = []

    def record(label: str, result: Any) -> Any:
        def fake(options: Any, *args: Any, **kwargs: Any) -> Any:
            kwargs.pop("console", None)
            seen.append((label, options, {"args": [a for a in args if not hasattr(a, "print")], **kwargs}))
            return result

        return fake

    async def nothing() -> int:
        return 0

    for module, name, result in (
        (_tool, "run_tool", 0),
        (_shell, "run_shell", 0),
        (_mcp, "serve_mcp", None),
        (_log, "show_log", None),
    ):
        fake = record(name, result)
        monkeypatch.setattr(module, name, lambda *a, _fake=fake, **k: (_fake(*a, **k), nothing())[1])
    monkeypatch.setattr(_ls, "list_workspaces", record("list_workspaces", []))
    monkeypatch.setattr(_ls, "print_workspaces", lambda rows, **kwargs: seen.append(("print", rows, {})))
    return seen


@pytest.mark.parametrize("argv", SAME, ids=" ".join)
def test_the_fast_path_passes_what_typer_passes(
    argv: list[str], calls: list[tuple[str, Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run = _fast.fast_command(argv)
    assert run is not None
    fast_code = run()
    fast_calls = list(calls)
    calls.clear()
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert (fast_code, fast_calls) == (result.exit_code, calls)


@pytest.mark.parametrize("argv", TYPER, ids=" ".join)
def test_other_command_lines_go_to_typer(argv: list[str]) -> None:
    assert _fast.fast_command(argv) is None


def _both(data_dir: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], ...]:
    """``argv`` through ``computer`` (the fast path) and through the typer app."""
    typer_app = [sys.executable, "-c", "from computer.cli import app; app()"]
    env = cli_env()
    return tuple(
        subprocess.run(
            [*command, "--data-dir", str(data_dir), *argv], env=env, cwd=REPO, capture_output=True, text=True
        )
        for command in (COMPUTER, typer_app)
    )


def test_both_paths_print_the_same_and_exit_the_same(tmp_path: Path) -> None:
    write = json.dumps({"path": "/workspace/a.txt", "content": "one\n"})
    for argv in (
        ["tool", "same", "write", write],
        ["tool", "same", "read", '{"path": "/workspace/a.txt"}'],
        ["tool", "same", "read", "--path", "/workspace/a.txt", "--limit", "1"],
        ["tool", "same", "read", "--path", "/workspace/a.txt", "--limit", "one"],  # usage: exit 2
        ["tool", "same", "read", '{"path": "/workspace/missing"}'],  # the tool's error: exit 1
        ["tool", "same", "read", "not json"],  # usage: exit 2, one red line
        ["tool", "same", "nope"],
        ["shell", "same", "-c", "cat /workspace/a.txt"],
        ["ls", "--json"],
    ):
        fast, typed = _both(tmp_path, *argv)
        if argv[0] == "ls":  # the last activity moves between the two runs
            fast_rows, typed_rows = json.loads(fast.stdout), json.loads(typed.stdout)
            assert [r["name"] for r in fast_rows] == [r["name"] for r in typed_rows] == ["same"]
        else:
            assert fast.stdout == typed.stdout, argv
        assert (fast.returncode, fast.stderr) == (typed.returncode, typed.stderr), argv


def test_the_fast_table_declares_what_the_typer_app_declares() -> None:
    """A new option or argument of ``tool``, ``shell``, ``mcp``, ``ls`` or ``log`` in ``_app.py``
    must be in ``_fast._COMMANDS`` too, with the same kind (``--help`` and ``--version``, which exit
    at once, aside), and an
    optional argument with the same default: the two declarations never drift apart."""
    import typer.main

    group: Any = typer.main.get_command(app)

    def declared(params: list[Any]) -> tuple[list[tuple[str, Any]], dict[str, tuple[str, str]]]:
        arguments = [(p.name, p.default) for p in params if not p.opts[0].startswith("-")]
        options: dict[str, tuple[str, str]] = {}
        for p in params:
            if p.opts[0].startswith("-") and not {"--help", "--version"} & set(p.opts):
                kind = "flag" if p.is_flag else "str"
                if p.type_descriptor.annotation is int:
                    kind = "int"  # the fast parser's int: non-negative (typer checks the rest)
                    assert (p.min, p.max) == (0, None), f"{p.opts}: teach _fast this range"
                options.update({opt: (p.name, kind) for opt in [*p.opts, *p.secondary_opts]})
        return arguments, options

    assert declared(group.params)[1] == _fast._GLOBAL
    for name, fast in _fast._COMMANDS.items():
        arguments, options = declared(group.commands[name].params)
        rest = ["arguments"] if name == "tool" else []  # every word after TOOL: `_fast._tool_line`
        assert [a for a, _ in arguments] == [*fast.positionals, *(k for k, _ in fast.optional), *rest], name
        assert [(k, d) for k, d in arguments if k in dict(fast.optional)] == list(fast.optional), name
        assert options == fast.options, name
