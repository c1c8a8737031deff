"""The pools' control loop in the shared Ray session: one for the cluster, restartable, observable."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

import computer
from computer.actors import NAMESPACE
from computer.actors._pool_scaler import SCALER_NAME
from computer.config import Settings


async def _status() -> dict[str, Any]:
    scaler = ray.get_actor(SCALER_NAME, namespace=NAMESPACE)
    state: dict[str, Any] = await scaler.status.remote()
    return state


async def test_a_restarted_control_loop_adopts_the_workers_and_runs_go_on(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await (await ws.runtime.exec("echo one")).result()).stdout == "one\n"
        before = {w["name"] for w in (await _status())["pools"]["shell"]["workers"] if w["state"] == "ready"}
        scaler = ray.get_actor(SCALER_NAME, namespace=NAMESPACE)
        ray.kill(scaler, no_restart=False)  # Ray restarts it in a new process
        deadline = time.monotonic() + 60
        while True:
            try:
                state = await _status()
                ready = {w["name"] for w in state["pools"]["shell"]["workers"] if w["state"] == "ready"}
                if before <= ready:
                    break
            except ray.exceptions.RayActorError:
                pass  # still restarting
            assert time.monotonic() < deadline, "the control loop did not come back with its workers"
            await asyncio.sleep(0.2)
        result = await (await ws.runtime.exec("echo two")).result()
        assert (result.status, result.stdout) == ("completed", "two\n")


async def test_the_status_reports_workers_waits_and_runs(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        handles = await asyncio.gather(*[ws.runtime.exec(f"echo {i}") for i in range(6)])
        assert [(await h.result()).status for h in handles] == ["completed"] * 6
    deadline = time.monotonic() + 20  # the loop collects the runs' waits at its next polls
    while (shell := (await _status())["pools"]["shell"])["waits_counted"] < 6:
        assert time.monotonic() < deadline, shell
        await asyncio.sleep(0.2)
    assert shell["min"] == 2 and shell["max"] >= 2 and shell["max_setting"] is None
    assert len([w for w in shell["workers"] if w["state"] == "ready"]) >= 2
    assert all(w["node_id"] for w in shell["workers"] if w["state"] == "ready")
    assert shell["waits_counted"] >= 6 and shell["wait_p99"] is not None and shell["runs_per_s"] > 0
    # What the loop decided (the floor's workers made, or none yet); six runs at once may also have
    # grown the pool or shed a busy worker's queued lines to a free one (a loaded machine did).
    verbs = ("create computer:pool:shell:", "grow by ", "shed the lines of ", "remove ", "drain ")
    assert all(isinstance(at, float) and what.startswith(verbs) for at, what in shell["decisions"]), shell
    assert all("computer:pool:shell:" in what for _, what in shell["decisions"] if what.startswith("create"))
