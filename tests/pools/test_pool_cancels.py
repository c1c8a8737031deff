"""Runs through a pool whose consumer goes away: the task awaiting it cancelled (before the first item
and while it runs), its stream dropped without a close; no run is left on the pool, no process on the
host, and the workspace's next run goes as usual."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

import pytest

import computer
from computer.actors import pools
from computer.actors.pools import PoolBackend
from computer.client import _connection as client_connection
from computer.client import _runtime as client_runtime
from computer.config import Settings
from computer.runtime import ExecRequest, OutputChunk

from .pool_helpers import processes_with, sleepers, unique_sleep, wait_until, worker_stats


async def _backend(name: str) -> tuple[PoolBackend, Any]:
    owner = computer.workspace_actor(name)
    kind, info = await owner.describe.remote()
    assert kind == "ok"

    class Context:
        workspace_id = info["id"]

    return PoolBackend("shell", owner=owner), Context()


async def _nothing_left_on_the_pool(request_id: str) -> None:
    """Bounded: no worker lists the run (running or in its line)."""
    for _ in range(300):
        stats = await worker_stats("shell")
        if not any(
            request_id in repr(s.get("running", {})) or request_id in repr(s.get("waiting", ""))
            for s in stats
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {request_id} still on the pool: {stats}")


async def test_cancelling_the_task_that_awaits_a_running_pool_run_ends_it(
    cluster: Settings, name: str
) -> None:
    backend, ctx = await _backend(name)
    duration = unique_sleep()
    request = ExecRequest(
        id="cancelled-task", backend="shell", source=f"echo started; sleep {duration}; echo never"
    )
    events = backend.run(request, ctx)
    first = await anext(events)
    assert isinstance(first, OutputChunk) and first.data == b"started\n"
    await wait_until(lambda: bool(processes_with(f"sleep {duration}")))
    task = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await task
    with contextlib.suppress(Exception):
        await events.aclose()  # type: ignore[attr-defined]
    await wait_until(lambda: not processes_with(duration), within=30)
    await _nothing_left_on_the_pool(request.id)
    assert set(backend.loads().values()) <= {0}


async def test_a_dropped_pool_stream_ends_its_run(cluster: Settings, name: str) -> None:
    backend, ctx = await _backend(name)
    duration = unique_sleep()
    request = ExecRequest(id="dropped", backend="shell", source=f"echo started; sleep {duration}; echo never")
    events = backend.run(request, ctx)
    first = await anext(events)
    assert isinstance(first, OutputChunk) and first.data == b"started\n"
    await wait_until(lambda: bool(processes_with(f"sleep {duration}")))
    del events
    gc.collect()
    await wait_until(lambda: not processes_with(duration), within=30)
    await _nothing_left_on_the_pool(request.id)


async def test_a_run_cancelled_before_its_first_item_never_runs_on_the_pool(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, ctx = await _backend(name)
    sent = asyncio.Event()
    real = pools._next_item

    async def _first_item(items: Any) -> Any:
        sent.set()
        return await real(items)

    monkeypatch.setattr(pools, "_next_item", _first_item)
    duration = unique_sleep()
    request = ExecRequest(id="mid-dispatch", backend="shell", source=f"sleep {duration}")
    events = backend.run(request, ctx)
    task = asyncio.ensure_future(anext(events))
    await asyncio.wait_for(sent.wait(), 30)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await task
    with contextlib.suppress(Exception):
        await events.aclose()  # type: ignore[attr-defined]
    await _nothing_left_on_the_pool(request.id)
    monkeypatch.setattr(pools, "_next_item", real)
    # The workspace's next run goes, and the cancelled one never started behind it.
    after = [e async for e in backend.run(ExecRequest(id="after", backend="shell", source="echo ok"), ctx)]
    assert any(isinstance(e, OutputChunk) and e.data == b"ok\n" for e in after), after
    await wait_until(lambda: not processes_with(duration), within=30)
    assert set(backend.loads().values()) <= {0}


async def _cancelled_exec_leaves_nothing(ws: Any, duration: str) -> None:
    """``exec`` of a long run cancelled once its ``sleep`` is on the host: it ends, and the workspace's
    next run goes as usual."""
    task = asyncio.ensure_future(ws.runtime.exec(f"echo one > one; sleep {duration}"))
    await wait_until(lambda: bool(sleepers(duration)), within=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not processes_with(duration), within=60)
    after = await (await ws.runtime.exec("cat one; echo done")).result()
    assert (after.status, after.stdout) == ("completed", "one\ndone\n"), after


async def test_an_exec_cancelled_while_the_owner_holds_its_answer_ends_its_run(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner holds ``exec``'s answer for a short run's result (``EXEC_START_WAIT``, here long
    enough to cancel within it): the caller cancelled meanwhile never learns the run's id, and Ray's
    cancel reached the owner's wait only. Before, the run went on in the pool (its ``sleep`` stayed)."""
    monkeypatch.setattr(client_runtime, "EXEC_START_WAIT", 120.0)
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await _cancelled_exec_leaves_nothing(ws, duration)


async def test_an_exec_whose_answer_comes_after_its_cancel_ends_its_run(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner answered (the run started) but the caller was cancelled before the answer was read
    (here: held in the client until then). Before, the run went on in the pool."""
    real = client_connection._answer
    held = asyncio.Event()  # never set: the answer is read, then held
    holding = [True]

    async def _late(ref: Any, handle: Any, group: str | None) -> Any:
        reply = await real(ref, handle, group)
        if holding and isinstance(reply, tuple) and isinstance(reply[1], tuple) and len(reply[1]) == 3:
            holding.clear()  # the first exec_start's answer only
            await held.wait()
        return reply

    monkeypatch.setattr(client_connection, "_answer", _late)
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await _cancelled_exec_leaves_nothing(ws, duration)


async def test_a_cancelled_wait_for_a_result_leaves_the_run_reachable(cluster: Settings, name: str) -> None:
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        handle = await ws.runtime.exec(f"echo two > two; echo started; sleep {duration}")
        async for snap in handle:
            if "started" in snap.stdout:
                break
        waiter = asyncio.ensure_future(handle.result())
        await asyncio.sleep(0)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        assert processes_with(f"sleep {duration}")  # waiting stopped, the run did not
        again = await ws.runtime.get_exec(handle.id)
        await again.kill()
        assert (await again.result()).status == "cancelled"
        await wait_until(lambda: not processes_with(duration), within=30)
        after = await (await ws.runtime.exec("cat two; echo done")).result()
        assert (after.status, after.stdout) == ("completed", "two\ndone\n"), after
