"""A run in a sandbox of its own (``live=False``) whose event loop ended under it (one ``asyncio.run``
or ``run_until_complete`` per call, the loop closed or stopped with the run in progress), ended from a
new loop by a kill or the workspace's close: its process tree ends, what it wrote is pulled, and it
gets a kill's result (cancelled, 137, "killed") in the journal and from ``get_exec`` in any loop.
Before, the kill said the run "was not killed and runs on until it ends by itself", and the run stayed
"running" (in ``Runtime._running`` and the journal) until a reopen called it "failed: owner
restarted"; a close left its command running."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from computer import Workspace
from computer.runtime import BackendInfo, ExecEvent, ExecRequest, ExitEvent, PythonBackend, ShellBackend

from ._live_support import host_pids_with, kill_all, runs_itself

MARK = f"sleep 31339.{os.getpid():07d}"  # this test process's own (another worktree's run at once)
KILLED = ("cancelled", 137, "printed\n", "killed")
SOURCES = {
    "shell": f"echo printed; seq 3 > a; {MARK}",
    "python": (
        "import subprocess\nprint('printed', flush=True)\nopen('a', 'w').write('1\\n2\\n3\\n')\n"
        f"subprocess.run({MARK.split()!r})\n"
    ),
}

pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),  # the ended loop's tasks
    pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning"),  # (a step of one)
]


@pytest.fixture(autouse=True)
def _no_leftovers() -> Any:
    yield
    kill_all(MARK)
    gc.collect()  # the ended loop's tasks and coroutines go now, not during a later test


def _backend(kind: str) -> Any:
    return ShellBackend(live=False) if kind == "shell" else PythonBackend(live=False)


def _stranded(ws: Workspace, source: str, *, close: bool = True) -> tuple[str, asyncio.AbstractEventLoop]:
    """Start ``source`` (it prints "printed", writes ``a``, then runs ``MARK``) in a loop that is
    closed (or only stopped: ``close=False``) once ``MARK`` runs and the output was read, the run's
    task still pending; the run's id and that loop."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(ws.fs.mkdir("/workspace", recursive=True))
        handle = loop.run_until_complete(ws.runtime.exec(source, timeout=60))
        deadline = time.monotonic() + 30
        while not runs_itself(MARK) or "printed" not in ws.runtime._running[handle.id].snapshot.stdout:
            assert time.monotonic() < deadline
            loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        if close:
            loop.close()
    return handle.id, loop


async def _kill_then_look(ws: Workspace, run_id: str) -> tuple[Any, dict[str, Any], int, bytes]:
    await ws.runtime.kill_exec(run_id)
    result = await (await ws.runtime.get_exec(run_id)).result()
    record = json.loads(await ws.fs.read_file(f"/.computer/exec/{run_id}.json"))
    return result, record, ws.runtime.active(), await ws.fs.read_file("/workspace/a")


def _outcome(result: Any) -> tuple[Any, ...]:
    return (result.status, result.exit_code, result.stdout, result.error)


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_a_kill_from_a_new_loop_ends_a_run_in_a_sandbox_of_its_own_and_records_a_killed_result(
    tmp_path: Path, kind: str
) -> None:
    db = str(tmp_path / "w.db")
    ws = Workspace(db, backends=[_backend(kind)])
    try:
        run_id, _ = _stranded(ws, SOURCES[kind])
        result, record, active, a = asyncio.run(asyncio.wait_for(_kill_then_look(ws, run_id), 60))
        assert _outcome(result) == KILLED, result
        assert "/workspace/a" in result.pulled, result
        assert (record["status"], record["exit_code"], record["stdout"]) == KILLED[:3], record
        assert (active, a) == (0, b"1\n2\n3\n")  # what it wrote, in the workspace at once
        assert host_pids_with(MARK) == []
        asyncio.run(asyncio.wait_for(ws.runtime.kill_exec(run_id), 60))  # ended: nothing to do
        source = "cat a" if kind == "shell" else "print(open('a').read(), end='')"
        later = asyncio.run(asyncio.wait_for(_result_of(ws, source), 60))  # the next run: a fresh mirror
        assert (later.status, later.stdout) == ("completed", "1\n2\n3\n"), later
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    del ws
    gc.collect()
    _reopened_says_killed_and_kept(db, _backend(kind), run_id)


def _reopened_says_killed_and_kept(db: str, backend: Any, run_id: str) -> None:
    """After a close and reopen: the run's record is a kill's, and what it wrote is there."""
    again = Workspace(db, backends=[backend])
    try:
        handle = asyncio.run(asyncio.wait_for(again.runtime.get_exec(run_id), 60))
        assert _outcome(asyncio.run(handle.result())) == KILLED
        assert asyncio.run(again.fs.read_file("/workspace/a")) == b"1\n2\n3\n"
    finally:
        asyncio.run(again.close())


async def _result_of(ws: Workspace, source: str) -> Any:
    return await (await ws.runtime.exec(source, timeout=60)).result()


def test_a_close_from_a_new_loop_ends_a_run_in_a_sandbox_of_its_own_whose_loop_closed(tmp_path: Path) -> None:
    """``asyncio.run(ws.close())``: the command ends, what it wrote is kept, its record says killed."""
    db = str(tmp_path / "w.db")
    ws = Workspace(db, backends=[ShellBackend(live=False)])
    try:
        run_id, _ = _stranded(ws, SOURCES["shell"])
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    assert host_pids_with(MARK) == []
    del ws
    gc.collect()
    _reopened_says_killed_and_kept(db, ShellBackend(live=False), run_id)


def test_a_stopped_loop_that_runs_again_after_the_kill_leaves_the_workspace_as_the_kill_did(
    tmp_path: Path,
) -> None:
    """The run's loop was only stopped (a ``run_until_complete`` per call): killed from another loop,
    then that loop runs again and its bracket of the run goes on over the mirror the kill pulled and
    dropped. It pulls and releases nothing there (``Mirror.taken_by``): the workspace keeps what it held
    before the run, what the kill pulled and what it was given since, and the run's result is the
    kill's in both loops. (Its pull of the dropped mirror took every file the run left alone for removed.)"""
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend(live=False)])
    loop = None
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        asyncio.run(ws.fs.write_file("/workspace/kept", b"before the run\n"))
        run_id, loop = _stranded(ws, SOURCES["shell"], close=False)
        handle = loop.run_until_complete(ws.runtime.get_exec(run_id))
        task = ws.runtime._running[run_id].task
        assert task is not None
        result, _, _, a = asyncio.run(asyncio.wait_for(_kill_then_look(ws, run_id), 60))
        assert (_outcome(result), a) == (KILLED, b"1\n2\n3\n")
        asyncio.run(ws.fs.write_file("/workspace/b", b"written after the kill\n"))
        loop.run_until_complete(asyncio.wait([task], timeout=60))  # that loop goes on: the run's end
        assert task.done() and not task.cancelled() and task.exception() is None
        assert _outcome(loop.run_until_complete(handle.result())) == KILLED
        assert asyncio.run(ws.fs.read_file("/workspace/a")) == b"1\n2\n3\n"
        later = asyncio.run(asyncio.wait_for(_result_of(ws, "cat kept a b"), 60))
        expected = "before the run\n1\n2\n3\nwritten after the kill\n"
        assert (later.status, later.stdout) == ("completed", expected), later
        assert host_pids_with(MARK) == []
    finally:
        if loop is not None:
            loop.close()
        asyncio.run(asyncio.wait_for(ws.close(), 60))


class _Unreachable:
    """A backend whose runs wait for good and which offers no ``end_stranded_run`` (a pool's, one of
    the user's): a run of an ended loop is out of its reach."""

    info = BackendInfo("waits", "command", False)

    def __init__(self) -> None:
        self.started = asyncio.Event()  # set once a run is under way (bound to the loop that waits)

    async def run(self, request: ExecRequest, ctx: Any) -> AsyncIterator[ExecEvent]:
        self.started.set()
        await asyncio.Event().wait()
        yield ExitEvent(0)


def test_a_kill_from_a_new_loop_of_a_run_its_backend_cannot_reach_says_so_at_once(tmp_path: Path) -> None:
    """A backend that cannot end a run of a loop that no longer runs: the kill from a new loop says
    the run was not killed and what to do, at once (no wait). (Its loop is only stopped here: run
    again, it closes the workspace, which ends the run as its own loop's close does.)"""
    backend = _Unreachable()
    ws = Workspace(str(tmp_path / "w.db"), backends=[backend])
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(ws.fs.mkdir("/workspace", recursive=True))
        run_id = loop.run_until_complete(ws.runtime.exec("wait")).id
        loop.run_until_complete(asyncio.wait_for(backend.started.wait(), 10))
        said = ""
        try:
            asyncio.run(asyncio.wait_for(ws.runtime.kill_exec(run_id), 10))
        except RuntimeError as exc:
            said = str(exc)
        assert "was not killed and runs on until it ends by itself" in said, said
        assert ws.runtime.active() == 1
    finally:
        loop.run_until_complete(asyncio.wait_for(ws.close(), 60))
        loop.close()
    assert ws.runtime.active() == 0


def test_a_stranded_run_killed_after_a_workspace_write_of_its_file_keeps_the_workspaces_version(
    tmp_path: Path,
) -> None:
    """A workspace write of the file the stranded run wrote, from a new loop while the run still runs:
    the kill's pull keeps the workspace's version (changed on both sides) and lists the path in
    ``skipped`` with its reason; what only the run wrote lands. The next run and a reopen agree."""
    db = str(tmp_path / "w.db")
    source = f"echo printed; seq 3 > a; echo only > b; {MARK}"
    ws = Workspace(db, backends=[ShellBackend(live=False)])
    try:
        run_id, _ = _stranded(ws, source)

        async def write_then_kill(ws: Workspace) -> Any:
            await ws.fs.write_file("/workspace/a", b"the workspace's\n")
            await ws.runtime.kill_exec(run_id)
            return await (await ws.runtime.get_exec(run_id)).result()

        result = asyncio.run(asyncio.wait_for(write_then_kill(ws), 60))
        assert _outcome(result) == KILLED
        assert "/workspace/a" in result.skipped and result.skipped_reasons["/workspace/a"], result
        assert "/workspace/b" in result.pulled, result
        assert asyncio.run(ws.fs.read_file("/workspace/a")) == b"the workspace's\n"
        later = asyncio.run(asyncio.wait_for(_result_of(ws, "cat a b"), 60))
        assert later.stdout == "the workspace's\nonly\n", later
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    assert host_pids_with(MARK) == []
    del ws
    gc.collect()
    again = Workspace(db, backends=[ShellBackend(live=False)])
    try:
        assert asyncio.run(again.fs.read_file("/workspace/a")) == b"the workspace's\n"
        assert asyncio.run(again.fs.read_file("/workspace/b")) == b"only\n"
    finally:
        asyncio.run(again.close())
