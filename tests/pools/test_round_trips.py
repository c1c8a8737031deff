"""The pool fast paths, counted in owner RPCs per run (issue 24 item 3; the sequence diagram is in
``computer/actors/README.md``, "A pooled run, message by message").

The owner counts every RPC it serves (``stats()["rpcs"]``: the client's and the workers' calls back);
the workers count their calls back by kind (``callbacks_by``), the runs whose push came prefetched,
the owner handles they were sent and the ``RunStarted`` markers they sent. Counts, never times: where
a fast path depends on a time (the 25 ms ``exec_start`` wait), the test sets that time so the
outcome is certain either way.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import computer
from computer.client import _runtime as client_runtime
from computer.config import Settings

from .pool_helpers import worker_stats


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


async def test_a_python_run_defers_its_pull_to_the_owner_and_the_next_push_comes_prefetched(
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
        assert "/workspace/made.txt" in result.pulled
        assert await ws.fs.read_text("/workspace/made.txt") == "made by python\n"
        # The pull travelled in the exit event and the owner applied it (no pool_sync_pull call);
        # the push came with the run: the whole run was the one exec_start.
        assert (moved["prefetched"], moved["owner_handles"], rpcs) == (1, 0, 1), moved
        assert not [k for k in moved if k.startswith("callback ")], moved
        # The worker settles its mirror from the outcome sent with the next run: nothing pushed.
        again, rpcs, moved = await _counted(ws, "python", "print(open('made.txt').read(), end='')")
        assert (again.pushed, again.stdout, rpcs, moved["prefetched"]) == (0, "made by python\n", 1, 1)
