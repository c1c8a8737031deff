"""The command line without Ray: help, usage errors (exit 2, one message), ls, bench --list."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from computer.actors.directory import SqliteDirectory
from computer.cli import app

from .conftest import COMPUTER, REPO, cli_env

COMMANDS = ["demo", "tool", "tools", "ls", "rm", "shell", "mcp", "serve", "bench", "status"]
runner = CliRunner()


def test_top_level_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_saying_whether_it_needs_ray(command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    text = re.sub(r"[\s│]+", " ", result.output)  # help is wrapped inside a box
    assert "Usage:" in text
    if command in ("tool", "shell", "mcp", "rm"):
        assert "works in this process on the data directory (no Ray)" in text
        assert "With --address (or RAY_ADDRESS): joins that cluster" in text
    if command == "demo":
        assert "Starts a local Ray" in text
    if command in ("ls", "serve", "tools"):
        assert "Needs no Ray" in text


def test_help_is_fast_because_nothing_heavy_is_imported() -> None:
    """``computer --help`` (and the CLI's import) loads neither Ray nor the tools: what makes it fast.
    Pinned by the modules loaded, not by a duration (``benchmarks/cli_bench.py`` times it): before,
    the in-process import had to take < 5 s and ``--help`` < 15 s, which a loaded machine broke."""
    code = "import sys; from computer.cli import app; print('ray' in sys.modules, 'computer.tools' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "computer.cli", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert proc.returncode == 0 and "demo" in proc.stdout
    # ``-X importtime`` writes one line per module imported: "import time: self | cumulative | name".
    loaded = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "typer" in loaded  # the listing is read right
    assert not {"ray", "computer.tools"} & loaded


def test_invalid_json_arguments_exit_2_with_a_message_and_no_traceback() -> None:
    result = runner.invoke(app, ["tool", "ws", "read", "{not json"])
    assert result.exit_code == 2
    assert "not valid JSON" in result.output
    assert "Traceback" not in result.output


def test_json_that_is_not_an_object_exits_2() -> None:
    result = runner.invoke(app, ["tool", "ws", "read", "[1, 2]"])
    assert result.exit_code == 2
    assert "must be a JSON object, not list" in result.output


def test_unknown_tool_exits_2_listing_the_tools() -> None:
    result = runner.invoke(app, ["tool", "ws", "rm", "{}"])
    assert result.exit_code == 2
    assert "unknown tool 'rm'" in result.output and "publish" in result.output


def test_bad_option_value_exits_2() -> None:
    result = runner.invoke(app, ["demo", "--agents", "0"])
    assert result.exit_code == 2


def test_ls_on_an_empty_data_directory_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "ls"])
    assert result.exit_code == 0
    assert "no workspaces yet" in result.output


def test_ls_shows_awake_or_asleep_with_size_and_last_activity_without_a_cluster(tmp_path: Path) -> None:
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    epoch = directory.acquire_lease("alpha", "node-1", "owner-a", 30.0)
    directory.release_lease("alpha", "owner-a", epoch, hibernating=True)
    directory.acquire_lease("beta", "b" * 56, "owner-b", 30.0, host="box/10.0.0.2")
    directory.acquire_lease("gamma", "process:812@laptop", "owner-c", 30.0)
    directory.close()
    (tmp_path / "workspaces").mkdir()
    (tmp_path / "workspaces" / "alpha.sqlite").write_bytes(b"x" * 4096)

    result = runner.invoke(app, ["--data-dir", str(tmp_path), "ls", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["alpha"]["state"] == "asleep" and rows["alpha"]["size"] == 4096
    assert rows["alpha"]["where"] is None and rows["alpha"]["live_runs"] == 0
    assert rows["beta"]["state"] == "awake" and rows["beta"]["size"] is None
    assert rows["beta"]["where"] == "on node bbbbbbbb (box)"
    assert rows["gamma"]["where"] == "in process 812 on laptop"
    assert time.time() - rows["alpha"]["last_active"] < 60

    table = runner.invoke(app, ["--data-dir", str(tmp_path), "ls"], env={"COLUMNS": "200"})
    assert "alpha" in table.output and "4.0 KiB" in table.output and "asleep" in table.output
    assert "awake on node bbbbbbbb (box)" in table.output and "elsewhere" in table.output
    only = runner.invoke(app, ["--data-dir", str(tmp_path), "ls", "--json", "--prefix", "g"])
    assert [row["name"] for row in json.loads(only.output)] == ["gamma"]


def test_ls_counts_an_owner_that_vanished_as_asleep_once_its_lease_ran_out(tmp_path: Path) -> None:
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    directory.acquire_lease("gone", "node-1", "owner-x", 0.001)
    directory.close()
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "ls", "--json"])
    assert json.loads(result.output)[0]["state"] == "asleep"


def test_ls_lists_a_workspace_file_the_directory_lost(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    (tmp_path / "workspaces" / "orphan.sqlite").write_bytes(b"x" * 10)
    rows = json.loads(runner.invoke(app, ["--data-dir", str(tmp_path), "ls", "--json"]).output)
    assert [(r["name"], r["state"], r["size"]) for r in rows] == [("orphan", "asleep", 10)]


def test_bench_list_names_the_scripts_under_benchmarks() -> None:
    result = runner.invoke(app, ["bench", "--list"])
    assert result.exit_code == 0
    names = [line.split()[0] for line in result.output.splitlines() if line.strip()]
    assert "fs" in names and "tools" in names


def test_bench_with_an_unknown_name_exits_2() -> None:
    result = runner.invoke(app, ["bench", "nope"])
    assert result.exit_code == 2 and "unknown benchmark" in result.output


def test_status_of_a_named_cluster_that_does_not_answer_exits_1_with_one_line(tmp_path: Path) -> None:
    """It exited 0 and said commands would start a local Ray (only `demo` does)."""
    proc = subprocess.run(
        [sys.executable, "-m", "computer.cli", "--data-dir", str(tmp_path), "--address", "127.0.0.1:1", "status"],
        capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: no Ray cluster answers at 127.0.0.1:1")
    assert len(proc.stderr.splitlines()) == 1
    assert "start a local one" not in proc.stdout + proc.stderr


def test_demo_with_a_model_but_no_endpoint_configured_exits_2_before_starting_ray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = runner.invoke(app, ["demo", "--model", "gpt-x", "--agents", "1"])
    assert result.exit_code == 2
    assert "set OPENAI_API_KEY" in result.output


def _every_command() -> list[list[str]]:
    import typer.main

    group: Any = typer.main.get_command(app)
    return [[], *([name] for name in group.commands)]


@pytest.mark.parametrize("command", _every_command(), ids=lambda c: " ".join(c) or "computer")
def test_every_help_reads_cleanly(command: list[str]) -> None:
    """typer 0.29 printed ``<bool>`` beside every flag (``--yes <bool>``, ``--help -h <bool>``), as if
    it took a value; and the usage line of a named argument read ``{name}``, ``[[ARGS]...]...``,
    ``[NAME...]...`` (typer adds the brackets and dots to the metavar itself now)."""
    done = subprocess.run(
        [*COMPUTER, *command, "--help"], env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    text = done.stdout
    assert "<bool>" not in text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "[[" not in usage and "]]" not in usage and "...]..." not in usage, usage
    assert not re.search(r"[\[{][a-z_]+[\]}]", usage), usage  # arguments are named in capitals
    assert "{" not in usage, usage  # a required argument is its bare name, not a set to choose from
    assert "-h" in text and "--help" in text


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["shell"], "error: Missing argument 'NAME' (see '"),
        (["shell", "w", "extra"], "error: Got unexpected extra argument(s) (extra)"),
        (["shell", "w", "--bogus"], "error: No such option: --bogus"),
        (["shell", "w", "-c"], "error: Option '-c' requires an argument"),
        (["lss"], "error: No such command 'lss'. Did you mean 'ls'?"),
        (["kill", "w", "abc"], "error: Invalid value for 'PID'"),
        (["log", "w", "-n", "-1"], "error: Invalid value for '--limit' / '-n'"),
        (["mcp", "w", "--readonly=yes"], "error: Option '--readonly' does not take a value"),
        (["--data-dir"], "error: Option '--data-dir' requires an argument"),
        (["demo", "--agents", "0"], "error: Invalid value for '--agents' / '-n'"),
        (["ls", "--bogus"], "error: No such option: --bogus"),
        (["tool", "w", "reed"], "error: unknown tool 'reed'"),
        (["tool", "w"], "error: Missing argument 'TOOL': read, ls, find, grep, write, edit, delete, exec,"),
        (["rm"], "error: name the workspaces to delete"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_a_usage_error_is_one_line_and_exit_2(argv: list[str], says: str, tmp_path: Path) -> None:
    """typer printed a usage error as five lines (the usage, a hint, the message in a box); every
    other error of the command is one ``error: ...`` line."""
    done = subprocess.run(
        [*COMPUTER, *argv], env=cli_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(says), done.stderr
    assert "Traceback" not in done.stderr


def test_version_prints_the_installed_version() -> None:
    """``computer --version`` was 'No such option: --version'."""
    from importlib.metadata import version

    done = subprocess.run(
        [*COMPUTER, "--version"], env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"computer {version('ray-computer')}\n", "")


@pytest.mark.parametrize(
    "argv",
    [
        ["ls", "--data-dir", "/tmp"],
        ["shell", "w", "--address=127.0.0.1:1", "-c", "ls"],
        ["tool", "w", "ls", "--address", "127.0.0.1:1"],
        ["tool", "w", "read", "--path", "/workspace/a", "--data-dir=/tmp"],
    ],
    ids=" ".join,
)
def test_a_global_option_after_the_command_says_where_it_goes(argv: list[str], tmp_path: Path) -> None:
    """``computer ls --data-dir D`` said 'No such option: --data-dir'; ``computer tool w ls --address A``
    passed ``address`` to the tool, which answered 'Unknown argument' (exit 1)."""
    done = subprocess.run(
        [*COMPUTER, *argv], env=cli_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    option = next(a for a in argv if a.startswith(("--data-dir", "--address"))).partition("=")[0]
    assert (done.returncode, done.stdout) == (2, ""), done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert f"{option} is a global option: put it before the command (" in done.stderr
    assert f" {option} VALUE {argv[0]} " in done.stderr


@pytest.mark.parametrize(
    "arguments",
    [['{"path": ' * 5000], ["--path", "/workspace/a", "--edits", "[" * 5000]],
    ids=["json", "flag"],
)
def test_arguments_nested_too_deeply_to_parse_exit_2_with_a_message(arguments: list[str]) -> None:
    """``json.loads`` raises ``RecursionError`` (not a ``ValueError``) past ~1000 levels: a traceback."""
    result = runner.invoke(app, ["tool", "ws", "edit", *arguments])
    assert result.exit_code == 2, result.output
    assert "nested too deeply" in result.output and "Traceback" not in result.output
