"""A run's owner killed (SIGKILL) in the middle of the run's pull: what its journal record says after
a reopen (decided in ``computer/runtime/_journal.py``). The owner is a child process holding an
embedded workspace; the kill comes once the pull's first page has committed (the child says so, then
waits), never at a guessed moment."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import computer
from computer.runtime import ShellBackend

_DEADLINE = 60.0

# The owner: a run writes files; its pull's page is committed, then the owner says "committed" with
# what it applied and waits (never ending the run) until it is killed.
_OWNER = r"""
import asyncio, json, sys
import computer
from computer.runtime import ShellBackend
from computer.runtime import _context

commit = _context.LocalExecContext.sync_pull

async def committed_then_wait(self, pull, base_rev):
    result = await commit(self, pull, base_rev)
    print(json.dumps(sorted(result.applied)), flush=True)
    await asyncio.Event().wait()  # killed here: the page committed, the run never ends

async def main(db, pulls):
    if pulls == "yes":
        _context.LocalExecContext.sync_pull = committed_then_wait
    ws = computer.Workspace(db, backends=[ShellBackend(live=False)])
    await ws.fs.mkdir("/workspace")
    await ws.fs.write_file("/workspace/before", b"before")
    command = "echo a > a; echo b > b; echo c > c" if pulls == "yes" else "echo waiting; sleep 60"
    run = await ws.runtime.exec(command, id="cut-run")
    if pulls != "yes":
        async for snapshot in run:
            if "waiting" in snapshot.stdout:
                print("[]", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _owner_killed(db: Path, pulls: str) -> list[str]:
    """Run the owner until it says what it committed; SIGKILL it; what it committed."""
    child = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(db), pulls],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stop = threading.Timer(_DEADLINE, os.killpg, (child.pid, signal.SIGKILL))  # a child that hangs
    stop.start()
    try:
        line = child.stdout.readline() if child.stdout else ""
    finally:
        stop.cancel()
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=_DEADLINE)
    assert line, "the owner ended without saying what it committed"
    applied: list[str] = json.loads(line)
    return applied


async def test_an_owner_killed_after_a_page_of_its_pull_committed_says_so_in_the_runs_record(
    tmp_path: Path,
) -> None:
    """Killed after its pull's page committed: the reopened workspace has the files whole, and the
    run's record is failed, its error saying part of it may have been pulled and naming the paths
    changed since it started. Before, it said ``owner restarted`` and ``pulled=[]`` as if nothing had
    landed."""
    db = tmp_path / "ws.sqlite"
    applied = await asyncio.wait_for(asyncio.to_thread(_owner_killed, db, "yes"), _DEADLINE)
    assert applied == ["/workspace/a", "/workspace/b", "/workspace/c"], applied
    ws = computer.Workspace(str(db), backends=[ShellBackend(live=False)])
    try:
        for path in applied:
            assert await ws.fs.read_text(path) == path[-1] + "\n"
        result = await (await ws.runtime.get_exec("cut-run")).result()
        assert result.status == "failed" and result.pulled == [], result
        assert result.error is not None and result.error.startswith("owner restarted: "), result.error
        assert "may have been pulled" in result.error, result.error
        assert "3 path(s) changed since it started" in result.error, result.error
        assert "/workspace/a, /workspace/b, /workspace/c" in result.error, result.error
    finally:
        await ws.close()


async def test_an_owner_killed_before_its_run_pulled_anything_says_owner_restarted_alone(
    tmp_path: Path,
) -> None:
    """Killed while the run still ran, nothing of it pulled, nothing else written since it started:
    ``owner restarted`` alone, ``pulled=[]`` the truth."""
    db = tmp_path / "ws.sqlite"
    assert await asyncio.wait_for(asyncio.to_thread(_owner_killed, db, "no"), _DEADLINE) == []
    ws = computer.Workspace(str(db), backends=[ShellBackend(live=False)])
    try:
        result = await (await ws.runtime.get_exec("cut-run")).result()
        assert (result.status, result.error, result.pulled) == ("failed", "owner restarted", []), result
        assert await ws.fs.read_text("/workspace/before") == "before"
    finally:
        await ws.close()
