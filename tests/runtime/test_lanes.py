"""Blocking work of one sandbox must not wait behind another's: the runtime offloads it to a lane of
its owner (``_tasks.offload``: a mirror, a live sandbox; one call at a time on a thread of its own),
never to the event loop's default executor, a few threads every workspace of the process shared (a
pool worker's host: 16 for all its loops). Before, a few hostile sandboxes whose thaws or walks
blocked held every thread of it, and a neighbour's run waited for them to end."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import threading
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend, _cgroups, _live
from computer.runtime._tasks import finish_in_thread, offload

HOSTILE = 3  # sandboxes, as many as the loop's default executor has threads here
WRITER = "timeout 60 bash -c 'while :; do echo $RANDOM > f; sleep 0.05; done' > /dev/null 2>&1 & echo started"


async def run(ws: computer.Workspace, source: str) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, timeout=60)).result()


@pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")
async def test_sandboxes_whose_offloaded_work_blocks_do_not_hold_a_neighbours_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hostile live sandbox's freeze (its tick's sync) blocks until released, as a freeze or a
    thaw does while a group forks without end; with the loop's default executor as many threads as
    there are hostile sandboxes, a neighbour's run (a sandbox to start, a mirror to sync) is done,
    checked and read back while every one of them is still blocked."""
    release, armed = threading.Event(), threading.Event()
    held: list[int] = []  # the threads the blocked freezes run on
    # Only the hostile sandboxes' freezes block: the neighbour's own tick froze its sandbox too when a
    # loaded host ran its run past a tick (100 ms), and its run's end waited for that tick forever
    # (its sandbox's lock): 2 failures in 3 runs of the file beside other helpers' suites, load ~14.
    groups: set[Path] = set()

    def blocking(group: Path) -> bool:
        if armed.is_set() and group in groups:  # not their runs' own ends: their sandboxes' ticks after
            held.append(threading.get_ident())
            release.wait(120)
        return _cgroups.freeze(group)

    monkeypatch.setattr(_live, "freeze", blocking)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=HOSTILE)
    # This loop's shared pool, for this test only (the loop may serve the tests after it).
    monkeypatch.setattr(asyncio.get_running_loop(), "_default_executor", pool)
    backends = [ShellBackend(live=True) for _ in range(HOSTILE)]
    hostile = [
        computer.Workspace(str(tmp_path / f"h{i}.db"), backends=[backend])
        for i, backend in enumerate(backends)
    ]
    victim = computer.Workspace(str(tmp_path / "v.db"), backends=[ShellBackend()])
    try:
        for ws in [*hostile, victim]:
            await ws.__aenter__()
            await ws.fs.mkdir("/workspace")
        for ws, backend in zip(hostile, backends, strict=True):
            started = await run(ws, WRITER)
            assert started.stdout == "started\n", started.stderr
            groups.add(backend._lives._live[ws.fs.instance]._freezer)
        armed.set()
        for _ in range(600):  # each hostile sandbox's next tick freezes it, and blocks there
            if len(held) >= HOSTILE:
                break
            await asyncio.sleep(0.05)
        assert len(set(held)) == HOSTILE
        done = asyncio.ensure_future(run(victim, "echo neighbour > n; cat n"))
        await asyncio.wait({done}, timeout=60)  # a bound only: it is done in well under a second
        finished_while_held = done.done() and not release.is_set()
        release.set()
        result = await done
        assert finished_while_held, "the neighbour's run waited for the hostile sandboxes' blocked work"
        assert result.stdout == "neighbour\n", result.stderr
        assert await victim.fs.read_text("/workspace/n") == "neighbour\n"
    finally:
        release.set()
        for ws in [*hostile, victim]:
            await ws.__aexit__(None, None, None)
        pool.shutdown(wait=False)


async def test_a_lane_runs_its_calls_one_at_a_time_and_never_holds_another() -> None:
    """Two calls of one owner: the second starts only once the first has ended (one thread per owner
    at most), while another owner's call, and a call of no owner, run and finish meanwhile; a
    failure reaches its caller; a caller cancelled while its call is blocked still has it finished
    (``finish_in_thread``) before the cancellation is raised."""
    first_in, release = threading.Event(), threading.Event()
    order: list[str] = []
    one, other = object(), object()

    def blocked() -> str:
        order.append("first starts")
        first_in.set()
        release.wait(30)
        order.append("first ends")
        return "first"

    def second() -> str:
        order.append("second")
        return "second"

    a = asyncio.ensure_future(offload(one, blocked))
    b = asyncio.ensure_future(offload(one, second))
    assert await asyncio.to_thread(first_in.wait, 30)
    assert await offload(other, lambda: "other") == "other"
    assert await offload(None, lambda: "alone") == "alone"
    assert order == ["first starts"] and not b.done()
    release.set()
    assert (await a, await b) == ("first", "second")
    assert order == ["first starts", "first ends", "second"]

    def fails() -> None:
        raise OSError(5, "broken")

    with pytest.raises(OSError, match="broken"):
        await offload(one, fails)

    started, finished, go = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        go.wait(30)
        finished.set()

    task = asyncio.ensure_future(finish_in_thread(slow, one))
    assert await asyncio.to_thread(started.wait, 30)
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished.is_set()


def test_a_forked_child_runs_its_calls_on_lanes_of_its_own() -> None:
    """A child forked while a lane of its parent is busy has no thread of that lane: its calls on the
    same owner run all the same (before the lanes were forgotten at fork, they waited for good)."""
    owner, busy, release = object(), threading.Event(), threading.Event()

    def held() -> None:
        busy.set()
        release.wait(30)

    parent = threading.Thread(target=lambda: asyncio.run(offload(owner, held)))
    parent.start()
    try:
        assert busy.wait(30)
        pid = os.fork()
        if pid == 0:  # the child: an answer within 20 s, or SIGALRM ends it
            signal.alarm(20)
            code = 0 if asyncio.run(offload(owner, lambda: 42)) == 42 else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        parent.join(30)


async def test_a_lanes_thread_is_started_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Thread.start`` waits until the new thread runs (its turn of the GIL and of a CPU): started on
    the event loop, every workspace of the process waited through it (0.3-0.6 s at load 15 with a
    thread sorting). The loop never starts a lane's thread; a start that fails is each waiting
    call's error, and the next call of that lane starts one again."""
    assert await offload(None, lambda: 0) == 0  # the starter runs
    loop_thread = threading.get_ident()
    started_by: list[tuple[str, int]] = []
    refuse = threading.Event()
    real = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started_by.append((self.name, threading.get_ident()))
        if refuse.is_set() and self.name == "computer: lane":
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    lanes = [object() for _ in range(5)]
    calls = [offload(lane, lambda i=i: i) for i, lane in enumerate(lanes)]
    assert await asyncio.gather(*calls, offload(None, lambda: 5)) == list(range(6))
    by = [who for name, who in started_by if name == "computer: lane"]
    assert by and loop_thread not in by, started_by  # (a lane of a reused id may still linger)
    fresh = object()  # (the others' threads linger a moment)
    refuse.set()
    with pytest.raises(RuntimeError, match="can't start new thread"):
        await offload(fresh, lambda: "never")
    refuse.clear()
    assert await offload(fresh, lambda: "again") == "again"
