"""Ending runs through the pools: kill, timeout, a consumer that stops, a worker that dies mid-run."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import ray

import computer
from computer.actors import NAMESPACE
from computer.actors.pools import PoolBackend
from computer.config import Settings
from computer.runtime import ExecRequest, OutputChunk
from computer.runtime._cgroups import CGROUP_PARENT, CGROUP_ROOT, freeze

from .pool_helpers import (
    found,
    processes_with,
    sleepers,
    unique_sleep,
    wait_until,
    worker_stats,
    workers_with_a_restart_left,
)


async def _wait_for_output(handle: Any, text: str) -> None:
    async for snapshot in handle:
        if text in snapshot.stdout:
            return
    raise AssertionError(f"the run ended before printing {text!r}")


async def test_kill_from_a_client_ends_the_process_tree(cluster: Settings, name: str) -> None:
    """... and what the program wrote is pulled and listed in the killed run's result, as in one
    process (the worker kills the run and its stream goes on to the exit event)."""
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        handle = await ws.runtime.exec(f"echo kept > kept.txt; echo started; sleep {duration}; echo never")
        await _wait_for_output(handle, "started")
        await wait_until(lambda: bool(processes_with(f"sleep {duration}")))
        await handle.kill()
        result = await handle.result()
        assert await ws.fs.read_file("/workspace/kept.txt") == b"kept\n"
    assert result.status == "cancelled" and "never" not in result.stdout
    assert (result.exit_code, result.error, result.pulled) == (137, "killed", ["/workspace/kept.txt"])
    await wait_until(lambda: not processes_with(duration))


async def test_timeout_through_the_pool_ends_the_process_tree(cluster: Settings, name: str) -> None:
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        result = await (await ws.runtime.exec(f"sleep {duration} & sleep {duration}", timeout=1.0)).result()
    assert result.status == "cancelled"
    await wait_until(lambda: not processes_with(duration))


async def test_closing_the_pool_iterator_cancels_the_worker_run(cluster: Settings, name: str) -> None:
    owner = computer.workspace_actor(name)
    kind, info = await owner.describe.remote()
    assert kind == "ok"

    class Context:
        workspace_id = info["id"]

    duration = unique_sleep()
    backend = PoolBackend("shell", owner=owner)
    request = ExecRequest(id="closing", backend="shell", source=f"echo started; sleep {duration}")
    events = backend.run(request, Context())  # type: ignore[arg-type]
    first = await anext(events)
    assert isinstance(first, OutputChunk) and first.data == b"started\n"
    await wait_until(lambda: bool(processes_with(f"sleep {duration}")))
    await events.aclose()  # type: ignore[attr-defined]
    await wait_until(lambda: not processes_with(duration))
    assert set(backend.loads().values()) <= {0}


async def test_a_worker_killed_mid_run_fails_the_run_and_keeps_only_what_was_synced(
    cluster: Settings, name: str
) -> None:
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/existing", b"orig")
        handle = await ws.runtime.exec(
            f"echo half > half; echo changed > existing; echo started; sleep {duration}"
        )
        await _wait_for_output(handle, "started")
        for _ in range(100):  # bounded: the live sandbox's sync brings them within ~0.1 s
            if await ws.fs.exists("/workspace/half"):
                break
            await asyncio.sleep(0.05)
        stats = await worker_stats("shell", cluster.shell_pool_size)
        running = [s for s in stats if any(key.endswith(f"/{handle.id}") for key in s["running"])]
        assert len(running) == 1
        ray.kill(ray.get_actor(running[0]["name"], namespace=NAMESPACE))

        result = await handle.result()
        assert (result.status, result.exit_code) == ("failed", None)
        assert result.error is not None and result.error.startswith("exec worker died: ")
        assert running[0]["name"] in result.error
        # A live sandbox syncs while its run runs: what it wrote before "started" (the worker was
        # killed after) was already in the workspace, and stays; nothing half-applied.
        assert await ws.fs.read_text("/workspace/half") == "half\n"
        assert await ws.fs.read_text("/workspace/existing") == "changed\n"
        await wait_until(lambda: not processes_with(duration))  # the sandbox died with its worker

        after = await (await ws.runtime.exec("cat existing; ls")).result()
        assert (after.status, after.stdout) == ("completed", "changed\nexisting\nhalf\n")
    replaced = {s["name"]: s["pid"] for s in await worker_stats("shell", cluster.shell_pool_size)}
    assert running[0]["name"] not in replaced or replaced[running[0]["name"]] != running[0]["pid"]


def _freezer_group(pid: int) -> Path | None:
    """The freezer cgroup of host process ``pid`` when it is a run's group (``computer-exec``)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(",") and f"/{CGROUP_PARENT}/" in path:
            return CGROUP_ROOT / "freezer" / path.lstrip("/")
    return None


async def test_a_worker_killed_with_its_sandbox_frozen_restarts_and_its_sandbox_is_gone(
    cluster: Settings, name: str
) -> None:
    """A worker SIGKILLed while its live sandbox is frozen for a sync (a writing run syncs every ~0.1 s)
    leaves the sandbox frozen (its die-with-parent SIGKILL waits for a thaw). The restarted worker
    removes the dead one's run groups, thawing first: the sandbox is gone within a bound, so is every
    group of the dead worker, and the restarted worker answers."""
    await workers_with_a_restart_left("shell", cluster.shell_pool_size)
    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        handle = await ws.runtime.exec(f"echo started; sleep {duration}")
        await _wait_for_output(handle, "started")
        group = _freezer_group(await found(lambda: next(iter(sleepers(duration)), None)))
        if group is None:
            await handle.kill()
            pytest.skip("no freezer cgroup for live sandboxes here")
        stats = await worker_stats("shell", cluster.shell_pool_size)
        [running] = [s for s in stats if any(key.endswith(f"/{handle.id}") for key in s["running"])]
        assert freeze(group)  # as a sync does, then the worker dies before it thaws
        os.kill(running["pid"], signal.SIGKILL)
        # The restarted worker's first step removes the dead one's run groups, thawed first: ~2 s
        # here (the restart included); the memory and pids groups swept while still frozen took it
        # 50 kill rounds each (at least 11 s of its sleeps alone), ~25 s in all.
        await wait_until(lambda: not processes_with(duration), within=10.0)
        result = await handle.result()
        assert (result.status, result.exit_code) == ("failed", None)

        worker, pid = ray.get_actor(running["name"], namespace=NAMESPACE), running["pid"]
        for _ in range(600):  # bounded: 60 s
            try:
                pid = (await worker.stats.remote())["pid"]
                if pid != running["pid"]:
                    break
            except ray.exceptions.RayActorError:
                pass
            await asyncio.sleep(0.1)
        assert pid != running["pid"]  # restarted in place, and answering
        assert list(CGROUP_ROOT.glob(f"*/{CGROUP_PARENT}/run-{running['pid']}-*")) == []

        after = await (await ws.runtime.exec("echo again")).result()
        assert (after.status, after.stdout) == ("completed", "again\n"), after.error


async def test_a_dead_idle_worker_is_replaced_before_the_next_run(cluster: Settings, name: str) -> None:
    size = cluster.python_pool_size
    async with computer.get_workspace(name) as ws:
        assert (await (await ws.runtime.exec("print('warm')", backend="python")).result()).stdout == "warm\n"
        for stats in await worker_stats("python", size):
            ray.kill(ray.get_actor(stats["name"], namespace=NAMESPACE))
        result = await (await ws.runtime.exec("print('again')", backend="python")).result()
    assert (result.status, result.stdout, result.error) == ("completed", "again\n", None)


async def test_a_restarted_worker_is_sent_the_owner_handle_again(cluster: Settings, name: str) -> None:
    """Runs after the first on a worker travel without the owner's handle; a worker restarted in place
    (same actor, new process) no longer holds it, answers so, and the run is sent again with it."""
    size = cluster.shell_pool_size
    await workers_with_a_restart_left("shell", size)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        before = {s["name"]: s["runs"] for s in await worker_stats("shell", size)}
        for _ in range(3):
            assert (await (await ws.runtime.exec("true")).result()).status == "completed"
        [used] = [s for s in await worker_stats("shell", size) if s["runs"] > before.get(s["name"], 0)]
        worker = ray.get_actor(used["name"], namespace=NAMESPACE)
        ray.kill(worker, no_restart=False)
        # Back in its new process first: a run that finds a worker still restarting goes to another
        # (``RESTART_AVOID``), and this test is about the restarted one.
        for _ in range(600):  # bounded: 60 s
            try:
                if (await worker.stats.remote())["pid"] != used["pid"]:
                    break
            except ray.exceptions.RayActorError:
                pass
            await asyncio.sleep(0.1)
        result = await (await ws.runtime.exec("echo again > f; cat f")).result()
        assert (result.status, result.stdout, result.error) == ("completed", "again\n", None), result.error
        assert await ws.fs.read_text("/workspace/f") == "again\n"
        [after] = [s for s in await worker_stats("shell", size) if s["name"] == used["name"]]
    assert after["pid"] != used["pid"]
    assert (after["runs"], after["owner_handles"]) == (1, 1)


async def test_a_run_whose_owner_died_is_killed_on_its_worker(cluster: Settings, name: str) -> None:
    from owner_models import owner_process  # hosted: the owner host; dedicated: the workspace's actor

    duration = unique_sleep()
    async with computer.get_workspace(name) as ws:
        handle = await ws.runtime.exec(f"echo started; sleep {duration}")
        await _wait_for_output(handle, "started")
        await wait_until(lambda: bool(processes_with(f"sleep {duration}")))
        ray.kill(owner_process(computer.workspace_actor(name)))
    await wait_until(lambda: not processes_with(duration), within=30.0)
