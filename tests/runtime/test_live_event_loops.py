"""A workspace used from one ``asyncio.run`` per call, as a synchronous script does (``asyncio.run(
execute(call))`` for each tool call of an OpenAI-format loop).

A live sandbox belongs to the event loop that started it (its readers, tasks and the init's transport).
Before, every run after the first loop ended failed "RuntimeError: Event loop is closed", for the shell
and the python backend alike, for as long as the process lived. Now the sandbox of an ended loop is
ended from the new one (its processes killed, what they wrote pulled) and the run goes on in a fresh
sandbox, saying so on its stderr when a process of the user's was ended with it; a loop still running
in another thread keeps its sandbox, and a run from another loop is told why it cannot use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from computer import Workspace
from computer.runtime import PythonBackend, ShellBackend, _cgroups
from computer.runtime._context import LocalExecContext
from computer.runtime._live_shell import start_shell

from ._live_support import host_pids_with, kill_all, runs_itself

# A background process, found on the host by its command line: this test process's own (a run of
# these tests in another worktree at once saw, and its teardown killed, this one's).
MARK = f"sleep 31337.{os.getpid():07d}"


def seen(predicate: Any) -> bool:
    """Whether ``predicate()`` holds within 10 s (a background process is forked as its run ends, and
    may exec its program a moment after)."""
    deadline = time.monotonic() + 10
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def run(ws: Workspace, source: str, backend: str | None = None) -> Any:
    handle = await ws.runtime.exec(source, backend=backend, timeout=60)
    return await handle.result()


def test_one_event_loop_per_call_runs_every_call_in_a_fresh_sandbox(tmp_path: Path) -> None:
    shell = ShellBackend()
    ws = Workspace(str(tmp_path / "w.db"), backends=[shell, PythonBackend()])
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        # A background writer goes on after the loop ended; nobody syncs meanwhile.
        writer = "(until [ -e go ]; do sleep 0.01; done; echo late > late) &"
        first = asyncio.run(run(ws, f"{MARK} & {writer} echo one > a"))
        assert first.status == "completed", first
        assert seen(lambda: host_pids_with(MARK))  # it runs on while its loop is gone
        mirror = shell._lives._live[ws.fs.instance].mirror.directory
        (mirror / "go").touch()  # the writer writes now, into the mirror of no running loop
        assert seen(lambda: (mirror / "late").exists())
        asyncio.run(ws.fs.write_file("/workspace/from-ws", b"w"))  # a workspace write meanwhile
        for n in range(3):
            later = asyncio.run(run(ws, f"cat a late from-ws; echo {n} > b{n}"))
            assert (later.status, later.stdout, later.error) == ("completed", "one\nlate\nw", None), later
            if n == 0:  # the background process was ended with that sandbox: said
                assert "the event loop it was started in has ended" in later.stderr
                assert host_pids_with(MARK) == []  # ended with its sandbox, not left behind
            else:  # nothing of the user's ran in the ended loop's sandbox: nothing to say
                assert later.stderr == ""
        for _ in range(2):
            py = asyncio.run(run(ws, "print(open('b2').read().strip())", backend="python"))
            assert (py.status, py.stdout, py.error) == ("completed", "2\n", None), py
        names = ["a", "b0", "b1", "b2", "from-ws", "go", "late"]
        listing = asyncio.run(ws.fs.readdir("/workspace"))
        assert sorted(e.name for e in listing) == names
    finally:
        asyncio.run(ws.close())
    assert host_pids_with(MARK) == []
    again = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])  # after a reopen
    try:
        reread = asyncio.run(run(again, "cat late b2; ls"))
        assert (reread.status, reread.stdout) == ("completed", "late\n2\n" + "".join(f"{n}\n" for n in names))
    finally:
        asyncio.run(again.close())


def test_a_loop_running_in_another_thread_keeps_its_sandbox(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def there(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    try:
        there(ws.fs.mkdir("/workspace", recursive=True))
        assert there(run(ws, f"{MARK} &")).status == "completed"
        assert seen(lambda: host_pids_with(MARK))
        refused = asyncio.run(run(ws, "echo here"))
        assert refused.status == "failed"
        assert "event loop running in another thread" in (refused.error or ""), refused
        assert host_pids_with(MARK)  # the other loop's sandbox and its process were left alone
        again = there(run(ws, "echo there"))
        assert (again.status, again.stdout, again.stderr) == ("completed", "there\n", "")
    finally:
        with contextlib.suppress(Exception):
            there(ws.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert seen(lambda: not host_pids_with(MARK))


@pytest.fixture(autouse=True)
def _no_leftovers() -> Any:
    yield
    kill_all(MARK)
    # A closed loop's tasks and coroutines go now, after a failed test too: collected later, during
    # pytest's own ``ast.parse`` of an assertion, they crashed the whole session (INTERNALERROR,
    # "AST constructor recursion depth mismatch", Python 3.11).
    gc.collect()


def test_a_close_from_a_new_loop_ends_a_sandbox_whose_stopped_loop_held_its_lock(tmp_path: Path) -> None:
    """A script's loop stops while a task of it holds the live sandbox's lock (a sync tick in flight);
    ``asyncio.run(ws.close())`` then ends the sandbox from a new loop: its processes killed, what they
    wrote pulled. Before, the end waited for that lock for good (a pydantic-ai conformance teardown
    hung one run in three, s55)."""
    shell = ShellBackend()
    ws = Workspace(str(tmp_path / "w.db"), backends=[shell])

    async def first() -> None:
        await ws.fs.mkdir("/workspace", recursive=True)
        result = await run(ws, f"{MARK} & echo one > a")
        assert result.status == "completed", result
        await shell._lives._live[ws.fs.instance].lock.acquire()  # held as the loop stops

    asyncio.run(first())
    mirror = shell._lives._live[ws.fs.instance].mirror.directory
    (mirror / "late").write_text("written after the loop stopped\n")  # pulled by the end
    asyncio.run(asyncio.wait_for(ws.close(), 60))
    assert host_pids_with(MARK) == []
    again = Workspace(str(tmp_path / "w.db"))
    try:
        assert asyncio.run(again.fs.read_file("/workspace/late")) == b"written after the loop stopped\n"
        assert asyncio.run(again.fs.read_file("/workspace/a")) == b"one\n"
    finally:
        asyncio.run(again.close())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
def test_a_close_after_a_loop_closed_under_a_run_ends_the_runs_processes(tmp_path: Path) -> None:
    """A loop closed while a run was in progress (its task never finished: ``loop.close()`` after a
    ``run_until_complete`` of something else) leaves the run's job waiting with a callback of that
    loop; ``asyncio.run(ws.close())`` then ends the sandbox from a new loop: the run's processes
    killed, what they wrote pulled. Before, the end failed the job there ("Event loop is closed") and
    stopped before its kill: the command ran on and its file never reached the workspace."""
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(ws.fs.mkdir("/workspace", recursive=True))
        task = loop.create_task(run(ws, f"echo one > a; {MARK}"))
        deadline = time.monotonic() + 30
        while not runs_itself(
            MARK
        ):  # (the run's shell past its write: it was killed before it, now and then)
            assert time.monotonic() < deadline and not task.done(), task
            loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        loop.close()  # the run's task still pending
    asyncio.run(asyncio.wait_for(ws.close(), 60))
    del ws, task
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test
    assert host_pids_with(MARK) == []
    again = Workspace(str(tmp_path / "w.db"))
    try:
        assert asyncio.run(again.fs.read_file("/workspace/a")) == b"one\n"
    finally:
        asyncio.run(again.close())


def _paused_with_a_shell_sent(shell: ShellBackend, ws: Workspace) -> Any:
    """The workspace's sandbox frozen (its init too, so it starts nothing) with its lock held (no tick
    thaws it), after a shell started ahead was sent to its init: a job that waits, with no process
    yet. Returns that shell."""
    sandbox = shell._lives._live[ws.fs.instance]

    async def pause() -> Any:
        if sandbox.spare is not None and sandbox.spare.loop is asyncio.get_running_loop():
            with contextlib.suppress(BaseException):  # the run's own shell started ahead: reported
                await (await sandbox.spare.task).job.started
        await sandbox.lock.acquire()
        assert sandbox._freezer is not None and _cgroups.freeze(sandbox._freezer)
        files = (str(sandbox.bridge_dir), "/.computer-bridge")
        host = str(sandbox.mirror.host("/workspace"))
        return await start_shell(sandbox, "ahead-sent", "/workspace", host, {"PATH": "/bin"}, files)

    return pause


@pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")
async def test_a_shell_sent_to_the_init_but_not_started_hides_no_process_of_the_users(tmp_path: Path) -> None:
    """``busy`` took every job started ahead that waits off the kernel's count, one the init had not
    started yet too: with one background process of the user's it said no process ran."""
    shell = ShellBackend()
    async with Workspace(str(tmp_path / "w.db"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await run(ws, f"{MARK} > /dev/null 2>&1 &")).status == "completed"
        assert seen(lambda: host_pids_with(MARK))
        sandbox = shell._lives._live[ws.fs.instance]
        sent = await _paused_with_a_shell_sent(shell, ws)()
        try:
            assert not sent.job.started.done()  # (frozen: the init took nothing)
            assert await sandbox.busy()
            for pid in host_pids_with(MARK):
                os.kill(pid, 9)
            _cgroups.thaw(sandbox._freezer)  # the shell starts now: it hides itself alone
            await asyncio.wait_for(asyncio.shield(sent.job.started), 10)
            assert seen(lambda: not host_pids_with(MARK))
            assert not await sandbox.busy()
        finally:
            _cgroups.thaw(sandbox._freezer)
            sandbox.lock.release()
            sent.discard_now()


@pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")
def test_a_run_after_the_loop_ended_says_so_though_a_shell_was_not_started_yet(tmp_path: Path) -> None:
    """The loop that started the sandbox ended with a shell sent to the init but not started (the
    sandbox frozen meanwhile) and one background process of the user's: the next run, from a new
    loop, ends that sandbox and says so. Before, ``busy`` took the shell off the kernel's count: the
    sandbox was taken for quiet and the note dropped, the process ended unsaid."""
    shell = ShellBackend()
    ws = Workspace(str(tmp_path / "w.db"), backends=[shell])
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        assert asyncio.run(run(ws, f"{MARK} > /dev/null 2>&1 &")).status == "completed"
        assert seen(lambda: host_pids_with(MARK))
        asyncio.run(_paused_with_a_shell_sent(shell, ws)())  # the loop ends: frozen, lock held
        later = asyncio.run(run(ws, "echo later"))
        assert (later.status, later.stdout) == ("completed", "later\n"), later
        assert "the event loop it was started in has ended" in later.stderr, later.stderr
        assert host_pids_with(MARK) == []
    finally:
        asyncio.run(ws.close())


def _running_as_its_loop_closes(
    ws: Workspace, source: str, printed: str = "", before: Callable[[], Awaitable[Any]] | None = None
) -> str:
    """Start ``source`` (it runs ``MARK`` last) in an event loop closed once ``MARK`` runs (and the
    run's snapshot shows ``printed``), the run's task still pending (``loop.close()`` after a
    ``run_until_complete`` of something else); its id. ``before``: run first in that loop."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(ws.fs.mkdir("/workspace", recursive=True))
        if before is not None:
            loop.run_until_complete(before())
        handle = loop.run_until_complete(ws.runtime.exec(source, timeout=60))
        deadline = time.monotonic() + 30
        # the run's shell went past its writes, and its output was read
        while not runs_itself(MARK) or printed not in ws.runtime._running[handle.id].snapshot.stdout:
            assert time.monotonic() < deadline
            loop.run_until_complete(asyncio.sleep(0.05))
        loop.run_until_complete(asyncio.sleep(0.05))  # (its start reported by the init, and read)
    finally:
        loop.close()
    return handle.id


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # (and a step of one)
@pytest.mark.parametrize("background", [False, True])
def test_a_kill_from_a_new_loop_ends_a_run_whose_loop_closed_and_keeps_what_it_wrote(
    tmp_path: Path, background: bool
) -> None:
    """``kill_exec`` from a new event loop, of a run whose own loop was closed under it: the command
    ends, what it wrote is in the workspace at once (and after a reopen), a second kill finds nothing
    to do, and the next run says its sandbox ended only when a process of the user's besides the
    killed run's was ended with it. Before, the kill raised "Event loop is closed" and the command
    ran on."""
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])
    other = f"sleep 31338.{os.getpid():07d}"
    try:
        started = f"setsid {other} > /dev/null 2>&1 & " if background else ""
        run_id = _running_as_its_loop_closes(ws, f"{started}seq 3 > a; echo one >> a; {MARK}")

        async def kill(ws: Workspace) -> bytes:
            await ws.runtime.kill_exec(run_id)
            return await ws.fs.read_file("/workspace/a")  # at once, the workspace still open

        assert asyncio.run(asyncio.wait_for(kill(ws), 60)) == b"1\n2\n3\none\n"
        assert host_pids_with(MARK) == [] and host_pids_with(other) == []
        asyncio.run(asyncio.wait_for(ws.runtime.kill_exec(run_id), 60))  # ended already: nothing to do
        later = asyncio.run(run(ws, "cat a"))
        assert (later.status, later.stdout) == ("completed", "1\n2\n3\none\n"), later
        said = "the event loop it was started in has ended" in later.stderr
        assert said == background, later.stderr
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
        for pid in host_pids_with(other):
            os.kill(pid, 9)
    del ws
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test
    again = Workspace(str(tmp_path / "w.db"))
    try:
        assert asyncio.run(again.fs.read_file("/workspace/a")) == b"1\n2\n3\none\n"
    finally:
        asyncio.run(again.close())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # (and a step of one)
def test_a_kill_from_a_new_loop_pulls_what_a_sync_of_the_closed_loop_took_and_never_pulled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's loop closed while a tick's sync waited on the workspace, after its plan took the
    watch's events (the run's last write): the kill from a new loop ends the sandbox, and its final
    pull walks the tree instead of trusting the watch. Before, the watch was quiet: the write was
    never pulled (the workspace still open read the file as it was before it, s56's lead)."""
    shell = ShellBackend()
    ws = Workspace(str(tmp_path / "w.db"), backends=[shell])
    loop = asyncio.new_event_loop()
    held = asyncio.Event()
    sync_pull = LocalExecContext.sync_pull

    async def stuck(self: Any, pull: Any, *args: Any) -> Any:  # the closed loop's pull of the write waits
        # Only the pull that carries the run's last write: one of ``go`` alone went first when a loaded
        # host's tick planned before the run saw ``go``, and then the kill ended the run before its
        # write (the file read without "one": 2 of 12 runs under load, both with that pull held).
        if asyncio.get_running_loop() is loop and any(b"one" in (f.data or b"") for f in pull.files):
            held.set()
            await asyncio.Event().wait()
        return await sync_pull(self, pull, *args)

    try:
        loop.run_until_complete(ws.fs.mkdir("/workspace", recursive=True))
        source = f"seq 3 > a; until [ -e go ]; do sleep 0.01; done; echo one >> a; {MARK}"
        handle = loop.run_until_complete(ws.runtime.exec(source, timeout=60))

        async def pulled(ws: Workspace, content: bytes) -> bool:
            with contextlib.suppress(FileNotFoundError):
                return await ws.fs.read_file("/workspace/a") == content
            return False

        deadline = time.monotonic() + 30
        while not loop.run_until_complete(pulled(ws, b"1\n2\n3\n")):  # a tick pulled it
            assert time.monotonic() < deadline
            loop.run_until_complete(asyncio.sleep(0.05))
        monkeypatch.setattr(LocalExecContext, "sync_pull", stuck)
        (shell._lives._live[ws.fs.instance].mirror.directory / "go").touch()  # the run writes on
        loop.run_until_complete(asyncio.wait_for(held.wait(), 30))  # a tick's plan took that
        assert host_pids_with(MARK)
    finally:
        loop.close()
    asyncio.run(asyncio.wait_for(ws.runtime.kill_exec(handle.id), 60))
    try:
        assert host_pids_with(MARK) == []
        assert asyncio.run(ws.fs.read_file("/workspace/a")) == b"1\n2\n3\none\n"
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    del ws, handle
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # (and a step of one)
def test_a_run_killed_from_a_new_loop_after_its_loop_closed_has_a_killed_result(tmp_path: Path) -> None:
    """The run a kill from a new loop ended (its own loop closed under it) gets the result a kill
    gives: cancelled, 137, "killed", the output it printed, what it wrote listed as pulled; in the
    journal and from ``get_exec`` at once, and after a close and reopen. Before, it stayed "running"
    (``get_exec``'s ``result()`` raised that its loop had ended) until a reopen called it "failed:
    owner restarted"."""
    db = str(tmp_path / "w.db")
    ws = Workspace(db, backends=[ShellBackend()])
    expected = ("cancelled", 137, "printed\n", "killed")
    try:
        run_id = _running_as_its_loop_closes(ws, f"echo printed; seq 3 > a; {MARK}", printed="printed")

        async def kill_then_look(ws: Workspace) -> tuple[Any, dict[str, Any], int]:
            await ws.runtime.kill_exec(run_id)
            result = await (await ws.runtime.get_exec(run_id)).result()
            record = json.loads(await ws.fs.read_file(f"/.computer/exec/{run_id}.json"))
            return result, record, ws.runtime.active()

        result, record, active = asyncio.run(asyncio.wait_for(kill_then_look(ws), 60))
        assert (result.status, result.exit_code, result.stdout, result.error) == expected, result
        assert "/workspace/a" in result.pulled, result
        assert (record["status"], record["exit_code"], record["stdout"]) == expected[:3], record
        assert active == 0
        asyncio.run(asyncio.wait_for(ws.runtime.kill_exec(run_id), 60))  # ended: nothing to do
        assert host_pids_with(MARK) == []
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    del ws
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test
    again = Workspace(db, backends=[ShellBackend()])
    try:
        reread = asyncio.run(asyncio.wait_for(again.runtime.get_exec(run_id), 60))
        result = asyncio.run(reread.result())
        assert (result.status, result.exit_code, result.stdout, result.error) == expected, result
        assert asyncio.run(again.fs.read_file("/workspace/a")) == b"1\n2\n3\n"
    finally:
        asyncio.run(again.close())


async def _result_of(ws: Workspace, source: str) -> Any:
    return await (await ws.runtime.exec(source, timeout=60)).result()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # (and a step of one)
def test_a_killed_stranded_runs_result_lists_what_the_workspace_keeps_out_of_the_sandbox(
    tmp_path: Path,
) -> None:
    """Every run lists in ``skipped`` the workspace files its sandbox was not given (here one over the
    backend's file size), whatever it changed: a stranded run's kill result too, for a file left out
    before it (by its sandbox's first push, for an earlier run): each sync's push reports what the
    mirror keeps out, and the run's changes gather it (a coverage test: no defect was found here)."""
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend(max_file_bytes=1000)])
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        asyncio.run(ws.fs.write_file("/workspace/big", b"x" * 5000))
        firsts: list[Any] = []

        async def first(ws: Workspace = ws) -> None:  # the sandbox's first run, in the same loop
            firsts.append(await _result_of(ws, "true"))

        source = f"echo printed; seq 3 > a; {MARK}"
        run_id = _running_as_its_loop_closes(ws, source, printed="printed", before=first)
        assert "/workspace/big" in firsts[0].skipped, firsts

        async def kill_then_look(ws: Workspace) -> Any:
            await ws.runtime.kill_exec(run_id)
            return await (await ws.runtime.get_exec(run_id)).result()

        result = asyncio.run(asyncio.wait_for(kill_then_look(ws), 60))
        assert (result.status, "/workspace/a" in result.pulled) == ("cancelled", True), result
        assert "/workspace/big" in result.skipped, result
        assert result.skipped_reasons["/workspace/big"], result.skipped_reasons
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    del ws
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # (and a step of one)
def test_a_run_whose_loop_closed_ended_by_a_close_has_a_killed_result_after_a_reopen(tmp_path: Path) -> None:
    """``asyncio.run(ws.close())`` ends the live sandbox of a run whose loop closed under it: its
    record says killed, with its output, not "failed: owner restarted" (nor "running" meanwhile)."""
    db = str(tmp_path / "w.db")
    ws = Workspace(db, backends=[ShellBackend()])
    try:
        run_id = _running_as_its_loop_closes(ws, f"echo printed; {MARK}", printed="printed")
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    assert host_pids_with(MARK) == []
    del ws
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test
    again = Workspace(db, backends=[ShellBackend()])
    try:
        result = asyncio.run(asyncio.wait_for(again.runtime.get_exec(run_id), 60)).result
        settled = asyncio.run(result())
        assert (settled.status, settled.exit_code, settled.stdout, settled.error) == (
            "cancelled",
            137,
            "printed\n",
            "killed",
        ), settled
    finally:
        asyncio.run(again.close())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the closed loop's tasks
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # (and a step of one)
def test_a_stranded_live_run_killed_after_workspace_writes_keeps_both_sides_by_the_pull_rules(
    tmp_path: Path,
) -> None:
    """A live run writing ``A`` over and over and copying ``B`` to ``seen`` is stranded (its loop closed:
    no sync runs any more); from new loops the workspace writes ``B`` and ``A`` while it still runs,
    then kills it. The pull's rules hold (a coverage test: no defect was found here): ``A``, changed
    on both sides, keeps the workspace's version and is listed as skipped with the reason; ``B``,
    changed by the workspace alone, keeps it; what only the run changed (``count``, ``seen``: the ``B``
    it last saw, from before) is pulled, its last version; the next run's sandbox has the workspace's
    versions; all of it so after a close and reopen. (``seen`` and ``count`` are replaced by a rename:
    a kill between a redirection's truncation and its write left an empty file, the run's own.)"""
    db = str(tmp_path / "w.db")
    looping = f"sleep 0.02{os.getpid():07d}"  # this process's own (found on the host by it)
    source = (
        "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo run $i > A; "
        f"cat B > s.tmp; mv s.tmp seen; echo $i > c.tmp; mv c.tmp count; {looping}; done"
    )
    shell = ShellBackend()
    ws = Workspace(db, backends=[shell])
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(ws.fs.mkdir("/workspace", recursive=True))
        loop.run_until_complete(ws.fs.write_file("/workspace/B", b"b0\n"))
        run_id = loop.run_until_complete(ws.runtime.exec(source, timeout=120)).id

        async def synced(ws: Workspace) -> int:  # the run's count as the workspace has it (0: none yet)
            with contextlib.suppress(FileNotFoundError, ValueError):
                if await ws.fs.read_file("/workspace/seen") == b"b0\n":
                    return int(await ws.fs.read_file("/workspace/count"))
            return 0

        deadline = time.monotonic() + 30
        while (before := loop.run_until_complete(synced(ws))) < 3:  # a few of the run's syncs
            assert time.monotonic() < deadline
            loop.run_until_complete(asyncio.sleep(0.05))
        sandbox = shell._lives._live[ws.fs.instance]

        async def no_more_syncs() -> None:  # (a loop closed in a sync's freeze leaves the run frozen)
            await sandbox.lock.acquire()  # a tick's sync in flight ends first; held as the loop closes
            await asyncio.wait_for(sandbox._tick_idle.wait(), 30)

        loop.run_until_complete(no_more_syncs())
    finally:
        loop.close()  # the run's task still pending: its sandbox syncs no more
    try:
        asyncio.run(ws.fs.write_file("/workspace/B", b"from the workspace\n"))
        asyncio.run(ws.fs.write_file("/workspace/A", b"from the workspace\n"))
        counted = sandbox.mirror.directory / "count"  # the run's, unsynced
        written = int(counted.read_text() or 0)
        # The run still runs, and writes ``A`` again after the workspace did (both sides changed it).
        assert seen(lambda: int(counted.read_text() or 0) > written + 1)

        async def kill_then_read(ws: Workspace) -> tuple[Any, dict[str, bytes]]:
            await ws.runtime.kill_exec(run_id)
            result = await (await ws.runtime.get_exec(run_id)).result()
            return result, {n: await ws.fs.read_file(f"/workspace/{n}") for n in ("A", "B", "seen", "count")}

        result, files = asyncio.run(asyncio.wait_for(kill_then_read(ws), 60))
        assert seen(lambda: not host_pids_with(looping))
        assert (result.status, result.exit_code, result.error) == ("cancelled", 137, "killed"), result
        assert result.skipped_reasons.get("/workspace/A", "").startswith("changed in the workspace"), result
        assert "/workspace/B" not in result.skipped and "/workspace/count" in result.pulled, result
        expected = {"A": b"from the workspace\n", "B": b"from the workspace\n", "seen": b"b0\n"}
        assert {n: files[n] for n in expected} == expected, files
        count = int(files["count"])
        assert count > before, (count, before)  # its writes after the loop closed: pulled by the kill
        later = asyncio.run(run(ws, "cat A B seen count"))  # a fresh sandbox: the workspace's versions
        assert (later.status, later.stdout) == ("completed", "from the workspace\n" * 2 + f"b0\n{count}\n")
    finally:
        asyncio.run(asyncio.wait_for(ws.close(), 60))
    del ws
    gc.collect()  # that loop's tasks and coroutines go now (warnings), not in a later test
    again = Workspace(db)
    try:
        reread = {n: asyncio.run(again.fs.read_file(f"/workspace/{n}")) for n in ("A", "B", "seen", "count")}
        assert reread == {**expected, "count": f"{count}\n".encode()}, reread
        record = asyncio.run(again.runtime.get_exec(run_id))
        assert asyncio.run(record.result()).skipped_reasons == result.skipped_reasons
    finally:
        asyncio.run(again.close())
