"""``computer log``: the table, JSON lines, filters, follow, and reading beside a live owner."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from computer import Workspace
from computer.config import Settings
from computer.storage import audit_caller
from computer.tools import create_tools

REPO = Path(__file__).resolve().parents[2]
COMPUTER = [sys.executable, "-m", "computer.cli"]


def cli_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMPUTER_REDIS_URL")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", COLUMNS="200", NO_COLOR="1")
    env["COMPUTER_DATA_DIR"] = str(data_dir)
    return env


def run_cli(args: list[str], *, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMPUTER, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


async def _workspace(data_dir: Path, name: str) -> Workspace:
    """An owner of workspace ``name`` in this process (the CLI reads its file beside it)."""
    from computer.actors.naming import workspace_file

    path = workspace_file(Settings(data_dir=data_dir), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return Workspace(str(path))


async def test_log_prints_a_table_json_lines_and_filters(tmp_path: Path) -> None:
    ws = await _workspace(tmp_path, "proj")
    tools = create_tools(ws)
    with audit_caller(agent="fixer", adapter="openai"):
        await tools["write"].run({"path": "/workspace/app.py", "content": "print(1)\n"})
        await tools["read"].run({"path": "/workspace/missing.py"})
        await tools["grep"].run({"query": "print"})
    ws.audit.flush()
    env = cli_env(tmp_path)
    try:  # read while the owner still has the file open
        table = run_cli(["log", "proj"], env=env, timeout=60)
        assert table.returncode == 0, table.stderr
        for text in ("write", "/workspace/app.py", "error", "No such file", "fixer via openai", "grep"):
            assert text in table.stdout
        lines = run_cli(["log", "proj", "--json"], env=env, timeout=60).stdout.splitlines()
        assert [json.loads(line)["tool"] for line in lines] == ["write", "read", "grep"]
        errors = run_cli(["log", "proj", "--json", "--errors"], env=env, timeout=60).stdout.splitlines()
        assert [json.loads(line)["tool"] for line in errors] == ["read"]
        only = run_cli(["log", "proj", "--json", "--tool", "grep"], env=env, timeout=60).stdout.splitlines()
        assert [json.loads(line)["tool"] for line in only] == ["grep"]
        newest = run_cli(["log", "proj", "--json", "-n", "1"], env=env, timeout=60).stdout.splitlines()
        assert [json.loads(line)["tool"] for line in newest] == ["grep"]
    finally:
        await ws.close()
    missing = run_cli(["log", "nothing-here"], env=env, timeout=60)
    assert missing.returncode == 1 and "no workspace 'nothing-here'" in missing.stderr


async def test_log_follow_prints_records_as_they_are_written(tmp_path: Path) -> None:
    ws = await _workspace(tmp_path, "live")
    tools = create_tools(ws)
    await tools["ls"].run({"path": "/"})
    ws.audit.flush()
    proc = await asyncio.create_subprocess_exec(
        *COMPUTER,
        "log",
        "live",
        "--follow",
        "--json",
        env=cli_env(tmp_path),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert json.loads(first)["tool"] == "ls"  # the newest first
        await tools["write"].run({"path": "/workspace/new.txt", "content": "x"})
        ws.audit.flush()
        arrived = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert (arrived["tool"], arrived["args"]["path"]) == ("write", "/workspace/new.txt")
    finally:
        proc.kill()
        await asyncio.wait_for(proc.wait(), 10)
        await ws.close()


def test_log_and_dashboard_help_say_where_they_read() -> None:
    import re

    from typer.testing import CliRunner

    from computer.cli import app

    top = CliRunner().invoke(app, ["--help"])
    assert top.exit_code == 0 and "log" in top.output and "dashboard" in top.output
    for command in ("log", "dashboard"):
        result = CliRunner().invoke(app, [command, "--help"])
        text = re.sub(r"[\s│]+", " ", result.output)
        assert result.exit_code == 0 and "No cluster named" in text and "--address" in text


async def test_log_follow_of_an_empty_log_misses_no_record_committed_as_it_starts(
    tmp_path: Path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    """With nothing to show first, ``computer log -f`` followed from the newest id, read after its
    query: a record the owner committed between the two was printed by neither. The owner's commit
    is placed there by running it right after the reader's query."""
    from audit_races import commit_after_the_first_query
    from rich.console import Console

    from computer.cli._context import GlobalOptions
    from computer.cli._log import show_log
    from computer.config import settings

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = settings().model_dump()
    ws = await _workspace(tmp_path, "quiet")
    await ws.fs.write_file("/a.txt", b"x")  # the file exists, its log is empty
    injected = commit_after_the_first_query(monkeypatch, ws)
    options = GlobalOptions(data_dir=tmp_path)
    console = Console(file=io.StringIO())  # the table is not printed: JSON lines go to stdout
    follow = asyncio.ensure_future(
        show_log(
            options, "quiet", follow=True, as_json=True, tool=None, errors=False, limit=20, console=console
        )
    )
    printed = ""
    try:
        for _ in range(50):  # up to 5 s
            await asyncio.sleep(0.1)
            printed += capsys.readouterr().out
            if '"late"' in printed:
                break
    finally:
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        await ws.close()
        from computer.config import configure

        configure(**before)
    assert injected and [json.loads(line)["tool"] for line in printed.splitlines()] == ["late"]


async def test_log_json_prints_a_record_holding_a_lone_surrogate(tmp_path: Path) -> None:
    """A model's broken emoji escape (``"\\ud83d"``) is kept as given; ``--json`` printed it as UTF-8,
    which raised: a traceback, and no record after it printed."""
    ws = await _workspace(tmp_path, "proj")
    tools = create_tools(ws)
    await tools["ls"].run({"path": "/tmp/\ud83d"})
    await tools["ls"].run({"path": "/"})
    await ws.close()
    done = await asyncio.to_thread(run_cli, ["log", "proj", "--json"], env=cli_env(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    paths = [json.loads(line)["args"]["path"] for line in done.stdout.splitlines()]
    assert paths == ["/tmp/\ud83d", "/"]
