"""With no cluster named, ``tool``, ``shell``, ``mcp`` and ``ls`` work in the command's own process:
no Ray, the workspace's lease taken like any owner's, so a cluster owner started later fences it."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import computer
from computer.actors.naming import check_name
from computer.cli import GlobalOptions, app, list_workspaces
from computer.cli._context import CliError
from computer.cli._inprocess import in_process_workspace
from computer.config import configure

from .conftest import COMPUTER, REPO, cli_env, mcp_exchange

runner = CliRunner()


def test_tool_calls_run_in_process_without_importing_ray(tmp_path: Path) -> None:
    code = f"""
import json, sys
from typer.testing import CliRunner
from computer.cli import app
base = ["--data-dir", {str(tmp_path)!r}, "tool", "notes"]
runner = CliRunner()
wrote = runner.invoke(app, [*base, "write", json.dumps({{"path": "/workspace/a.txt", "content": "kept\\n"}})])
read = runner.invoke(app, [*base, "read", json.dumps({{"path": "/workspace/a.txt"}})])
listed = runner.invoke(app, ["--data-dir", {str(tmp_path)!r}, "ls", "--json"])
print(json.dumps([wrote.exit_code, read.exit_code, json.loads(read.output)["content"],
                  json.loads(listed.output)[0]["state"], "ray" in sys.modules]))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [0, 0, "kept", "asleep", False]


def test_exec_runs_in_process_on_the_first_backend(tmp_path: Path) -> None:
    base = ["--data-dir", str(tmp_path), "tool", "runner"]
    result = runner.invoke(app, [*base, "exec", json.dumps({"command": "echo $((6 * 7))"})])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["backend"], out["status"], out["stdout"]) == ("shell", "completed", "42\n")
    wrong = runner.invoke(app, [*base, "exec", json.dumps({"command": "true", "backend": "ruby"})])
    assert wrong.exit_code == 1 and "'shell' or 'python'" in wrong.output


async def test_an_awake_workspace_shows_its_process_and_live_runs(tmp_path: Path) -> None:
    config = configure(data_dir=tmp_path)
    async with in_process_workspace(config, "busy", backends=True, assets=False) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        handle = await ws.runtime.exec("sleep 60", backend="shell")
        try:
            rows = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=tmp_path))
        finally:
            await handle.kill()
        (row,) = rows
        assert row.state == "awake" and row.where is not None and row.where.startswith("in process ")
        assert row.live_runs == 1
    (row,) = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=tmp_path))
    assert (row.state, row.where, row.live_runs) == ("asleep", None, 0)


async def test_a_second_in_process_owner_is_refused_while_the_first_holds_the_lease(tmp_path: Path) -> None:
    config = configure(data_dir=tmp_path)
    async with in_process_workspace(config, "mine", backends=False, assets=False):
        result = await asyncio.to_thread(
            runner.invoke, app, ["--data-dir", str(tmp_path), "tool", "mine", "ls", '{"path": "/"}']
        )
    assert result.exit_code == 1
    assert "is awake in process" in result.output and "wait until that command ends" in result.output
    assert "--address" not in result.output  # another command of this machine holds it: no cluster to join


async def test_a_cluster_owner_started_later_fences_the_in_process_owner(cluster: Any, name: str) -> None:
    async with in_process_workspace(cluster, name, backends=False, assets=False) as local:
        await local.fs.write_file("/from-cli", "written in process")
        async with computer.get_workspace(name) as client:  # takes the lease over, opens the file
            assert await client.fs.read_text("/from-cli") == "written in process"
            with pytest.raises(OSError) as caught:
                await local.fs.write_file("/late", "must not land")
            assert caught.value.errno == errno.EROFS
            await client.fs.write_file("/from-cluster", "ok")
            assert not await client.fs.exists("/late")
    # The cluster owner holds the lease now: the command refuses rather than taking it back.
    refused = await asyncio.to_thread(
        runner.invoke,
        app,
        ["--data-dir", str(cluster.data_dir), "tool", name, "read", '{"path": "/from-cluster"}'],
    )
    assert refused.exit_code == 1 and "is awake on node" in refused.output
    assert "--address" in refused.output  # reach it through its cluster


def test_mcp_serves_the_full_tool_set_in_process(tmp_path: Path) -> None:
    _, listing = mcp_exchange(["--data-dir", str(tmp_path), "mcp", "served"])
    names = {tool["name"] for tool in listing["result"]["tools"]}
    assert names == {"read", "ls", "find", "grep", "write", "edit", "delete", "exec", "publish"}
    # The README offers ``computer mcp`` for a dev server kept between calls: its processes and kill.
    _, listing = mcp_exchange(["--data-dir", str(tmp_path), "mcp", "served", "--processes"])
    assert {tool["name"] for tool in listing["result"]["tools"]} == names | {"processes", "kill"}


def test_shell_runs_in_process_and_leaves_the_workspace_asleep(tmp_path: Path) -> None:
    script = "!mkdir -p d && echo hello > d/f.txt\nls d\ncat d/f.txt\nexit\n"
    proc = subprocess.run(
        [*COMPUTER, "--data-dir", str(tmp_path), "shell", "prompt"],
        env=cli_env(), cwd=REPO, input=script, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "f.txt" in proc.stdout and "hello" in proc.stdout
    (row,) = list_workspaces(GlobalOptions(data_dir=tmp_path))
    assert (row.name, row.state) == ("prompt", "asleep")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _made(data_dir: Path, name: str) -> Path:
    """The workspace file an earlier owner of ``name`` made."""
    from computer.actors.naming import workspace_file
    from computer.storage import FileSystem

    path = workspace_file(configure(data_dir=data_dir), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    FileSystem.open(str(path)).close()
    return path


def test_a_known_workspace_whose_file_is_missing_is_refused_never_opened_empty(tmp_path: Path) -> None:
    """With no cluster, a command owns the workspace in its own process. One the directory knows whose
    file is missing (the data directory's workspaces moved, unmounted, copied without them) is refused,
    naming the file: before, the command made a new, empty workspace under the old name and took its
    writes there. The file back, it opens with its data; a new name works as before."""
    base = ["--data-dir", str(tmp_path), "tool"]
    wrote = runner.invoke(app, [*base, "kept", "write", '{"path": "/workspace/a", "content": "x"}'])
    assert wrote.exit_code == 0, wrote.output
    from computer.actors.naming import workspace_file

    path = workspace_file(configure(data_dir=tmp_path), "kept")
    moved = path.with_name("moved.sqlite")
    path.rename(moved)
    try:
        refused = runner.invoke(app, [*base, "kept", "read", '{"path": "/workspace/a"}'])
        assert refused.exit_code == 1, refused.output
        assert "missing" in refused.output and "kept.sqlite" in refused.output.replace("\n", "")
        assert not path.exists()  # nothing made in its place
    finally:
        moved.rename(path)
    read = runner.invoke(app, [*base, "kept", "read", '{"path": "/workspace/a"}'])
    assert read.exit_code == 0 and json.loads(read.output)["content"] == "x", read.output
    fresh = runner.invoke(app, [*base, "new-one", "write", '{"path": "/workspace/b", "content": "y"}'])
    assert fresh.exit_code == 0, fresh.output


def test_a_workspace_whose_command_was_killed_is_asleep_and_opens_at_once(tmp_path: Path) -> None:
    import socket

    from computer.actors.directory import SqliteDirectory

    _made(tmp_path, "crashed")  # its command made its file, then was killed holding the lease
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    directory.acquire_lease("crashed", f"process:{_dead_pid()}@{socket.gethostname()}", "gone", 60.0)
    directory.acquire_lease("elsewhere", "process:1@another-machine", "remote", 60.0)
    directory.close()
    (row_crashed, row_elsewhere) = list_workspaces(GlobalOptions(data_dir=tmp_path))
    assert (row_crashed.name, row_crashed.state) == ("crashed", "asleep")
    assert (row_elsewhere.name, row_elsewhere.state) == ("elsewhere", "awake")  # cannot tell: its lease holds
    base = ["--data-dir", str(tmp_path), "tool"]
    opened = runner.invoke(app, [*base, "crashed", "write", '{"path": "/workspace/a", "content": "x"}'])
    assert opened.exit_code == 0, opened.output
    refused = runner.invoke(app, [*base, "elsewhere", "ls", '{"path": "/"}'])
    assert refused.exit_code == 1 and "awake in process 1 on another-machine" in refused.output


def test_a_workspace_whose_owner_actor_or_host_was_killed_is_asleep(tmp_path: Path) -> None:
    """Owners in Ray actors name their process in their lease (``<actor>#<pid>/<uuid>``): one of this
    machine that is gone is asleep at once. Before, ``ls`` listed a killed owner host "awake ...
    (pid N)" with its dead pid, and ``delete_workspace`` refused for the rest of its lease (~28 s)."""
    import socket

    from computer.actors.directory import SqliteDirectory

    here, dead = f"{socket.gethostname()}/10.0.0.9", _dead_pid()
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    directory.acquire_lease("dedicated", "a" * 56, f"{'b' * 32}#{dead}/u1", 60.0, host=here)
    directory.acquire_lease("hosted", "a" * 56, f"computer:host:0123abcd:aaaa:1#{dead}/u2", 60.0, host=here)
    directory.acquire_lease("running", "a" * 56, f"{'b' * 32}#{os.getpid()}/u3", 60.0, host=here)
    directory.acquire_lease(
        "remote", "a" * 56, f"{'b' * 32}#{dead}/u4", 60.0, host="another-machine/10.0.0.8"
    )
    directory.acquire_lease("older", "a" * 56, "c" * 32, 60.0, host=here)  # a bare uuid: cannot tell
    directory.close()
    rows = {row.name: row for row in list_workspaces(GlobalOptions(data_dir=tmp_path))}
    assert {name: row.state for name, row in rows.items()} == {
        "dedicated": "asleep",
        "hosted": "asleep",
        "running": "awake",
        "remote": "awake",  # cannot tell from here: its lease holds
        "older": "awake",
    }
    assert rows["hosted"].owner_host is None and rows["running"].where is not None


async def test_a_one_run_workspace_starts_nothing_ahead(tmp_path: Path) -> None:
    """``live=False`` (``tool NAME exec``, ``shell -c``): one run, then the command ends, so neither
    backend starts the next run's sandbox or guest after it (they were discarded unused at the
    close)."""
    config = configure(data_dir=tmp_path)
    for backends in (("python",), ("shell",)):
        async with in_process_workspace(config, "once", backends=backends, assets=False, live=False) as ws:
            backend: Any = ws.runtime._backends[backends[0]]
            await ws.fs.mkdir("/workspace", recursive=True)
            command = "print(6 * 7)" if backends == ("python",) else "echo 42"
            result = await (await ws.runtime.exec(command, backend=backends[0])).result()
            assert result.stdout == "42\n"
            await asyncio.sleep(0.2)  # what would be started ahead starts a moment after the run
            assert list(backend._warm.kept) == [], backends


def test_a_server_started_by_one_exec_command_is_said_to_end_with_it(tmp_path: Path) -> None:
    """`computer tool NAME exec` runs in a sandbox of its own, which ends with the command: a server
    started in the background ends too, and the result says so and how to keep one (it said nothing)."""
    base = ["--data-dir", str(tmp_path), "tool", "dev"]
    command = "python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 & echo started"
    result = runner.invoke(app, [*base, "exec", "--command", command])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["stdout"] == "started\n"
    assert "left 1 process running in the background, ended with it" in out["stderr"]
    assert "python3 -m http.server 8123" in out["stderr"]
    assert "`computer shell dev`" in out["stderr"] and "`computer mcp dev --processes`" in out["stderr"]
    described = runner.invoke(app, [*base, "exec", "--help"])
    assert "ends with the command" in described.output


def test_a_python_run_s_advice_names_what_keeps_a_python_process(tmp_path: Path) -> None:
    """A python run that left a process in the background advised `computer shell NAME`, whose prompt
    runs every command on the shell backend: no way to keep a python run's process there."""
    base = ["--data-dir", str(tmp_path), "tool", "py"]
    source = "import subprocess\nsubprocess.Popen(['sleep', '1234.25'])\nprint('started')"
    result = runner.invoke(app, [*base, "exec", json.dumps({"backend": "python", "command": source})])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert "ended with it" in out["stderr"] and "sleep 1234.25" in out["stderr"], out["stderr"]
    assert "`computer mcp py --processes`, exec with backend python" in out["stderr"]
    assert "`computer shell py`" not in out["stderr"]
    assert "`computer ps py --backend python`" in out["stderr"]
    described = runner.invoke(app, [*base, "exec", "--help"])
    assert "`computer shell NAME` for the shell backend" in " ".join(described.output.split())


def test_ls_names_an_owner_hosts_pid_with_or_without_its_place() -> None:
    """``computer ls``'s owner host column: ``host 3 (pid 812)``, from an owner id with its place
    (``#<pid>~<place>/<uuid>``) as from an older one."""
    import time

    from computer.actors.directory import WorkspaceRecord
    from computer.cli._ls import _owner_host

    def host_of(owner: str) -> str | None:
        return _owner_host(WorkspaceRecord("w", "n", owner, 1, time.time() + 60, time.time(), "active"))

    assert host_of("computer:host:d:n:3#812~0123456789ab/u1") == "host 3 (pid 812)"
    assert host_of("computer:host:d:n:3#812/u1") == "host 3 (pid 812)"
    assert host_of(f"{'b' * 32}#812~0123456789ab/u1") is None  # a dedicated owner: no host


@pytest.mark.parametrize("name", ["a\ud800", "b\udcff"])
async def test_a_name_with_a_lone_surrogate_is_einval_not_a_unicode_error(tmp_path: Path, name: str) -> None:
    """Through the Python API (the CLI refuses such argv itself), a name holding a lone surrogate
    passed ``check_name``, and opening it raised ``UnicodeEncodeError`` (a traceback), not an ``OSError``."""
    with pytest.raises(OSError) as info:
        check_name(name)
    assert info.value.errno == errno.EINVAL and "UTF-8" in str(info.value)
    config = configure(data_dir=tmp_path)
    with pytest.raises(CliError) as refused:
        async with in_process_workspace(config, name, backends=False, assets=False):
            pass
    assert refused.value.code == 2 and "not valid UTF-8" in str(refused.value)
    assert not list_workspaces(GlobalOptions(data_dir=tmp_path))


async def test_a_name_with_a_newline_is_listed_with_its_size(tmp_path: Path) -> None:
    """Only "/" and NUL are refused in a name; ``ls`` matched files with ``.`` (no newline), so the
    file of ``a\\nb`` was not found and its size shown as "elsewhere" (``None``)."""
    config = configure(data_dir=tmp_path)
    async with in_process_workspace(config, "a\nb", backends=False, assets=False) as ws:
        await ws.fs.write_file("/kept.txt", b"x")
    (row,) = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=tmp_path))
    assert row.name == "a\nb" and row.size is not None and row.size > 0
