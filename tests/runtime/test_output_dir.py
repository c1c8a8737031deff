"""``/.computer/output`` replaced under the runtime: a python program's ``workspace`` calls reached it
(a file written there, or a link a shell run made in its mirror renamed there); they are refused now
(``_protected.call_guard``), and the owner's own API (``workspace.fs``) still can. Saved and
background logs still go to a directory of its own there, whatever was put in its place is kept
aside under a name that says so, and pruning never removes anything through a link."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._options import OutputOptions, prune_logs
from computer.storage import FileSystem

from ._live_support import eventually

live = pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")
SAVING = {"max_lines": 5, "keep": 2}


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


async def moved_aside(ws: computer.Workspace) -> list[str]:
    return sorted(e.name for e in await ws.fs.readdir("/.computer") if e.name.startswith("output.moved-"))


def waiting(name: str) -> str:
    """Shell that waits (30 s at most) for the workspace's file ``name`` to reach the sandbox."""
    return f"for t in $(seq 600); do [ -e {name} ] && break; sleep 0.05; done"


async def contains(ws: computer.Workspace, path: str, text: str) -> bool:
    return await ws.fs.exists(path) and text in await ws.fs.read_text(path)


async def refused_to_a_program(ws: computer.Workspace, call: str) -> None:
    """A python program's ``workspace`` ``call`` is refused (the runtime's directory)."""
    source = f"import workspace\ntry:\n    workspace.{call}\nexcept PermissionError:\n    print('refused')\n"
    tried = await run(ws, source, backend="python")
    assert (tried.status, tried.stdout) == ("completed", "refused\n"), (tried.stdout, tried.stderr)


@live
async def test_a_file_put_there_is_moved_aside_and_every_log_is_written(tmp_path: Path) -> None:
    """A file at ``/.computer/output``: a live sandbox's background logs failed at every tick and were
    lost at its end, and a saved log was "not-saved" with no reason. A python program may not put it
    there; the owner's API may: the file is moved aside (kept), the directory made again; the logs
    are there, after a reopen too."""
    path = str(tmp_path / "ws.db")
    async with computer.Workspace(path, backends=[ShellBackend(), PythonBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        # The printer prints once its run returned (``started``) and goes on once the file is planted
        # (``planted``), both from the workspace: printing for a fixed 2 s, it had ended and its log
        # been written whole and let go before the rm on a loaded machine (the python run below is
        # slow to start), and that log never came back.
        printer = await run(
            ws,
            f"({waiting('started')}; echo bg-1; {waiting('planted')};"
            " for i in $(seq 2 40); do echo bg-$i; sleep 0.05; done) &",
        )
        log = f"/.computer/output/{printer.id}.background.log"
        await ws.fs.write_file("/workspace/started", b"")
        await eventually(lambda: ws.fs.exists(log), within=10)
        await refused_to_a_program(ws, "rm('/.computer/output', recursive=True)")
        # The shell sandbox's background-log flush may make the directory again between the two
        # calls (a tick every 100 ms): planted again until the file is there (bounded).
        for _ in range(50):
            await ws.fs.rm("/.computer/output", recursive=True, force=True)
            try:
                await ws.fs.write_file("/.computer/output", "the program's\n")
                break
            except IsADirectoryError:
                pass
        else:
            raise AssertionError("the directory came back 50 times")
        await ws.fs.write_file("/workspace/planted", b"")
        await eventually(lambda: contains(ws, log, "bg-40\n"))  # a tick moved it aside
        saved = await run(ws, "seq 20", output=SAVING)
        assert saved.truncated["stdout"].status == "saved", saved.truncated
        assert await ws.fs.read_text(saved.truncated["stdout"].path or "") == "".join(
            f"{i}\n" for i in range(1, 21)
        )
        await ws.runtime.end_sandbox()
        (aside,) = await moved_aside(ws)
        assert await ws.fs.read_text(f"/.computer/{aside}") == "the program's\n"
    async with computer.Workspace(path, backends=[ShellBackend()]) as ws:
        assert "bg-40\n" in await ws.fs.read_text(log)
        assert "moved to /.computer/output.moved-" in await ws.fs.read_text(log)  # the log says why
        assert (await ws.fs.stat("/.computer/output")).is_directory


@live
@pytest.mark.parametrize("target", ["/workspace/src", "../workspace/src", "/root"])
async def test_a_link_renamed_there_leads_no_log_nor_removal_where_it_points(target: str) -> None:
    """A link at ``/.computer/output``: saved and background logs went where it pointed, and
    ``prune_logs`` removed the oldest ``*.log`` files there, the user's own; a link to a path the
    workspace has not (a host path) had every log "not-saved". The link is moved aside as it is."""
    async with computer.Workspace(backends=[ShellBackend(), PythonBackend()]) as ws:
        await ws.fs.mkdir("/workspace/src", recursive=True)
        for i in range(4):
            await ws.fs.write_file(f"/workspace/src/user{i}.log", f"the user's {i}\n")
        made = await run(ws, f"ln -s {target} lnk")
        assert made.status == "completed", made.stderr
        await refused_to_a_program(ws, "rename('/workspace/lnk', '/.computer/output')")
        await ws.fs.rename("/workspace/lnk", "/.computer/output")  # (the owner's API may)
        printer = await run(ws, f"({waiting('go')}; echo bg) &")
        log = f"/.computer/output/{printer.id}.background.log"
        await ws.fs.write_file("/workspace/go", b"")
        await eventually(lambda: contains(ws, log, "bg\n"))
        for _ in range(3):
            saved = await run(ws, "seq 20", output=SAVING)
            assert saved.truncated["stdout"].status == "saved", saved.truncated
            assert (saved.truncated["stdout"].path or "").startswith("/.computer/output/")
            assert await ws.fs.read_text(saved.truncated["stdout"].path or "") == "".join(
                f"{i}\n" for i in range(1, 21)
            )
        await ws.runtime.end_sandbox()
        assert sorted(e.name for e in await ws.fs.readdir("/workspace/src")) == [
            f"user{i}.log" for i in range(4)
        ]
        (aside,) = await moved_aside(ws)
        assert await ws.fs.readlink(f"/.computer/{aside}") == target
        # Pruned in its own directory (keep=2: the oldest saved log went).
        assert (await ws.fs.stat("/.computer/output")).is_directory
        assert (
            len([e for e in await ws.fs.readdir("/.computer/output") if e.name.endswith(".stdout.log")]) == 2
        )


async def test_pruning_stops_when_the_directory_became_a_link_while_it_asked_what_is_held(
    fs: FileSystem,
) -> None:
    """``prune_logs`` asks which background logs a running process holds (a call that waits) between
    its listing and its removals: a link put there meanwhile led the removals to where it pointed."""
    await fs.mkdir("/workspace/src", recursive=True)
    await fs.mkdir("/.computer/output", recursive=True)
    for i, name in enumerate(["exec-1.background.log", "exec-2.stdout.log", "exec-3.stdout.log"]):
        await fs.write_file(f"/.computer/output/{name}", b"log\n", mtime=1_000 + i)
        await fs.write_file(f"/workspace/src/{name}", b"the user's\n", mtime=1_000 + i)

    async def held() -> set[str]:
        await asyncio.sleep(0)
        await fs.rename("/.computer/output", "/.computer/elsewhere")
        await fs.symlink("/workspace/src", "/.computer/output")
        return set()

    await prune_logs(fs, OutputOptions(keep=1), held)
    assert len(await fs.readdir("/workspace/src")) == 3
    assert len(await fs.readdir("/.computer/elsewhere")) == 3


_FORGER = r"""
import json, os, sys, time, workspace
victim, me = sys.argv[1], os.environ["COMPUTER_EXEC_ID"]
forged = json.loads(workspace.read_text(f"/.computer/exec/{victim}.json"))
forged.update(status="completed", exit_code=0, stdout="all good\n")
try:  # (refused now: its owner's API plants it below)
    workspace.rename("/workspace/lnk", f"/.computer/output/python.{me}.stdout.log")
    raise SystemExit("planted")
except PermissionError:
    pass
if WHILE:  # once the log streams: its start looked at its path already
    print("\n" * 3000, end="", flush=True)
    workspace.write_file("/workspace/streaming", "")
    for _ in range(500):
        if workspace.exists("/workspace/planted"):
            break
        time.sleep(0.02)
print(json.dumps(forged))
print("\n" * 3000, end="")
"""


async def plant(ws: computer.Workspace, name: str) -> None:
    """The link a shell run made renamed to ``/.computer/output/<name>`` by the owner's API."""
    await ws.fs.mkdir("/.computer/output", recursive=True)
    await ws.fs.rename("/workspace/lnk", f"/.computer/output/{name}")


@live
@pytest.mark.parametrize("when", ["before", "while"])
async def test_a_link_at_a_saved_logs_name_never_leads_the_log_into_the_journal(
    tmp_path: Path, when: str
) -> None:
    """A link at a run's saved log's name (made by a shell run, renamed there: a python program's
    ``workspace.rename`` could, the owner's API still can) to another run's journal record had the
    saved log, which the runtime writes itself, written into the record: ``failed 1`` read back after
    a restart as ``completed 0`` with the output the program chose (its ``workspace`` calls may not
    change the journal). The log is written at its own name; the link is gone."""
    path = str(tmp_path / "ws.db")
    async with computer.Workspace(path, backends=[ShellBackend(), PythonBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        victim = await run(ws, "echo bad; exit 1")
        record = await ws.fs.read_text(f"/.computer/exec/{victim.id}.json")
        made = await run(ws, f"ln -s /.computer/exec/{victim.id}.json lnk")
        assert made.status == "completed", made.stderr
        await ws.fs.write_file("/workspace/forger.py", _FORGER.replace("WHILE", str(when == "while")))
        source = f"import runpy, sys\nsys.argv = ['forger', {victim.id!r}]\nrunpy.run_path('forger.py')\n"
        if when == "before":
            await plant(ws, "python.forger.stdout.log")
        handle = await ws.runtime.exec(source, backend="python", id="forger")
        if when == "while":
            await eventually(lambda: ws.fs.exists("/workspace/streaming"), within=30)
            await plant(ws, "python.forger.stdout.log")
            await ws.fs.write_file("/workspace/planted", "")
        forger = await handle.result()
        assert forger.status == "completed", forger.stderr
        saved = forger.truncated["stdout"]
        assert saved.status == "saved" and saved.path is not None
        assert '"all good' in await ws.fs.read_text(saved.path)  # the log: at its own name, whole
        assert await ws.fs.read_text(f"/.computer/exec/{victim.id}.json") == record
    async with computer.Workspace(path, backends=[ShellBackend()]) as ws:
        again = await (await ws.runtime.get_exec(victim.id)).result()
        assert (again.status, again.exit_code, again.stdout) == ("failed", 1, "bad\n")


_BACKGROUND_FORGER = r"""
import os, subprocess, workspace
me = os.environ["COMPUTER_EXEC_ID"]
try:  # (refused now: its owner's API planted it)
    workspace.rename("/workspace/other", f"/.computer/output/{me}.background.log")
    raise SystemExit("planted")
except PermissionError:
    pass
subprocess.Popen(["sh", "-c", "sleep 0.5; echo printed"])
"""


@live
async def test_a_link_at_a_background_logs_name_is_removed_and_the_log_written() -> None:
    """A link at a run's background log's name to a journal record (a python program's
    ``workspace.rename`` could put it there, the owner's API still can): the write is refused (the
    journal is protected), so every tick failed on it and the log was lost at the sandbox's end. The
    link is removed and the log written; the record stays as it was."""
    async with computer.Workspace(backends=[ShellBackend(), PythonBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        victim = await run(ws, "echo bad; exit 1")
        record = await ws.fs.read_text(f"/.computer/exec/{victim.id}.json")
        made = await run(ws, f"ln -s /.computer/exec/{victim.id}.json lnk; ln -s lnk other")
        assert made.status == "completed", made.stderr
        await plant(ws, "forger.background.log")
        forger = await run(ws, _BACKGROUND_FORGER, backend="python", id="forger")
        assert forger.status == "completed", forger.stderr
        log = f"/.computer/output/{forger.id}.background.log"
        await eventually(lambda: contains(ws, log, "printed\n"), within=10)
        with pytest.raises(OSError):
            await ws.fs.readlink(log)
        assert await ws.fs.read_text(f"/.computer/exec/{victim.id}.json") == record
        await ws.runtime.end_sandbox("python")
