"""``computer ps`` and ``computer kill`` (issue 18): the processes of a workspace's live sandbox on a
cluster, from separate CLI calls; with no cluster, ``ps`` says the workspace is asleep."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, cli_env, run_cli


def test_ps_lists_a_background_process_and_kill_ends_it(two_node_cluster: str, tmp_path: Path) -> None:
    name = f"ps-{uuid.uuid4().hex[:8]}"
    base = ["--data-dir", str(tmp_path), "--address", two_node_cluster]
    env = cli_env()
    started = run_cli(
        [
            *base,
            "tool",
            name,
            "exec",
            json.dumps({"command": "setsid sleep 777.25 > /dev/null 2>&1 & echo ok"}),
        ],
        env=env,
    )
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["stdout"] == "ok\n"

    listed = run_cli([*base, "ps", name], env=env)
    assert listed.returncode == 0, listed.stderr
    line = next(row for row in listed.stdout.splitlines() if "sleep 777.25" in row)
    pid = int(re.match(r"\s*(\d+)", line).group(1))  # type: ignore[union-attr]

    killed = run_cli([*base, "kill", name, str(pid)], env=env)
    assert killed.returncode == 0, killed.stderr
    after = run_cli([*base, "ps", name], env=env)
    assert "sleep 777.25" not in after.stdout

    missing = run_cli([*base, "kill", name, "99999"], env=env)
    assert missing.returncode == 1 and "99999" in missing.stderr
    assert "Traceback" not in missing.stderr  # ProcessLookupError crosses from the owner as itself

    # A command line is shown as text: neither a terminal escape nor rich markup of it reaches the screen.
    fake = r"\033[2J\033]0;title\007[bold]fake[/bold] [link=http://x]row[/link]"
    hostile = f'setsid bash -c \'exec -a "$(printf "{fake}")" sleep 777.5\' > /dev/null 2>&1 & echo ok'
    # ... nor the run's name a process set in its environment (the EXEC column)
    hostile = f"COMPUTER_EXEC_ID=$(printf '{fake}') setsid sleep 777.75 > /dev/null 2>&1 & {hostile}"
    assert run_cli([*base, "tool", name, "exec", json.dumps({"command": hostile})], env=env).returncode == 0
    shown = run_cli([*base, "ps", name], env=env)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "[bold]fake[/bold] [link=http://x]row[/link]" in shown.stdout.replace("\n", "")
    assert "\\x1b[2J" in shown.stdout
    assert "sleep 777.75" in shown.stdout


def test_ps_without_a_cluster_says_the_workspace_is_asleep(tmp_path: Path) -> None:
    made = run_cli(
        ["--data-dir", str(tmp_path), "tool", "nothing-runs", "ls", '{"path": "/"}'], env=cli_env()
    )
    assert made.returncode == 0, made.stderr
    proc = run_cli(["--data-dir", str(tmp_path), "ps", "nothing-runs"], env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert "asleep" in proc.stdout


def test_ps_and_kill_of_a_name_no_workspace_has_say_so_and_make_none(tmp_path: Path) -> None:
    """``ps`` of an unknown name made that workspace (``computer ls`` then listed it)."""
    for command in (["ps", "no-such"], ["kill", "no-such", "5"]):
        proc = run_cli(["--data-dir", str(tmp_path), *command], env=cli_env())
        assert proc.returncode == 1 and "no workspace named 'no-such'" in proc.stderr, proc
    listed = run_cli(["--data-dir", str(tmp_path), "ls"], env=cli_env())
    assert "no-such" not in listed.stdout


def test_names_are_shown_as_they_are_in_listings_and_errors(tmp_path: Path) -> None:
    """``computer ls`` read rich markup in names (``[red]real[bold]`` was listed as ``real``, another
    workspace's name), and error lines did too."""
    base = ["--data-dir", str(tmp_path)]
    made = run_cli(
        [*base, "tool", "[red]real[bold]", "write", '{"path": "/a", "content": "x"}'], env=cli_env()
    )
    assert made.returncode == 0, made.stderr
    listed = run_cli([*base, "ls"], env=cli_env())
    assert "[red]real[bold]" in listed.stdout, listed.stdout
    missing = run_cli([*base, "ps", "[blink]x[/blink]"], env=cli_env())
    assert missing.returncode == 1 and "'[blink]x[/blink]'" in missing.stderr, missing.stderr


def test_commands_on_a_cluster_leave_its_published_settings_alone(
    two_node_cluster: str, tmp_path: Path
) -> None:
    """``computer ps`` (and every command joining a cluster) went through ``computer.init``, which
    published this shell's defaults over the cluster's settings: pool sizes, leases, hibernation, for
    every client. A command now takes the cluster's settings (its ``--data-dir`` when given) and
    publishes nothing."""
    env = cli_env()
    publish = (
        "import sys, computer\n"
        "computer.init(sys.argv[1], data_dir=sys.argv[2], audit_max_records=9_999, pool_idle_after=61.5)\n"
    )
    read = (
        "import sys\n"
        "from computer.actors import ensure_ray, published_settings\n"
        "ensure_ray(sys.argv[1])\n"
        "s = published_settings()\n"
        "print(s.audit_max_records, s.pool_idle_after, s.data_dir)\n"
    )
    python = [sys.executable, "-c"]
    kept = subprocess.run(
        [*python, publish, two_node_cluster, str(tmp_path)],
        env=env,
        cwd=REPO,
        timeout=120,
        capture_output=True,
    )
    assert kept.returncode == 0, kept.stderr
    name = f"pub-{uuid.uuid4().hex[:8]}"
    other = tmp_path / "other"
    base = ["--data-dir", str(other), "--address", two_node_cluster]
    assert run_cli([*base, "tool", name, "ls", '{"path": "/"}'], env=env).returncode == 0
    for command in (["ps", name], ["kill", name, "99999"]):
        run_cli([*base, *command], env=env)
    assert (other / "workspaces").is_dir()  # the command's own --data-dir, in its own process
    after = subprocess.run(
        [*python, read, two_node_cluster], env=env, cwd=REPO, timeout=120, capture_output=True, text=True
    )
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == ["9999", "61.5", str(tmp_path)]


async def test_ps_and_kill_say_so_when_the_sandbox_ends_under_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sandbox (or its owner) that ends while ``ps`` or ``kill`` asks it is one line and exit 1, not a
    traceback: ``LiveSandboxError`` is a ``RuntimeError``; an owner's end arrives as a timeout or an
    ``OSError``."""
    import contextlib
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from computer.cli import _ps
    from computer.cli._context import CliError
    from computer.runtime._live_jobs import LiveSandboxError

    for error in (
        LiveSandboxError("the live sandbox ended: idle"),
        TimeoutError("no answer"),
        OSError(5, "gone"),
    ):

        async def failing(*args: object, error: BaseException = error, **kwargs: object) -> object:
            raise error

        runtime = SimpleNamespace(processes=failing, kill_process=failing)

        @contextlib.asynccontextmanager
        async def opened(*args: object, runtime: object = runtime, **kwargs: object):  # type: ignore[no-untyped-def]
            yield SimpleNamespace(runtime=runtime)

        monkeypatch.setattr(_ps, "open_workspace", opened)
        monkeypatch.setattr(_ps, "_known", lambda options, name: None)
        options = SimpleNamespace(local=False)
        console = Console(file=io.StringIO())
        with pytest.raises(CliError) as listed:
            await _ps.list_processes(options, "ws", None, console)  # type: ignore[arg-type]
        assert listed.value.code == 1 and str(error) in str(listed.value)
        with pytest.raises(CliError) as killed:
            await _ps.kill_process(options, "ws", 7, None, console)  # type: ignore[arg-type]
        assert killed.value.code == 1 and str(error) in str(killed.value)


def test_ps_and_kill_of_a_workspace_another_command_holds_say_only_that_process_reaches_it(
    tmp_path: Path,
) -> None:
    """``computer ps w`` while a ``computer shell w`` session held it (its ``!server &`` running in
    the session's live sandbox) said "another owner holds it; wait until that command ends": at that
    end the processes end too, so the advice could never show them."""
    import time

    env = cli_env(tmp_path)
    shell = subprocess.Popen(
        [sys.executable, "-m", "computer", "shell", "held"], env=env, cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # the session's lease, as `computer ls` reads it (a subprocess: no event to await)
            rows = json.loads(run_cli(["ls", "--json"], env=env).stdout or "[]")
            if any(row["name"] == "held" and row["state"] == "awake" for row in rows):
                break
            assert shell.poll() is None and time.monotonic() < deadline, "the session never held it"
            time.sleep(0.1)
        for command in (["ps", "held"], ["kill", "held", "5"]):
            done = run_cli(command, env=env)
            assert (done.returncode, done.stdout) == (1, ""), (command, done.stdout, done.stderr)
            lines = done.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: workspace 'held' is awake in process "), (
                lines
            )
            assert f"process {shell.pid} " in lines[0] and "only it reaches the sandbox" in lines[0], lines
            assert "!ps -ef" in lines[0] and "wait until" not in lines[0], lines
    finally:
        assert shell.stdin is not None
        shell.stdin.close()  # the end of input ends the session
        shell.wait(timeout=60)
    after = run_cli(["ps", "held"], env=env)
    assert after.returncode == 0 and "is asleep" in after.stdout, after.stdout + after.stderr
