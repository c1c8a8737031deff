"""When a run pinned to its live sandbox moves (issue 23): a real pool worker (its live shell backend)
without Ray, its owners in this process (the owner RPCs of ``PoolCallbacks`` over a local workspace).

A worker with one slot is kept full by another workspace's long run; the pinned run that arrives
moves (the worker ends its idle sandbox and hands the run back) or waits (its sandbox runs a
background process, the dispatcher has no room elsewhere, or the line is short: a slot is due sooner
than a move would start it). Counted, never timed: the worker's slot time and move cost are set
(``_measured``) where a test needs a wait longer or shorter than a move.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

import computer
from computer.actors._pool_admission import Requeue
from computer.actors._pool_context import RunOrder
from computer.actors._pool_worker import PoolWorker, RunStarted
from computer.runtime import ExecRequest, ExitEvent, MirrorPool, OutputChunk, ShellBackend

from .pool_helpers import InProcessHandle, LocalOwner, processes_with, unique_sleep, wait_until

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


@pytest.fixture
async def worker() -> AsyncIterator[PoolWorker]:
    shell = ShellBackend(mirror_pool=lambda base, root: MirrorPool(base, root, max_workspaces=4))
    yield PoolWorker(shell, "w", target=1, node_id="n")
    for ws in ("a", "b"):  # live sandboxes and the sandboxes started ahead for the next runs
        await shell.close_workspace(ws)


@pytest.fixture
async def owners() -> AsyncIterator[dict[str, InProcessHandle]]:
    """Workspaces ``a`` (the pinned one) and ``b`` (the one that fills the worker)."""
    async with computer.Workspace() as a, computer.Workspace() as b:
        for ws in (a, b):
            await ws.fs.mkdir("/workspace")
        yield {"a": InProcessHandle(LocalOwner(a)), "b": InProcessHandle(LocalOwner(b))}


_ids = iter(range(10**6))


def _run(worker: PoolWorker, owners: dict[str, InProcessHandle], ws: str, source: str, **kw: Any) -> Any:
    request = ExecRequest(id=f"r{next(_ids)}", backend="shell", source=source)
    return worker.run(RunOrder(request, ws, owners[ws], **kw))


def _measured(worker: PoolWorker, *, hold: float, start: float) -> None:
    """What the worker measured: runs hold a slot ``hold`` s, a fresh sandbox costs ``start`` s."""
    worker.moves.hold, worker.moves.start = hold, start


async def _all(items: Any) -> list[Any]:
    return [item async for item in items if not isinstance(item, RunStarted)]


@contextlib.asynccontextmanager
async def _full(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> AsyncIterator[asyncio.Task[list[Any]]]:
    """The worker's one slot taken by a long run of workspace ``b`` (cancelled on exit)."""
    marker = unique_sleep()
    blocker = asyncio.ensure_future(_all(_run(worker, owners, "b", f"sleep {marker}")))
    try:
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        assert worker.admission.full
        yield blocker
    finally:
        blocker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await blocker
        await wait_until(lambda: not processes_with(f"sleep {marker}"))


async def test_a_pinned_run_at_a_full_worker_ends_its_idle_sandbox_and_moves(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> None:
    [first] = await _all(_run(worker, owners, "a", "echo one > one.txt"))
    assert isinstance(first, ExitEvent) and first.exit_code == 0 and first.live
    assert worker.live_sandboxes("a") == 1
    async with _full(worker, owners):
        _measured(worker, hold=60.0, start=0.05)  # the slot comes free in a minute: a move is cheaper
        items = await _all(_run(worker, owners, "a", "echo two", movable=True))
        assert items == [Requeue("w", "moved")]
        assert worker.live_sandboxes("a") == 0  # ended here: the next run starts fresh elsewhere
        assert (await worker.stats())["moved"] == 1
        assert (await worker.load()).moved == 1
    # What the ended sandbox wrote is in the workspace (its end pulled it).
    a = owners["a"].target.workspace
    assert await a.fs.read_file("/workspace/one.txt") == b"one\n"


async def test_a_pinned_run_whose_sandbox_runs_a_background_process_keeps_its_pin_and_waits(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> None:
    marker = unique_sleep()
    [started] = await _all(_run(worker, owners, "a", f"setsid sleep {marker} > /dev/null 2>&1 &"))
    assert isinstance(started, ExitEvent) and started.live
    async with _full(worker, owners):
        waiting = asyncio.ensure_future(_all(_run(worker, owners, "a", "echo two", movable=True)))
        await wait_until(lambda: worker.admission.queued == 1)
        assert (await worker.load()).pinned_queued == 1  # it waits pinned: more workers would not help
        assert not waiting.done() and worker.live_sandboxes("a") == 1
    *output, done = await waiting  # the slot came free: it ran in the same sandbox
    assert b"".join(c.data for c in output if isinstance(c, OutputChunk)) == b"two\n"
    assert isinstance(done, ExitEvent) and done.exit_code == 0 and done.live
    assert processes_with(f"sleep {marker}"), "the background process survived"
    assert (await worker.stats())["moved"] == 0
    assert await worker.live_end("a")
    await wait_until(lambda: not processes_with(f"sleep {marker}"))


async def test_a_pinned_run_waits_behind_a_short_line_and_moves_from_a_long_one(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> None:
    """The move rule: the line ahead times the slot time, against what a move costs (issue 23)."""
    await _all(_run(worker, owners, "a", "true"))
    async with _full(worker, owners):
        # Nobody ahead: the slot is due in 30 s, a move costs 75 s. The run waits in the line, pinned.
        _measured(worker, hold=30.0, start=75.0)
        waiting = asyncio.ensure_future(_all(_run(worker, owners, "a", "echo short", movable=True)))
        await wait_until(lambda: worker.admission.queued == 1)
        assert worker.live_sandboxes("a") == 1 and (await worker.stats())["stayed"] == 1
    *_, done = await waiting
    assert isinstance(done, ExitEvent) and done.exit_code == 0 and done.live
    assert (await worker.stats())["moved"] == 0
    async with _full(worker, owners):
        # Three runs of b ahead in the line: the slot is due in 4 x 30 s, more than the move's 75 s.
        ahead = [asyncio.ensure_future(_all(_run(worker, owners, "b", "true"))) for _ in range(3)]
        await wait_until(lambda: worker.admission.queued == 3)
        _measured(worker, hold=30.0, start=75.0)
        items = await _all(_run(worker, owners, "a", "echo long", movable=True))
        assert items == [Requeue("w", "moved")] and worker.live_sandboxes("a") == 0
        assert (await worker.stats())["moved"] == 1
        report = await worker.load()
        assert (report.moved, report.stayed) == (1, 1)  # the run that stayed above, the one that moved
        assert (report.slot_time, report.move_cost) == (30.0, 75.0)
        for run in ahead:
            run.cancel()
        await asyncio.gather(*ahead, return_exceptions=True)


async def test_a_pinned_run_without_room_elsewhere_waits_for_its_idle_sandbox(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> None:
    await _all(_run(worker, owners, "a", "true"))
    async with _full(worker, owners):
        waiting = asyncio.ensure_future(_all(_run(worker, owners, "a", "echo two", movable=False)))
        await wait_until(lambda: worker.admission.queued == 1)
        assert worker.live_sandboxes("a") == 1
    *_, done = await waiting
    assert isinstance(done, ExitEvent) and done.exit_code == 0 and done.live
    assert (await worker.stats())["moved"] == 0


async def test_a_pinned_run_at_a_worker_with_a_free_slot_stays(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> None:
    await _all(_run(worker, owners, "a", "true"))
    *_, done = await _all(_run(worker, owners, "a", "echo again", movable=True))
    assert isinstance(done, ExitEvent) and done.live and worker.live_sandboxes("a") == 1
    assert (await worker.stats())["moved"] == 0


async def test_a_drained_worker_ends_its_idle_sandboxes_and_keeps_those_running_processes(
    worker: PoolWorker, owners: dict[str, InProcessHandle]
) -> None:
    marker = unique_sleep()
    await _all(_run(worker, owners, "a", "echo a > a.txt"))
    await _all(_run(worker, owners, "b", f"setsid sleep {marker} > /dev/null 2>&1 &"))
    await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
    assert (worker.live_sandboxes("a"), worker.live_sandboxes("b")) == (1, 1)
    report = await worker.drain()
    # ``a`` ran nothing: ended (its file pulled), the worker's memory given back now; ``b`` runs a
    # background process: it keeps the worker (drained, not removable) until it ends.
    assert (worker.live_sandboxes("a"), worker.live_sandboxes("b")) == (0, 1)
    assert report.draining and report.live_sandboxes == 1 and report.holds == 1
    a = owners["a"].target.workspace
    assert await a.fs.read_file("/workspace/a.txt") == b"a\n"
    assert processes_with(f"sleep {marker}")
    assert await worker.live_end("b")
    await wait_until(lambda: not processes_with(f"sleep {marker}"))
    assert (await worker.load()).holds == 0


async def test_a_run_arriving_while_a_drain_lists_its_idle_sandbox_runs_to_its_end(
    worker: PoolWorker, owners: dict[str, InProcessHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain ends an idle sandbox when no run of its workspace is here and it holds no process. A
    pinned run admitted while the drain lists its processes (an await: a round trip to the sandbox's
    init; held open here) finds the sandbox alive and starts in it: the drain must ask whether a run is
    here after the listing, not before (checked before it, the sandbox was ended under the run: no
    output, ``exit_code=None``, "the live sandbox ended: ended by end_sandbox", its write lost). No
    await lies between that check and the sandbox's end marking it dead (``LiveSandbox.end``), so a run
    arriving later sees no live sandbox: handed back (draining) or started fresh after the end."""
    await _all(_run(worker, owners, "a", "true"))
    assert worker.live_sandboxes("a") == 1
    listed, go = asyncio.Event(), asyncio.Event()
    real = worker.live_processes

    async def slow_listing(workspace_id: str) -> Any:
        rows = await real(workspace_id)
        listed.set()
        await asyncio.wait_for(go.wait(), 20)  # the window held open: the run below arrives in it
        return rows

    monkeypatch.setattr(worker, "live_processes", slow_listing)
    draining = asyncio.ensure_future(worker.drain())
    await asyncio.wait_for(listed.wait(), 20)
    marker = unique_sleep()
    arriving = asyncio.ensure_future(
        _all(_run(worker, owners, "a", f"sleep {marker}; echo two > two.txt; echo two"))
    )
    await wait_until(lambda: bool(processes_with(f"sleep {marker}")))  # it runs in the idle sandbox
    go.set()
    await asyncio.wait_for(draining, 20)
    for pid in processes_with(f"sleep {marker}"):  # the run goes on to its write (ended early here)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    *output, done = await asyncio.wait_for(arriving, 30)
    stdout = b"".join(c.data for c in output if isinstance(c, OutputChunk) and c.stream == "stdout")
    assert stdout == b"two\n"
    assert isinstance(done, ExitEvent) and done.exit_code == 0, done
    a = owners["a"].target.workspace
    assert await a.fs.read_file("/workspace/two.txt") == b"two\n"


async def _end_held_open(worker: PoolWorker, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, asyncio.Event]:
    """Workspace ``a``'s live sandbox, whose end waits (after its processes were killed, before its
    final pull) until the event returned is set: a slow end's window held open."""
    sandbox = worker.backend._lives.get("a")  # type: ignore[attr-defined]
    assert sandbox is not None
    go = asyncio.Event()
    wind_up = sandbox._wind_up

    async def held() -> None:
        await asyncio.wait_for(go.wait(), 20)
        await wind_up()

    monkeypatch.setattr(sandbox, "_wind_up", held)
    return sandbox, go


async def test_a_run_arriving_while_its_sandbox_ends_waits_for_the_end_and_starts_fresh(
    worker: PoolWorker, owners: dict[str, InProcessHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of an idle sandbox (a move, an orphan's, ``end_sandbox``) marks it dead at once: a run
    of the workspace arriving while the end goes on is not pinned to it and waits for the end (its
    final pull) before it starts in a fresh sandbox, never in the dying one."""
    await _all(_run(worker, owners, "a", "echo one > one.txt"))
    old, go = await _end_held_open(worker, monkeypatch)
    ending = asyncio.ensure_future(worker.live_end("a"))
    await wait_until(lambda: not old.alive)
    assert worker.live_sandboxes("a") == 0
    arriving = asyncio.ensure_future(_all(_run(worker, owners, "a", "cat one.txt")))
    await asyncio.sleep(0.2)  # (no timing asserted: the run must still wait, however long this is)
    assert not arriving.done()
    go.set()
    assert await asyncio.wait_for(ending, 20)
    *output, done = await asyncio.wait_for(arriving, 30)
    assert b"".join(c.data for c in output if isinstance(c, OutputChunk)) == b"one\n"
    assert isinstance(done, ExitEvent) and done.exit_code == 0 and done.live, done
    fresh = worker.backend._lives.get("a")  # type: ignore[attr-defined]
    assert fresh is not None and fresh is not old and fresh.alive


async def test_a_run_arriving_while_a_drain_ends_its_sandbox_is_handed_back(
    worker: PoolWorker, owners: dict[str, InProcessHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a draining worker the same run finds no live sandbox to pin it: handed back (``draining``),
    the dispatcher sends it to a worker that takes runs."""
    await _all(_run(worker, owners, "a", "true"))
    old, go = await _end_held_open(worker, monkeypatch)
    draining = asyncio.ensure_future(worker.drain())
    await wait_until(lambda: not old.alive)
    items = await asyncio.wait_for(_all(_run(worker, owners, "a", "echo two")), 20)
    assert items == [Requeue("w", "draining")]
    go.set()
    report = await asyncio.wait_for(draining, 20)
    assert report.draining and worker.live_sandboxes("a") == 0
