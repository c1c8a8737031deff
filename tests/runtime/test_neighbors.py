"""One workspace's sandbox must not hold the event loop every workspace of the process shares.

Thawing a live sandbox after a sync (a write of ``THAWED`` to its freezer group) blocks for as long
as the kernel takes to wake every task of the group, and a program that forks in a loop makes that
long: 40 such loops, 39 ms a thaw (137 ms at most), at every tick (100 ms) of that one sandbox, on
the loop. It runs in a worker thread now, awaited to its end even when the sync is cancelled."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend, _cgroups, _live

from ._live_support import ticks_on

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")

FORKING = "timeout 20 bash -c 'while :; do /bin/echo $RANDOM > f$BASHPID; done' > /dev/null 2>&1 &"


async def run(ws: computer.Workspace, source: str) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, timeout=60)).result()


async def test_a_forking_sandbox_is_thawed_off_the_shared_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile workspace's background programs fork and write without end, so each of its ticks
    freezes and thaws it; none of those thaws runs on the event loop's thread, and a neighbour
    workspace of the same process runs its 20 commands (each checked) while they go on."""
    loop_thread = threading.get_ident()
    thawed_on: list[int] = []

    def recorded(group: Path) -> None:
        thawed_on.append(threading.get_ident())
        _cgroups.thaw(group)

    monkeypatch.setattr(_live, "thaw", recorded)
    async with (
        computer.Workspace(str(tmp_path / "h.db"), backends=[ShellBackend(live=True)]) as hostile,
        computer.Workspace(str(tmp_path / "v.db"), backends=[ShellBackend(live=True)]) as victim,
    ):
        await hostile.fs.mkdir("/workspace")
        await victim.fs.mkdir("/workspace")
        started = await run(hostile, f"for i in 1 2 3 4; do {FORKING} done; echo started")
        assert started.stdout == "started\n", started.stderr
        for i in range(20):
            done = await run(victim, f"echo {i} > f{i}; cat f{i}")
            assert done.stdout == f"{i}\n", done.stderr
            assert await victim.fs.read_text(f"/workspace/f{i}") == f"{i}\n"
        deadline = time.monotonic() + 30.0  # the hostile sandbox's ticks: a few thaws at least (bounded)
        while len(thawed_on) < 5:
            assert time.monotonic() < deadline, f"{len(thawed_on)} thaws in 30 s"
            await asyncio.sleep(0.05)
        assert loop_thread not in thawed_on


async def test_a_sync_cancelled_while_it_thaws_the_sandbox_leaves_it_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync cancelled while its worker thread thaws the sandbox: the thaw runs to its end (the
    sandbox runs on) and the cancellation reaches the caller."""
    thawing, go = threading.Event(), threading.Event()

    def slow_thaw(group: Path) -> None:
        thawing.set()
        go.wait(10)
        _cgroups.thaw(group)

    backend = ShellBackend(live=True)
    async with computer.Workspace(str(tmp_path / "ws.db"), backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        loop = "while :; do date +%s%N > t.new && mv t.new tick; sleep 0.01; done"  # never seen empty
        await run(ws, f"setsid sh -c '{loop}' > /dev/null 2>&1 &")
        sandbox = backend._lives._live[ws.fs.instance]
        await ws.fs.write_file("/workspace/from-ws.txt", b"x")  # a push to make: the sync pauses it
        monkeypatch.setattr(_live, "thaw", slow_thaw)
        syncing = asyncio.ensure_future(sandbox.sync())
        await asyncio.to_thread(thawing.wait, 10)
        syncing.cancel()
        await asyncio.sleep(0.05)
        assert not syncing.done()  # the thaw is awaited to its end
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await syncing
        monkeypatch.setattr(_live, "thaw", _cgroups.thaw)
        assert (sandbox._freezer / "freezer.state").read_text().strip() == "THAWED"
        await ticks_on(ws)  # the loop goes on
        assert (await run(ws, "cat from-ws.txt")).stdout == "x"
