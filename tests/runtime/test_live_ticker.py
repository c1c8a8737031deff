"""A live sandbox's background sync (its ticker, every ``SYNC_INTERVAL``) when a look at the sandbox
fails, and its end racing a tick (SPEC section 10, "Live sandboxes")."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend, _live, _live_channel
from computer.runtime._live import LiveSandbox, LiveSandboxError

from ._live_support import eventually

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def _live_workspace(
    tmp_path: Path, first: str
) -> AsyncIterator[tuple[computer.Workspace, ShellBackend, LiveSandbox]]:
    """A workspace whose live sandbox ran ``first``: the workspace, its backend and that sandbox."""
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, first)
        yield ws, backend, backend._lives._live[ws.fs.instance]


async def _written(sandbox: LiveSandbox, name: str) -> None:
    """Until the sandbox's background process wrote ``name`` (in its mirror): a run that started it
    returned once it was forked, and a loaded machine may run it later than the failures the test
    sets up next end the sandbox (CI-like load: 4 busy loops beside it; the file was then missing)."""
    written = sandbox.mirror.directory / name
    await eventually(lambda: asyncio.to_thread(written.exists))


def _unanswered(monkeypatch: pytest.MonkeyPatch, sandbox: LiveSandbox) -> list[int]:
    """The sandbox's pids group unreadable (a host without the controller: ``busy`` asks the init for
    its processes), and the init's next ``[n]`` answers errors (n set by the caller), as when it
    could not send its listing."""
    failing, request = [0], sandbox._request

    async def answering(message: dict[str, Any]) -> dict[str, Any]:
        if message.get("op") == "ps" and failing[0] > 0:
            failing[0] -= 1
            raise LiveSandboxError("the live sandbox's init could not answer: [Errno 105] No buffer space")
        return await request(message)

    monkeypatch.setattr(sandbox, "tasks", lambda: None)
    monkeypatch.setattr(sandbox, "_request", answering)
    return failing


async def test_a_tick_whose_init_could_not_answer_leaves_the_next_tick_to_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick whose look at the sandbox failed on the init's channel ("could not answer": a request's
    reply it could not send) leaves the sync to the next tick. Before, that error ended the ticker for
    the sandbox's life: nothing a background process wrote reached the workspace until the next run,
    and the sandbox never ended idle."""
    backend = ShellBackend(live=True, live_idle=0.5)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'sleep 0.5; echo late > late.txt; sleep 1' > /dev/null 2>&1 &")
        failing = _unanswered(monkeypatch, backend._lives._live[ws.fs.instance])
        failing[0] = 3
        await eventually(lambda: ws.fs.exists("/workspace/late.txt"), within=10)
        assert failing[0] == 0  # the ticks did meet the failures
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"

        async def ended() -> bool:  # the idle end still comes once the process is gone
            return backend.live_sandboxes() == 0

        await eventually(ended, within=10)


async def test_a_sandbox_whose_init_fails_every_tick_ends_and_the_next_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks whose look fails on the init's channel ``TICK_FAILURES`` times in a row end the sandbox as
    one whose init died: its processes killed, what they wrote pulled; the workspace's next run starts
    a fresh one and says so on stderr (nothing else told the caller its server was gone)."""
    monkeypatch.setattr(_live, "TICK_FAILURES", 3)
    first = "setsid sh -c 'echo late > late.txt; sleep 30' > /dev/null 2>&1 &"
    async with _live_workspace(tmp_path, first) as (ws, backend, sandbox):
        await _written(sandbox, "late.txt")
        _unanswered(monkeypatch, sandbox)[0] = 10**6

        async def ended() -> bool:
            return backend.live_sandboxes() == 0

        await eventually(ended, within=10)
        await asyncio.wait_for(sandbox.ended.wait(), 30)  # its end's pull
        assert sandbox.dead is not None and "background syncs in a row" in sandbox.dead
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"
        first = await run(ws, "cat late.txt")
        assert (first.status, first.stdout) == ("completed", "late\n")
        assert "live sandbox ended while no run was in progress" in first.stderr, first.stderr
        assert "background syncs in a row" in first.stderr
        again = await run(ws, "true")
        assert (again.status, again.stderr) == ("completed", "")
        assert backend.live_sandboxes() == 1


async def test_a_sandbox_whose_init_never_answers_a_tick_ends_and_the_next_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a host without the pids controller a tick asks the init for its processes; an init that
    answers none of them (each request times out) counts toward ``TICK_FAILURES`` as a failed
    channel does: the sandbox ends as lost and the next run says so. Before, the timeout was a bare
    ``TimeoutError``, not counted: the ticks retried forever (one every ``REQUEST_TIMEOUT``), the
    sandbox never ended idle and nothing told the caller."""
    monkeypatch.setattr(_live, "TICK_FAILURES", 3)
    monkeypatch.setattr(_live_channel, "REQUEST_TIMEOUT", 0.2)
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'echo late > late.txt; sleep 30' > /dev/null 2>&1 &")
        sandbox = backend._lives._live[ws.fs.instance]
        await _written(sandbox, "late.txt")
        send = sandbox._send

        def unanswered(message: dict[str, Any], fds: Sequence[int] = ()) -> None:
            if message.get("op") != "ps":  # a listing the init never gets: its reply never comes
                send(message, fds)

        monkeypatch.setattr(sandbox, "tasks", lambda: None)  # no pids controller: ``busy`` asks
        monkeypatch.setattr(sandbox, "_send", unanswered)

        async def ended() -> bool:
            return backend.live_sandboxes() == 0

        await eventually(ended, within=20)
        await asyncio.wait_for(sandbox.ended.wait(), 30)
        assert sandbox.dead is not None and "did not answer within" in sandbox.dead, sandbox.dead
        first = await run(ws, "cat late.txt")
        assert (first.status, first.stdout) == ("completed", "late\n")
        assert "live sandbox ended while no run was in progress" in first.stderr, first.stderr


async def test_a_run_while_a_lost_sandbox_still_ends_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that comes while the lost sandbox's end still runs (its processes killed, its pull, its
    cleanup) waits for that end, starts a fresh one and says why the old one ended (not the run
    after it)."""
    monkeypatch.setattr(_live, "TICK_FAILURES", 3)
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sleep 30 > /dev/null 2>&1 &")
        sandbox = backend._lives._live[ws.fs.instance]
        cleaning, go = threading.Event(), threading.Event()
        cleanup = sandbox.process.cleanup

        def held() -> None:
            cleaning.set()
            go.wait(10)
            cleanup()

        monkeypatch.setattr(sandbox.process, "cleanup", held)
        _unanswered(monkeypatch, sandbox)[0] = 10**6
        await asyncio.to_thread(cleaning.wait, 10)
        asyncio.get_running_loop().call_later(0.3, go.set)
        try:
            first = await run(ws, "echo fresh")
        finally:
            go.set()
        assert sandbox.ended.is_set()  # the run waited for the end (``ENDING_WAIT``)
        assert (first.status, first.stdout) == ("completed", "fresh\n")
        assert "live sandbox ended while no run was in progress" in first.stderr, first.stderr
        await asyncio.wait_for(sandbox.ended.wait(), 30)
        again = await run(ws, "true")
        assert (again.status, again.stderr) == ("completed", "")


async def test_a_sandbox_ended_while_a_ticks_push_writes_the_mirror_reports_nothing_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace closes while a tick's push writes the workspace's files into the mirror in its
    worker thread (a background process runs: the ticks push). Before, the end cancelled the tick at
    once: the thread went on writing, the end's pull took the file it was writing for a change of the
    sandbox's (the push had not recorded it yet), refused it as one the workspace made too, and the
    next run listed it in ``skipped`` as a background process's change lost (none wrote it; seen
    stressing a close after 2,500 workspace writes: 4 of 8 closes). Now the end waits for the
    tick's sync (bounded)."""
    from computer.runtime import _mirror_push

    writing, go = threading.Event(), threading.Event()
    write_sparse = _mirror_push.write_sparse

    def held(fd: int, data: bytes, offset: int) -> None:
        write_sparse(fd, data, offset)
        if threading.current_thread() is not threading.main_thread() and not writing.is_set():
            writing.set()  # a push in a worker thread: the file written, not yet recorded
            go.wait(10)

    path, backend = f"{tmp_path}/ws.db", ShellBackend(live=True)
    async with computer.Workspace(path, backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'while :; do date +%N > bg; sleep 0.01; done' > /dev/null 2>&1 &")
        monkeypatch.setattr(_mirror_push, "write_sparse", held)
        for i in range(20):  # past a page applied without a thread hop
            await ws.fs.write_file(f"/workspace/f{i}", f"ws {i}\n")
        await asyncio.to_thread(writing.wait, 10)
        closing = asyncio.ensure_future(ws.close())
        await asyncio.sleep(0.3)  # the end's pull runs meanwhile (before: it did not wait)
        go.set()
        await closing
    monkeypatch.setattr(_mirror_push, "write_sparse", write_sparse)
    async with computer.Workspace(path, backends=[backend]) as ws:
        seen = await run(ws, "cat f0 f19")
        assert (seen.status, seen.stdout) == ("completed", "ws 0\nws 19\n")
        assert seen.skipped == [], seen.skipped_reasons
        assert [await ws.fs.read_text(f"/workspace/f{i}") for i in range(20)] == [
            f"ws {i}\n" for i in range(20)
        ]


async def test_a_run_while_the_sandbox_ends_sees_what_the_ends_pull_brought(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that comes while the workspace's sandbox ends (``end_sandbox``, idle, lost) waits for
    that end's pull (bounded: ``ENDING_WAIT``), so it sees what the sandbox's processes wrote last, in
    the sandbox's own mirror. Before, it started at once in a fresh mirror pushed from the workspace
    without that file: a background writer's last file was missing for the run (``cat`` failed)."""
    monkeypatch.setattr(_live, "SYNC_INTERVAL", 3600)  # no tick brings the file: only the end's pull
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'sleep 0.2; echo late > late.txt; sleep 30' > /dev/null 2>&1 &")
        sandbox = backend._lives._live[ws.fs.instance]
        written = sandbox.mirror.directory / "late.txt"
        await eventually(lambda: asyncio.to_thread(written.exists), within=10)
        assert not await ws.fs.exists("/workspace/late.txt")  # in the sandbox only, so far
        pulling, go = asyncio.Event(), asyncio.Event()
        pull = sandbox._pull

        async def held(paced: bool = False) -> Any:
            if sandbox.dead is not None:  # the end's pull
                pulling.set()
                await go.wait()
            return await pull(paced)

        monkeypatch.setattr(sandbox, "_pull", held)
        ending = asyncio.ensure_future(ws.runtime.end_sandbox())
        await asyncio.wait_for(pulling.wait(), 10)
        await ws.fs.write_file("/workspace/ws.txt", "ws\n")  # a workspace write racing the end
        asyncio.get_running_loop().call_later(0.3, go.set)
        seen = await run(ws, "cat late.txt ws.txt")
        assert (seen.status, seen.stdout) == ("completed", "late\nws\n"), seen.stderr
        assert await ending
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[ShellBackend(live=True)]) as ws:
        again = await run(ws, "cat late.txt ws.txt")  # after a reopen: a mirror made afresh
        assert (again.status, again.stdout) == ("completed", "late\nws\n"), again.stderr


async def test_a_listing_and_a_kill_in_flight_as_the_sandbox_ends_are_answered_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing and a kill the init has not answered when the sandbox ends (``end_sandbox``) are
    answered by the end: no processes listed (as for a workspace without a live sandbox), and no
    such process to kill (``ProcessLookupError``). Before, only the init's loss failed them: after
    an end they waited ``REQUEST_TIMEOUT`` for a reply that never came, then failed as a broken
    channel (``LiveSandboxError``)."""
    monkeypatch.setattr(_live_channel, "REQUEST_TIMEOUT", 120.0)  # (well past the bound below)
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "sleep 1000 > /dev/null 2>&1 &")
        workspace = ws.fs.instance

        async def sleeping() -> bool:
            return any(p.command == "sleep 1000" for p in await backend.processes(workspace))

        await eventually(sleeping, within=20)
        pid = next(p.pid for p in await backend.processes(workspace) if p.command == "sleep 1000")
        sandbox = backend._lives._live[workspace]
        send, held = sandbox._send, []

        def holding(message: dict[str, Any], fds: Sequence[int] = ()) -> None:
            if message.get("op") in ("ps", "kill"):  # never reaches the init: no reply comes
                held.append(message["op"])
            else:
                send(message, fds)

        monkeypatch.setattr(sandbox, "_send", holding)
        listing = asyncio.create_task(backend.processes(workspace))
        kill = asyncio.create_task(backend.kill_process(workspace, pid))

        async def asked() -> bool:
            return sorted(held) == ["kill", "ps"]

        await eventually(asked)
        assert await asyncio.wait_for(backend.end_sandbox(workspace), 60)
        async with asyncio.timeout(5):
            assert await listing == []
            with pytest.raises(ProcessLookupError):
                await kill
        assert await backend.processes(workspace) == []


async def test_no_tick_syncs_within_an_interval_of_a_runs_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's start is a two-way sync: the ticker's next sync comes ``SYNC_INTERVAL`` after its look,
    not at the ticker's own pace. Before, a run started late in the ticker's interval was frozen
    mid-run for a tick's pull of half its work (a third of the live ``mkdir -p`` row's ~33 ms runs).
    The ticker's phase is set here: the run starts 0.6 of an interval after a tick and lasts 0.6
    (a tick at its old pace lands in its middle; the new one 0.4 of an interval after its end)."""
    monkeypatch.setattr(_live, "SYNC_INTERVAL", 2.0)
    async with _live_workspace(tmp_path, "true") as (ws, _, sandbox):
        rounds: list[float] = []
        ticks: list[float] = []
        flush, sync = sandbox.flush_logs, sandbox.sync

        async def flushing() -> None:
            rounds.append(asyncio.get_running_loop().time())
            await flush()

        async def syncing(*, push: bool = True, paced: bool = False) -> Any:
            if paced:
                ticks.append(asyncio.get_running_loop().time())
            return await sync(push=push, paced=paced)

        monkeypatch.setattr(sandbox, "flush_logs", flushing)
        monkeypatch.setattr(sandbox, "sync", syncing)
        await eventually(lambda: _true(bool(rounds)), within=10)  # a tick's round: its phase
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, rounds[-1] + 1.2 - loop.time()))
        began = loop.time()
        assert (await run(ws, "sleep 1.2")).exit_code == 0
        ended = loop.time()
        assert rounds[-1] > began  # the ticker went on meanwhile (its round, without the sync)
        assert not [t for t in ticks if began < t < ended], (began, ended, ticks)


async def _true(value: bool) -> bool:
    return value
