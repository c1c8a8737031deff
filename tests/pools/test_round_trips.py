"""The pool fast paths, counted in owner RPCs per run (issue 24 item 3; the sequence diagram is in
``computer/actors/README.md``, "A pooled run, message by message").

The owner counts every RPC it serves (``stats()["rpcs"]``: the client's and the workers' calls back);
the workers count their calls back by kind (``callbacks_by``), the runs whose push came prefetched,
the owner handles they were sent and the ``RunStarted`` markers they sent. Counts, never times: where
a fast path depends on a time (the 25 ms ``exec_start`` wait), the test sets that time so the
outcome is certain either way.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from typing import Any

import pytest

import computer
from computer.actors._pool_context import Prefetched, RunOrder, WorkerMemory
from computer.actors._pool_worker import PoolWorker, RunStarted
from computer.client import _runtime as client_runtime
from computer.config import Settings
from computer.runtime import ExecRequest, ExitEvent, ShellBackend

from .pool_helpers import InProcessHandle, LocalOwner, worker_stats


async def _owner_rpcs(ws: Any) -> int:
    return int((await ws.handle.stats.remote())["rpcs"])


async def _workers(backend: str) -> Counter[str]:
    """The workers' counters summed over the pool."""
    total: Counter[str] = Counter()
    for stats in await worker_stats(backend):
        total.update({k: stats[k] for k in ("prefetched", "owner_handles", "announced", "runs")})
        total.update({f"callback {k}": v for k, v in stats["callbacks_by"].items()})
    return total


async def _counted(ws: Any, backend: str, source: str) -> tuple[Any, int, Counter[str]]:
    """Run ``source``: its result, the owner RPCs it cost less the workers' calls back (so: the
    client's), and the workers' counters it moved."""
    before_rpcs, before = await _owner_rpcs(ws), await _workers(backend)
    result = await (await ws.runtime.exec(source, backend=backend)).result()
    after = await _workers(backend)
    after.subtract(before)
    callbacks = sum(n for k, n in after.items() if k.startswith("callback "))
    return result, await _owner_rpcs(ws) - before_rpcs - callbacks, +after


async def test_a_warm_quiet_shell_run_is_one_owner_rpc(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner may hold its answer until the run ends (here: certainly long enough).
    monkeypatch.setattr(client_runtime, "EXEC_START_WAIT", 60.0)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/a.txt", "a\n")
        for _ in range(2):  # the first run pushes the tree and introduces the owner to its worker
            await (await ws.runtime.exec("true")).result()
        for _ in range(3):
            result, rpcs, moved = await _counted(ws, "shell", "true")
            assert result.status == "completed"
            assert rpcs == 1  # exec_start answered with the result: result() made no call
            # Prefetched push, no pull (nothing changed), no handle sent. The only call back a worker
            # may make: the push of a sync the live sandbox makes every 0.1 s while `true` runs.
            assert set(moved) - {"callback pool_sync_push", "announced"} == {"runs", "prefetched"}, moved
            assert (moved["runs"], moved["prefetched"], moved["owner_handles"]) == (1, 1, 0)


async def test_a_run_outlasting_the_exec_wait_costs_a_second_client_rpc_and_announces_itself(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        result, rpcs, moved = await _counted(ws, "shell", "sleep 0.5; echo done")
        assert (result.status, result.stdout) == ("completed", "done\n")
        assert rpcs == 2  # exec_start answered after its 25 ms without the result: exec_result
        assert moved["announced"] == 1  # it outlasted ANNOUNCE_AFTER: RunStarted went first


async def test_a_warm_python_run_is_one_client_rpc_with_its_push_prefetched(
    cluster: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_runtime, "EXEC_START_WAIT", 60.0)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("1", backend="python")).result()
        await (await ws.runtime.exec("2", backend="python")).result()
        source = "open('made.txt', 'w').write('made by python\\n')"
        result, rpcs, moved = await _counted(ws, "python", source)
        assert result.status == "completed", result
        assert await ws.fs.read_text("/workspace/made.txt") == "made by python\n"
        assert (moved["prefetched"], moved["owner_handles"], rpcs) == (1, 0, 1), moved
        # A live python sandbox syncs while the guest runs and pulls at its end (not deferred).
        assert set(k for k in moved if k.startswith("callback ")) <= {
            "callback pool_sync_push",
            "callback pool_sync_pull",
        }, moved


def _order(
    memory: WorkerMemory, owner: InProcessHandle, source: str, prefetched: Prefetched | None
) -> RunOrder:
    request = ExecRequest(id=uuid.uuid4().hex, backend="shell", source=source)
    return memory.order(request, "ws", owner, "token", prefetched, False)


async def test_a_run_without_a_live_sandbox_defers_its_pull_to_the_dispatcher_and_settles_from_it() -> None:
    """A worker without Ray, a non-live shell (no cgroup v1 freezer on the host, or ``live=False``), its
    owner and dispatcher halves in this process: the calls back to the owner, by name."""
    shell = ShellBackend(live=False)
    worker = PoolWorker(shell, "w", target=2, node_id="n")
    async with computer.Workspace() as ws:
        await ws.fs.mkdir("/workspace")
        owner = LocalOwner(ws)
        handle, memory, ctx = InProcessHandle(owner), WorkerMemory(), ws.runtime.context

        async def run(source: str) -> ExitEvent:
            order = _order(memory, handle, source, await memory.prefetch(ctx))
            *_, exit = [i async for i in worker.run(order) if not isinstance(i, RunStarted)]
            memory.introduced = True
            assert isinstance(exit, ExitEvent) and exit.exit_code == 0, exit
            return await memory.apply(order.request.id, exit, ctx) if exit.pending else exit

        try:
            first = await run("echo one > one.txt")  # cold: the worker asks for the whole push
            assert owner.served == ["pool_sync_push"] and first.pulled == ["/workspace/one.txt"]
            assert await ws.fs.read_text("/workspace/one.txt") == "one\n"  # applied by the dispatcher
            owner.served.clear()
            second = await run("cat one.txt; echo two > two.txt")
            # The push came with the order, the pull went back in the exit event: no call back at all.
            assert owner.served == [] and second.pulled == ["/workspace/two.txt"]
            assert (await worker.stats())["prefetched"] == 1
            # Without outcomes (a dispatcher that does not defer) the run pulls through the owner.
            plain = dataclasses.replace(_order(memory, handle, "echo three > three.txt", None), outcomes=None)
            *_, exit = [i async for i in worker.run(plain) if not isinstance(i, RunStarted)]
            assert isinstance(exit, ExitEvent) and exit.pending is None
            assert "pool_sync_pull" in owner.served
            assert await ws.fs.read_text("/workspace/three.txt") == "three\n"
        finally:
            await shell.close_workspace("ws")
