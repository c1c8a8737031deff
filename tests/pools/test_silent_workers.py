"""A pool worker that is stopped (SIGSTOP) or wedged: Ray still sees its process alive and bounds no
call to it. The dispatcher probes a worker that keeps a call waiting (``PoolWorker.probe``, on its own
concurrency group) and treats one that does not answer as dead for that call: ``end_sandbox`` (and the
hibernation's ``close_workspace``) give its live sandbox up, a run that never started there goes to
another worker, a run that started there fails naming it. Before, each waited forever (``end_sandbox``,
hibernation) or for the run's timeout plus ~20 s. The dispatcher's probes given up are cancelled in
Ray; a worker keeps at most one ``pool_ping`` of a stopped owner out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from owner_models import owner_awake, owner_process, process_pid

import computer
import computer.actors._pool_probe as _pool_probe
import computer.actors._pool_worker as _pool_worker
from computer.config import Settings

from .pool_helpers import processes_with, sandbox_worker, unique_sleep, wait_until

# What a run says first when its workspace's live sandbox was left on a worker that does not answer.
SILENT = "computer: the exec worker holding this workspace's live sandbox does not answer"
# Bound of each call below on a stopped worker (the probe answers it within ~10 s; before: never, or
# the run's 120 s timeout plus ~20 s).
BOUND = 60.0


@contextlib.contextmanager
def _stopped(pid: int, *markers: str) -> Iterator[None]:
    """The worker process ``pid`` stopped for the block; continued after, its sandboxes' ``sleep
    <marker>`` processes killed (the stale calls the worker then runs end the rest)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        for marker in markers:
            for sleeper in processes_with(f"sleep {marker}"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(sleeper, signal.SIGKILL)


async def _live_on_a_worker(ws: Any, marker: str) -> int:
    """Leave ``sleep <marker>`` in the workspace's live sandbox (and kept.txt synced); its worker's pid."""
    first = await (
        await ws.runtime.exec(f"echo kept > kept.txt; setsid sleep {marker} > /dev/null 2>&1 &")
    ).result()
    assert first.status == "completed", first
    await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
    worker, _ = await sandbox_worker(marker)
    return worker


async def test_end_sandbox_on_a_stopped_worker_gives_the_sandbox_up_and_the_next_run_says_so(
    cluster: Settings, name: str
) -> None:
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        worker = await _live_on_a_worker(ws, marker)
        with _stopped(worker, marker):
            assert await asyncio.wait_for(ws.runtime.end_sandbox(), BOUND) is True
            after = await asyncio.wait_for((await ws.runtime.exec("cat kept.txt")).result(), BOUND)
        assert (after.status, after.stdout) == ("completed", "kept\n"), after
        assert after.stderr.startswith(SILENT), after
        again = await (await ws.runtime.exec("true")).result()
        assert (again.status, again.stderr) == ("completed", ""), again  # said once


async def test_a_run_pinned_to_a_stopped_worker_runs_once_elsewhere_and_says_why(
    cluster: Settings, name: str
) -> None:
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        worker = await _live_on_a_worker(ws, marker)
        with _stopped(worker, marker):
            run = await ws.runtime.exec("echo ran >> runs.txt; cat kept.txt")
            after = await asyncio.wait_for(run.result(), BOUND)
        assert (after.status, after.stdout) == ("completed", "kept\n"), after
        assert after.stderr.startswith(SILENT), after
        assert await ws.fs.read_file("/workspace/runs.txt") == b"ran\n"  # once


async def test_a_run_whose_worker_stops_under_it_fails_naming_the_worker(
    cluster: Settings, name: str
) -> None:
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        run = await ws.runtime.exec(f"echo ran >> runs.txt; sleep {marker}")
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        for _ in range(100):  # bounded: 10 s for the live sandbox's sync to bring runs.txt over
            if await ws.fs.exists("/workspace/runs.txt"):
                break
            await asyncio.sleep(0.1)
        worker, _ = await sandbox_worker(marker)
        with _stopped(worker, marker):
            result = await asyncio.wait_for(run.result(), BOUND)
        assert result.status != "completed", result
        assert "stopped answering" in (result.error or "") and "computer:pool:shell:" in (
            result.error or ""
        ), result
        again = await (await ws.runtime.exec("cat runs.txt")).result()
        assert (again.status, again.stdout) == ("completed", "ran\n"), again  # not run twice


async def _read_kept(name: str) -> bytes:
    async with computer.get_workspace(name) as ws:
        return await ws.fs.read_file("/workspace/kept.txt")


async def test_a_workspace_whose_live_sandbox_worker_is_stopped_still_hibernates(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    # 3 s idle: long enough that the owner cannot hibernate (ending the sandbox and its `sleep`) between
    # the run and the lookup of its worker on a loaded machine (1 s did, once: no `sleep` found).
    conf = computer.init(data_dir=tmp_path / "data", hibernate_after=3.0, shell_pool_size=2)
    try:
        marker = unique_sleep()
        async with computer.get_workspace(name) as ws:
            worker = await _live_on_a_worker(ws, marker)
        with _stopped(worker, marker):
            deadline = asyncio.get_running_loop().time() + BOUND
            while await owner_awake(name, conf):  # polled: hibernation sends nothing to await
                assert asyncio.get_running_loop().time() < deadline, "the owner never hibernated"
                await asyncio.sleep(0.2)
            # Calls wait for the close to be over (it ends the live sandbox first), then open it afresh.
            kept = await asyncio.wait_for(_read_kept(name), BOUND)
        assert kept == b"kept\n"
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_processes_and_kill_process_on_a_stopped_worker_say_so_within_a_probe(
    cluster: Settings, name: str
) -> None:
    """Before, each waited ``LIVE_CALL_TIMEOUT`` (60 s) before its ``TimeoutError``."""
    import pytest

    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        worker = await _live_on_a_worker(ws, marker)
        with _stopped(worker, marker):
            with pytest.raises(TimeoutError, match="did not answer a liveness probe"):
                await asyncio.wait_for(ws.runtime.processes(), BOUND / 2)
            with pytest.raises(TimeoutError, match="did not answer a liveness probe"):
                await asyncio.wait_for(ws.runtime.kill_process(worker), BOUND / 2)


@pytest.fixture
def cancels(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The refs this process asks Ray to cancel from here on (``ray.cancel`` still does it)."""
    import ray

    seen: list[Any] = []
    real = ray.cancel

    def cancel(ref: Any, **options: Any) -> None:
        seen.append(ref)
        real(ref, **options)

    monkeypatch.setattr(ray, "cancel", cancel)
    return seen


async def _settled(refs: list[Any]) -> None:
    """Each of ``refs`` ends (answered late or cancelled) once its actor goes on: none left pending."""
    from ray.exceptions import TaskCancelledError

    async with asyncio.timeout(BOUND):
        for ref in refs:
            with contextlib.suppress(TaskCancelledError):
                await ref


async def test_probes_a_stopped_worker_does_not_answer_are_cancelled(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch, cancels: list[Any]
) -> None:
    """A timed-out liveness probe (``PoolWorker.probe``) stayed pending in Ray: awaiting a ref stops at
    the timeout, its task does not, and a stopped worker ran each one it had been sent once it went
    on. Each probe given up is now cancelled (Ray cannot reach a stopped process: the probes stay
    pending until it goes on, then most are dropped unrun; which ones is a race of Ray's)."""
    monkeypatch.setattr(_pool_probe, "PROBE_TIMEOUT", 0.5)
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        await _live_on_a_worker(ws, marker)
        worker, handle = await sandbox_worker(marker)
        with _stopped(worker, marker):
            whys = [await _pool_probe.probe(handle) for _ in range(3)]
            assert all(why is not None and "stopped or wedged" in why for why in whys), whys
            assert len(cancels) == 3  # before: none
        await _settled(cancels)
        assert await _pool_probe.probe(handle) is None  # it answers again
        assert len(cancels) == 3  # an answered probe is not cancelled


class _PingSpy:
    """An owner's handle whose ``pool_ping.remote()`` calls are counted (each still goes to the owner)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.sent: list[Any] = []

    @property
    def pool_ping(self) -> _PingSpy:
        return self

    def remote(self) -> Any:
        ref = self.owner.pool_ping.remote()
        self.sent.append(ref)
        return ref


async def test_a_worker_keeps_at_most_one_ping_of_a_stopped_owner_out(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's ``pool_ping`` of a run's owner (whether it is gone) stayed pending in Ray once given
    up (Ray cannot cancel into a stopped process): a stopped owner had one more per run and per check
    (``OWNER_CHECK_INTERVAL`` plus ``OWNER_CHECK_TIMEOUT``), and ran them all once it went on. Now a
    check while the owner's previous ping is unanswered waits for that one: one ping out, however
    many watchers and intervals; silence still decides nothing (not gone)."""
    monkeypatch.setattr(_pool_worker, "OWNER_CHECK_TIMEOUT", 0.5)
    monkeypatch.setattr(_pool_worker, "OWNER_CHECK_INTERVAL", 0.1)
    async with computer.get_workspace(name) as ws:
        owner = ws._conn.handle
        token = await owner.pool_ping.remote()
        pid = await process_pid(owner_process(owner))
        spy = _PingSpy(owner)
        with _stopped(pid):
            assert [await _pool_worker._owner_gone(spy, token) for _ in range(3)] == [None] * 3
            # Two runs' watchers and more checks, for several intervals and timeouts: none returns
            # (silent is not gone), none sends another ping.
            watchers = asyncio.gather(*(_pool_worker._watch_owner(spy, token) for _ in range(2)))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(watchers, 2.0)
            assert len(spy.sent) == 1  # before: 3 from the checks, then one per watcher and check
        assert await asyncio.wait_for(spy.sent[0], BOUND) == token  # answered once it went on
        assert await _pool_worker._owner_gone(spy, token) is None
        assert len(spy.sent) == 2  # the answered ping is no longer out: a new check sends a new one
