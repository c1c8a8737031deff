"""The router: backend selection, ids, snapshots, get/kill/dispose, the journal across restarts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import computer
from computer.runtime import (
    BackendInfo,
    ExecContext,
    ExecEvent,
    ExecRequest,
    ExitEvent,
    OutputChunk,
    PythonBackend,
    ShellBackend,
)


class ScriptedBackend:
    """A backend that plays events paced by a queue the test controls."""

    def __init__(self, id: str = "scripted", callable: bool = False) -> None:
        self.info = BackendInfo(id=id, protocol="command", callable=callable, description="test")
        self.steps: asyncio.Queue[ExecEvent | None] = asyncio.Queue()
        self.closed = asyncio.Event()

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        try:
            while (event := await self.steps.get()) is not None:
                yield event
        finally:
            self.closed.set()


async def test_backends_lists_each_configured_backend_in_order(ws: computer.Workspace) -> None:
    infos = ws.runtime.backends()
    assert [(i.id, i.protocol, i.callable) for i in infos] == [
        ("shell", "command", False),
        ("python", "module", True),
    ]
    assert infos[0].language == "bash" and "bubblewrap" in infos[0].isolation
    assert infos[1].language == "python" and "workspace" in infos[1].modules
    assert all(i.startup_ms is not None and i.startup_ms > 0 for i in infos)


async def test_exec_without_backends_is_a_clear_error() -> None:
    async with computer.Workspace() as ws:
        assert ws.runtime.backends() == []
        with pytest.raises(ValueError, match="no exec backends") as raised:
            await ws.runtime.exec("true")
    # It says how to get one (a first user's Workspace() has none): the keyword and where the class is.
    assert "backends=[ShellBackend()" in str(raised.value) and "computer.runtime" in str(raised.value)


async def test_default_backend_is_the_first_configured(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("echo $0")
    assert handle.backend == "shell"
    assert (await handle.result()).stdout == "/bin/bash\n"


async def test_unknown_backend_error_lists_configured_ids(ws: computer.Workspace) -> None:
    with pytest.raises(ValueError, match=r"unknown backend 'ruby'.*shell, python"):
        await ws.runtime.exec("puts 1", backend="ruby")


async def test_input_on_a_command_backend_is_rejected(ws: computer.Workspace) -> None:
    with pytest.raises(ValueError, match="not callable"):
        await ws.runtime.exec("true", backend="shell", input={"x": 1})


async def test_caller_id_already_running_is_rejected() -> None:
    backend = ScriptedBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        handle = await ws.runtime.exec("x", id="job-1")
        with pytest.raises(ValueError, match="already running"):
            await ws.runtime.exec("y", id="job-1")
        await backend.steps.put(ExitEvent(0))
        await backend.steps.put(None)
        assert (await handle.result()).status == "completed"
        # Once finished, the id can be used again.
        again = await ws.runtime.exec("z", id="job-1")
        await backend.steps.put(ExitEvent(0))
        await backend.steps.put(None)
        assert (await again.result()).id == "job-1"


async def test_active_counts_running_executions_only() -> None:
    backend = ScriptedBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        assert ws.runtime.active() == 0
        handle = await ws.runtime.exec("x")
        assert ws.runtime.active() == 1
        await backend.steps.put(ExitEvent(0))
        await backend.steps.put(None)
        await handle.result()
        assert ws.runtime.active() == 0


async def test_generated_ids_are_unique(ws: computer.Workspace) -> None:
    handles = [await ws.runtime.exec("true") for _ in range(5)]
    assert len({h.id for h in handles}) == 5
    for h in handles:
        await h.result()


async def test_snapshots_are_coalesced_and_end_with_the_final_one() -> None:
    backend = ScriptedBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        handle = await ws.runtime.exec("chatty")
        for i in range(2000):
            await backend.steps.put(OutputChunk("stdout", b"%d\n" % i))
        seen = []

        async def collect() -> None:
            async for snapshot in handle:
                seen.append(snapshot)

        collector = asyncio.create_task(collect())
        await backend.steps.put(ExitEvent(0))
        await backend.steps.put(None)
        await asyncio.wait_for(collector, 10)
        assert seen[-1].done and seen[-1].status == "completed"
        assert seen[-1].stdout.endswith("1999\n")
        assert all(not s.done and s.status == "running" for s in seen[:-1])
        assert len(seen) < 50  # 2000 chunks never become 2000 snapshots
        assert [s.seq for s in seen] == sorted({s.seq for s in seen})


async def test_a_late_iterator_gets_the_latest_snapshot_then_the_rest() -> None:
    backend = ScriptedBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        handle = await ws.runtime.exec("slow")
        await backend.steps.put(OutputChunk("stdout", b"first\n"))
        early = aiter(handle)
        while "first" not in (await anext(early)).stdout:
            pass
        late = [s async for s in _take(handle, 1)]
        assert late[0].stdout == "first\n" and not late[0].done
        await backend.steps.put(ExitEvent(0))
        await backend.steps.put(None)
        rest = [s async for s in handle]
        assert rest[-1].done


async def _take(handle: computer.runtime.ExecHandle, n: int) -> AsyncIterator[computer.ExecSnapshot]:
    count = 0
    async for snapshot in handle:
        yield snapshot
        count += 1
        if count == n:
            return


async def test_snapshot_of_a_chatty_command_is_bounded(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("seq 1 200000")
    async for snapshot in handle:
        assert len(snapshot.stdout.encode()) <= 64 * 1024
    assert (await handle.result()).stdout.endswith("200000\n")


async def test_exit_statuses_map_to_completed_failed_and_cancelled(ws: computer.Workspace) -> None:
    ok = await (await ws.runtime.exec("echo fine")).result()
    assert (ok.status, ok.exit_code) == ("completed", 0)
    bad = await (await ws.runtime.exec("echo out; echo err >&2; exit 9")).result()
    assert (bad.status, bad.exit_code, bad.stdout, bad.stderr) == ("failed", 9, "out\n", "err\n")
    sigterm = await (await ws.runtime.exec("kill -TERM $$")).result()
    assert (sigterm.status, sigterm.exit_code) == ("cancelled", 143)


async def test_a_timeout_that_is_not_a_number_is_a_type_error_naming_its_type(ws: computer.Workspace) -> None:
    """``timeout="5"`` raised "'<' not supported between instances of 'int' and 'str'"."""
    for timeout, kind in (("5", "str"), (True, "bool"), ([5], "list")):
        with pytest.raises(TypeError, match=f"timeout must be a number of seconds, not {kind}"):
            await ws.runtime.exec("true", timeout=timeout)  # type: ignore[arg-type]


async def test_timeout_cancels_with_exit_124(ws: computer.Workspace) -> None:
    # 3 s (was 0.5): the echo must run before the timeout, and a loaded machine can take longer to
    # start the sandbox (the timeout is the test's own timer: it cannot wait for an event).
    result = await (await ws.runtime.exec("echo started; sleep 30", timeout=3)).result()
    assert (result.status, result.exit_code, result.stdout) == ("cancelled", 124, "started\n")


async def test_kill_cancels_a_running_execution(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("echo ready; sleep 30")
    async for snapshot in handle:
        if "ready" in snapshot.stdout:
            break
    await handle.kill()
    result = await handle.result()
    assert (result.status, result.exit_code) == ("cancelled", 137)
    assert result.stdout == "ready\n"


async def test_kill_exec_by_id_and_unknown_ids(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("sleep 30")
    await ws.runtime.kill_exec(handle.id)
    assert (await handle.result()).status == "cancelled"
    await ws.runtime.kill_exec(handle.id)  # finished: nothing to do
    with pytest.raises(LookupError, match="nope"):
        await ws.runtime.kill_exec("nope")
    with pytest.raises(LookupError, match="nope"):
        await ws.runtime.get_exec("nope")


async def test_get_exec_reattaches_to_a_running_execution(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("echo one; read line; echo $line", stdin="two\n")
    again = await ws.runtime.get_exec(handle.id)
    assert (again.id, again.backend) == (handle.id, "shell")
    assert (await again.result()).stdout == "one\ntwo\n"


async def test_get_exec_after_finish_returns_the_retained_result(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("echo kept")
    first = await handle.result()
    again = await ws.runtime.get_exec(handle.id)
    assert await again.result() == first
    snapshots = [s async for s in again]
    assert len(snapshots) == 1 and snapshots[0].done and snapshots[0].stdout == "kept\n"


async def test_dispose_exec_forgets_the_record(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("echo bye")
    await handle.result()
    await ws.runtime.dispose_exec(handle.id)
    with pytest.raises(LookupError):
        await ws.runtime.get_exec(handle.id)
    with pytest.raises(LookupError):
        await ws.runtime.dispose_exec(handle.id)


async def test_dispose_of_a_running_execution_is_refused(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("sleep 30")
    with pytest.raises(ValueError, match="still running"):
        await ws.runtime.dispose_exec(handle.id)
    await handle.kill()


async def test_journal_survives_a_restart_and_reconciles_running_records(
    tmp_path: Path, shell_backend: ShellBackend, python_backend: PythonBackend
) -> None:
    db = str(tmp_path / "ws.sqlite")
    first = computer.Workspace(db, backends=[shell_backend, python_backend])
    await first.fs.mkdir("/workspace")
    done = await first.runtime.exec("echo persisted", id="finished-run")
    await done.result()
    running = await first.runtime.exec("sleep 30", id="left-running")
    # The owner dies without settling its runs: only the SQLite file survives.
    assert json.loads(await first.fs.read_file("/.computer/exec/left-running.json"))["status"] == "running"
    first.fs.close()
    assert running.id == "left-running"

    second = computer.Workspace(db, backends=[shell_backend, python_backend])
    try:
        kept = await (await second.runtime.get_exec("finished-run")).result()
        assert (kept.status, kept.stdout, kept.backend) == ("completed", "persisted\n", "shell")
        stale = await (await second.runtime.get_exec("left-running")).result()
        assert (stale.status, stale.error) == ("failed", "owner restarted")
    finally:
        await second.close()
        await first.runtime.close()  # ends the orphaned process; its record can no longer be written


async def test_a_program_cannot_rewrite_the_journal_and_a_damaged_record_is_refused(
    tmp_path: Path, shell_backend: ShellBackend, python_backend: PythonBackend
) -> None:
    """A python program's ``workspace`` calls reach every path: one rewrote an earlier run's record
    (``failed 1`` came back ``completed 0`` with output of its choosing after a reopen). The journal
    is read-only to them, through a link or an ancestor too; a record of the wrong shape (written by
    hand) is refused as damaged instead of returned as it is or raised as a TypeError."""
    db = str(tmp_path / "ws.sqlite")
    async with computer.Workspace(db, backends=[shell_backend, python_backend]) as ws:
        await ws.fs.mkdir("/workspace")
        victim = await (await ws.runtime.exec("echo REAL; exit 1", id="victim")).result()
        assert (victim.status, victim.exit_code) == ("failed", 1)
        await ws.fs.symlink("/.computer/exec", "/workspace/j")
        forger = """
import json
import workspace
def main(_input):
    out = []
    for call in (
        lambda: workspace.write_file("/.computer/exec/victim.json", json.dumps({"status": "completed"})),
        lambda: workspace.write_file("/workspace/j/victim.json", "{}"),
        lambda: workspace.rm("/.computer", recursive=True),
        lambda: workspace.rename("/.computer/exec", "/workspace/moved"),
        lambda: workspace.copy("/workspace/x", "/.computer/exec/new.json"),
    ):
        try:
            call()
            out.append("done")
        except PermissionError as exc:
            out.append("refused" if "journal" in str(exc) else str(exc))
    return out
"""
        await ws.fs.write_file("/workspace/x", "{}")
        result = await (await ws.runtime.exec(forger, backend="python")).result()
        assert result.value == ["refused"] * 5, result.stderr
        await ws.fs.write_file("/.computer/exec/odd.json", json.dumps({"status": "completed", "skipped": 7}))
    async with computer.Workspace(db, backends=[shell_backend, python_backend]) as ws:
        kept = await (await ws.runtime.get_exec("victim")).result()
        assert (kept.status, kept.exit_code, kept.stdout) == ("failed", 1, "REAL\n")
        with pytest.raises(LookupError, match="damaged"):
            await ws.runtime.get_exec("odd")


async def test_a_long_runs_record_outlives_the_pruning_of_shorter_ones_and_a_restart(
    tmp_path: Path, shell_backend: ShellBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pruning kept the newest records and took a run still going with the rest: after 200 shorter
    runs and a restart, its id was unknown instead of "failed: owner restarted"."""
    from computer.runtime import _journal

    monkeypatch.setattr(_journal, "MAX_RECORDS", 5)
    monkeypatch.setattr(_journal, "_PRUNE_EVERY", 2)  # every other run
    db = str(tmp_path / "ws.sqlite")
    first = computer.Workspace(db, backends=[shell_backend])
    await first.fs.mkdir("/workspace")
    await first.runtime.exec("sleep 30", id="long-run")
    for _ in range(12):
        await (await first.runtime.exec("true")).result()
    names = [e.name for e in await first.fs.readdir("/.computer/exec")]
    assert "long-run.json" in names and len(names) <= 8, names  # 5 kept, the run, the latest
    first.fs.close()  # the owner dies with the run going
    second = computer.Workspace(db, backends=[shell_backend])
    try:
        stale = await (await second.runtime.get_exec("long-run")).result()
        assert (stale.status, stale.error) == ("failed", "owner restarted")
    finally:
        await second.close()
        await first.runtime.close()


async def test_close_kills_running_executions(shell_backend: ShellBackend) -> None:
    ws = computer.Workspace(backends=[shell_backend])
    await ws.fs.mkdir("/workspace")
    handle = await ws.runtime.exec("sleep 30")
    await ws.close()
    assert (await handle.result()).status == "cancelled"


async def test_a_backend_that_raises_fails_the_run_with_its_error() -> None:
    class Broken:
        info = BackendInfo(id="broken", protocol="command", callable=False)

        async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
            yield OutputChunk("stdout", b"partial\n")
            raise RuntimeError("worker died")

    async with computer.Workspace(backends=[Broken()]) as ws:
        result = await (await ws.runtime.exec("x")).result()
        assert (result.status, result.stdout) == ("failed", "partial\n")
        assert result.error is not None and "worker died" in result.error


async def test_the_journal_keeps_only_the_newest_records() -> None:
    class Instant:
        info = BackendInfo(id="instant", protocol="command", callable=False)

        async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
            yield ExitEvent(0)

    async with computer.Workspace(backends=[Instant()]) as ws:
        ids = [(await (await ws.runtime.exec("x")).result()).id for _ in range(260)]
        records = await ws.fs.ls("/.computer/exec")
        assert 200 <= len(records) < 260
        assert f"/.computer/exec/{ids[-1]}.json" in records
        assert f"/.computer/exec/{ids[0]}.json" not in records
