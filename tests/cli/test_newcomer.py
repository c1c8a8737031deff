"""A new user's mistakes and first tries (a second first-hour session): each test is one friction
that was found by doing what the README says, then what a newcomer does wrong."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .conftest import COMPUTER, MCP_HANDSHAKE, REPO, cli_env, free_port, mcp_exchange, run_cli


def test_a_tool_given_before_the_workspace_says_the_workspace_comes_first(tmp_path: Path) -> None:
    """``computer tool write notes ...`` answered "unknown tool 'notes'" and the list of tools."""
    done = run_cli(
        ["tool", "write", "notes", '{"path": "/workspace/a", "content": "a"}'], env=cli_env(tmp_path)
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "the workspace's name comes first" in done.stderr
    assert "computer tool notes write" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "workspaces" / "write.sqlite").exists()


def test_a_misspelt_or_borrowed_tool_name_says_which_tool_was_meant(tmp_path: Path) -> None:
    for args, meant in (
        (["tool", "w", "wrte", "{}"], "write"),
        (["tool", "w", "cat", "{}"], "read"),  # a shell's name
        (["tool", "w", "bash", "{}"], "exec"),  # names="think"'s name
        (["tool", "w", "grpe", "--help"], "grep"),
        (["tools", "finde"], "find"),
    ):
        done = run_cli(args, env=cli_env(tmp_path))
        assert done.returncode == 2, (args, done.stderr)
        assert f"(did you mean {meant!r}?)" in done.stderr, (args, done.stderr)


def test_a_new_workspace_has_an_empty_user_root_and_the_command_says_it_is_new(tmp_path: Path) -> None:
    """The help's own example, ``computer tool my-workspace ls '{"path": "/workspace"}'``, answered
    "No such file or directory: /workspace" on a new workspace; and a misspelt name answered a read
    with "No such file", as if the files were lost, silently making an empty workspace."""
    env = cli_env(tmp_path)
    listed = run_cli(["tool", "fresh", "ls", '{"path": "/workspace"}'], env=env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert json.loads(listed.stdout) == {"path": "/workspace", "count": 0, "entries": []}
    assert "workspace 'fresh' is new" in listed.stderr and "computer rm fresh" in listed.stderr
    for tool, args in (("find", '{"pattern": "**/*"}'), ("grep", '{"query": "x"}')):
        done = run_cli(["tool", f"fresh-{tool}", tool, args], env=env)
        assert done.returncode == 0 and json.loads(done.stdout)["count"] == 0, done.stdout + done.stderr
    again = run_cli(["tool", "fresh", "ls", '{"path": "/workspace"}'], env=env)
    assert again.returncode == 0 and "is new" not in again.stderr  # only the call that made it
    wrote = run_cli(["tool", "notes", "write", '{"path": "/workspace/a.md", "content": "a"}'], env=env)
    assert wrote.returncode == 0 and "is new" not in wrote.stderr  # a first write is what it looks like
    typo = run_cli(["tool", "note", "read", '{"path": "/workspace/a.md"}'], env=env)
    assert typo.returncode == 1 and "No such file" in json.loads(typo.stdout)["error"]
    assert "workspace 'note' is new" in typo.stderr


def test_shell_c_on_a_workspace_it_made_says_on_stderr_that_it_is_new(tmp_path: Path) -> None:
    """``computer shell ntoes -c 'cat todo.md'`` (a misspelt ``notes``) answered only
    "FileNotFoundError: ... '/workspace/todo.md'", as if the file were lost, and silently made an
    empty workspace; ``computer tool ntoes read ...`` said the workspace was new, ``shell -c`` not."""
    env = cli_env(tmp_path)
    wrote = run_cli(["tool", "notes", "write", '{"path": "/workspace/todo.md", "content": "x"}'], env=env)
    assert wrote.returncode == 0, wrote.stderr
    note = "computer: workspace 'ntoes' is new: this command made it, empty (`computer ls` lists"
    typo = run_cli(["shell", "ntoes", "-c", "cat todo.md"], env=env)
    assert (typo.returncode, typo.stdout) == (1, ""), typo.stdout + typo.stderr
    assert typo.stderr.splitlines()[0].startswith("cat: No such file or directory")
    assert typo.stderr.splitlines()[1].startswith(note), typo.stderr
    for name, line, code in (("ls-new", "ls", 0), ("exec-new", "!cat todo.md", 1)):
        done = run_cli(["shell", name, "-c", line], env=env)
        assert done.returncode == code and done.stdout == "", (line, done.stdout, done.stderr)
        assert f"computer: workspace '{name}' is new" in done.stderr.splitlines()[-1], (line, done.stderr)
    # Not when the line made what it looks like it made, nor on a known workspace, nor a second time.
    for name, line in (("made", "!echo hi > a.txt"), ("notes", "cat todo.md"), ("ntoes", "ls")):
        done = run_cli(["shell", name, "-c", line], env=env)
        assert done.returncode == 0 and "is new" not in done.stderr, (name, line, done.stderr)


def test_a_shell_command_at_the_prompt_says_how_to_run_it_in_the_sandbox(tmp_path: Path) -> None:
    done = run_cli(["shell", "w", "-c", "rm b.txt"], env=cli_env(tmp_path))
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == "unknown command 'rm'; to run it in the sandbox: !rm b.txt (help lists the prompt's own)"
    )


def test_a_log_filter_that_matches_nothing_says_so_and_what_the_log_holds(tmp_path: Path) -> None:
    """``computer log NAME --tool wrte`` said "no audit records for NAME (yet)" of a log that had some."""
    env = cli_env(tmp_path)
    assert (
        run_cli(["tool", "w", "write", '{"path": "/workspace/a", "content": "a"}'], env=env).returncode == 0
    )
    done = run_cli(["log", "w", "--tool", "wrte"], env=env)
    assert done.returncode == 0, done.stderr
    assert "(yet)" not in done.stdout
    assert "no audit records of w match --tool wrte" in done.stdout and "their tools: write" in done.stdout
    errors = run_cli(["log", "w", "--errors"], env=env)
    assert "no audit records of w match --errors (its log holds 1 record(s)" in errors.stdout


def test_mcp_started_from_a_terminal_says_what_it_waits_for(tmp_path: Path) -> None:
    """``computer mcp NAME`` in a terminal said nothing and waited for JSON-RPC: it looked hung."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [*COMPUTER, "mcp", "w"], env=cli_env(tmp_path), cwd=REPO,
        stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(terminal)
    try:
        assert proc.stderr is not None
        line = b""
        deadline = time.monotonic() + 60
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
    finally:
        os.close(controller)  # the terminal hangs up: the session ends
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = line.decode()
    assert "serving workspace 'w' over MCP on stdin/stdout" in text, text
    assert '"args": ["-m", "computer", "mcp", "w"]' in text and "Ctrl-D" in text


def test_mcp_from_an_mcp_host_prints_no_such_note(tmp_path: Path) -> None:
    done = run_cli(["mcp", "w"], env=cli_env(tmp_path), input="")
    assert "serving workspace" not in done.stderr


def test_an_address_nobody_answers_says_how_to_do_without_a_cluster(tmp_path: Path) -> None:
    port = free_port()
    done = run_cli(["--address", f"127.0.0.1:{port}", "tool", "w", "ls", "{}"], env=cli_env(tmp_path))
    assert done.returncode == 1
    assert f"start one there (`ray start --head --port={port}`), or leave out --address" in done.stderr
    via_env = run_cli(["tool", "w", "ls", "{}"], env=cli_env(tmp_path, RAY_ADDRESS=f"127.0.0.1:{port}"))
    assert (
        via_env.returncode == 1
        and "or unset RAY_ADDRESS: commands then work in this process" in via_env.stderr
    )


def test_rm_of_a_workspace_another_command_holds_says_to_end_that_command(tmp_path: Path) -> None:
    """It said "connect to its cluster first ... --address joins its cluster": there was no cluster."""
    env = cli_env(tmp_path)
    shell = subprocess.Popen(
        [*COMPUTER, "shell", "held"], env=env, cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "awake in process" not in run_cli(["ls"], env=env).stdout:
            assert time.monotonic() < deadline, "the shell never held its workspace"
            time.sleep(0.2)
        done = run_cli(["rm", "held", "--yes"], env=env)
    finally:
        assert shell.stdin is not None
        shell.stdin.close()
        try:
            shell.wait(timeout=60)
        except subprocess.TimeoutExpired:
            shell.kill()
            shell.wait()
    assert done.returncode == 1
    assert "not deleted: held: another command holds it (awake in process" in done.stdout
    assert "end that command, or --force deletes it anyway" in done.stdout
    assert "cluster" not in done.stdout


def test_mcp_on_a_new_workspace_lists_an_empty_user_root(tmp_path: Path) -> None:
    """The server's instructions say "the user root is /workspace", and a model's first ``ls`` of it
    on a new workspace answered "No such file or directory: /workspace" (``shell`` made it, mcp not)."""
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "ls", "arguments": {"path": "/workspace"}}}  # fmt: skip
    replies = mcp_exchange(["--data-dir", str(tmp_path), "mcp", "fresh"], [*MCP_HANDSHAKE, call])
    result = replies[2]["result"]
    assert not result.get("isError"), result
    assert json.loads(result["content"][0]["text"])["entries"] == []


def test_ctrl_c_in_the_demo_says_where_its_temporary_data_directory_stays(tmp_path: Path) -> None:
    """An interrupted demo left its /tmp/computer-demo-* directory unmentioned (a finished one says
    how to remove it)."""
    scratch = Path(tempfile.mkdtemp(prefix="demo-tmp-", dir="/tmp"))  # the sandbox user reaches it
    scratch.chmod(0o755)
    env = {k: v for k, v in cli_env().items() if k != "COMPUTER_DATA_DIR"}
    env.update(HOME=str(tmp_path), TMPDIR=str(scratch))
    demo = subprocess.Popen(
        [*COMPUTER, "demo", "--agents", "1"], env=env, cwd=REPO, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        made: list[Path] = []
        deadline = time.monotonic() + 120
        while not made:  # the data directory is made before Ray starts: interrupt while Ray starts
            assert time.monotonic() < deadline and demo.poll() is None, "the demo made no data directory"
            made = list(scratch.glob("computer-demo-*"))
            time.sleep(0.05)
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        out, err = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    assert demo.returncode == 130, out + err
    assert (
        f"interrupted: this run's data directory stays at {made[0]} (remove it: rm -rf {made[0]})" in out
    ), out + err
    assert "Traceback" not in err


def test_kill_with_the_pid_first_says_the_workspace_comes_first(tmp_path: Path) -> None:
    """``computer kill 12 notes`` said only that the PID is not a valid integer."""
    done = run_cli(["kill", "12", "notes"], env=cli_env(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: Invalid value for 'PID'"), done.stderr
    assert done.stderr.endswith(" kill NAME 12\n") and "the workspace's name comes first:" in done.stderr, (
        done.stderr
    )
    assert "comes first" not in run_cli(["kill", "notes", "abc"], env=cli_env(tmp_path)).stderr


def test_a_redis_url_nobody_answers_is_one_line_at_once(tmp_path: Path) -> None:
    """``COMPUTER_REDIS_URL`` of a Redis that is not running: 30 s of silence, then a traceback of
    three chained exceptions (``ls``, ``tool``, ``status``); a URL without a scheme: a traceback."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["ls"], ["tool", "w", "ls", '{"path": "/workspace"}'], ["status"]):
        done = run_cli(args, env=cli_env(tmp_path, COMPUTER_REDIS_URL=url), timeout=20)
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr.startswith(f"error: Redis at {url} (COMPUTER_REDIS_URL: "), (args, done.stderr)
        assert "or unset COMPUTER_REDIS_URL" in done.stderr and "Traceback" not in done.stderr
    bare = run_cli(["ls"], env=cli_env(tmp_path, COMPUTER_REDIS_URL="localhost:6379"), timeout=20)
    assert (
        bare.returncode == 2 and "must start with redis://" in bare.stderr and "Traceback" not in bare.stderr
    )


def test_a_tool_call_missing_a_required_argument_shows_a_call_that_works(tmp_path: Path) -> None:
    """``computer tool notes ls`` (as one types ``ls``) answered only ``Invalid arguments: path:
    Field required``; now stderr shows the tool's example call (stdout keeps the JSON result)."""
    env = cli_env(tmp_path)
    made = run_cli(["tool", "notes", "write", '{"path": "/workspace/notes.md", "content": "a"}'], env=env)
    assert made.returncode == 0, made.stderr
    for tool, example in (
        ("ls", """'{"path": "/workspace"}'"""),
        ("exec", """'{"command": "wc -l notes.md"}'"""),
    ):
        done = run_cli(["tool", "notes", tool], env=env)
        assert done.returncode == 1 and "Field required" in json.loads(done.stdout)["error"], done.stdout
        assert done.stderr.splitlines() == [
            f"computer: e.g. computer tool notes {tool} {example} (`computer tool notes {tool} --help`: its arguments)"
        ], done.stderr
        worked = run_cli(["tool", "notes", tool, example.strip("'")], env=env)  # the example, as shown
        assert worked.returncode == 0, worked.stdout + worked.stderr
    unknown = run_cli(["tool", "notes", "read", "--file", "/workspace/a"], env=env)
    assert unknown.returncode == 1 and unknown.stderr == "", unknown.stderr  # its message lists the names


def test_status_says_whether_exec_runs_in_a_sandbox_on_this_machine(tmp_path: Path) -> None:
    """On a machine without bubblewrap (the README's first command installs no system package)
    every exec ran as the host user, and no command said so: only ``BackendInfo.isolation`` did."""
    shown = run_cli(["status"], env=cli_env(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "\nexec sandbox (this machine): " in shown.stdout, shown.stdout
    no_bwrap = tmp_path / "bin"  # a PATH where `bwrap` is not found
    no_bwrap.mkdir()
    missing = run_cli(["status"], env=cli_env(tmp_path, PATH=str(no_bwrap)))
    assert missing.returncode == 0, missing.stderr
    line = next(line for line in missing.stdout.splitlines() if line.startswith("exec sandbox"))
    assert "NO namespace isolation" in line and "apt-get install bubblewrap" in line, line
