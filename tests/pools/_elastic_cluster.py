"""Run by test_elastic.py in a subprocess: elastic pools on a three-node Ray cluster of its own.

Three nodes on loopback declaring 2 CPUs each (``ray.cluster_utils.Cluster`` starts them as
``ray start`` would); the shell pool has minimum 1, maximum 4, one run at a time per worker and an
idle time of 2 s. Phases, each bounded in time; the last stdout line is a JSON report:

1. ``burst``: 12 runs at once (12 workspaces) grow the pool to its maximum across nodes; the ones
   beyond it wait in line;
2. ``shrink``: idle, the pool goes back to its minimum;
3. ``removal``: 4 runs in flight, then the maximum is lowered to 2: two busy workers are chosen for
   removal, their runs complete (each exactly once) and the workers go afterwards;
4. ``demand``: a maximum of 8 on 6 CPUs leaves pending workers, whose CPUs Ray's autoscaler state
   lists as demand; the runs complete all the same.

``pinned`` (run alone: ``_elastic_cluster.py DATA pinned``, by test_elastic_pins.py): two workspaces
whose live sandboxes are both on the one worker of a pool (maximum 2, one run at a time per worker)
run a 2 s command at once, round after round: the second run of each round waits pinned behind the
first. The pool must grow for that wait, and a later round's run must move its idle sandbox to the
new worker (``moved``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # nodes and drivers on 127.0.0.1
os.environ.pop("RAY_ADDRESS", None)

import ray
from ray.cluster_utils import Cluster

import computer

NODE = {"num_cpus": 2, "object_store_memory": 80 * 1024 * 1024, "node_ip_address": "127.0.0.1"}
SETTINGS = {
    "shell_pool_size": 1,
    "shell_pool_max": 4,
    "python_pool_size": 0,
    "pool_runs_per_cpu": 1.0,
    "pool_idle_after": 2.0,
    "pool_worker_memory": 64 * 1024 * 1024,
}


async def status() -> dict[str, Any]:
    scaler = ray.get_actor("computer:pools", namespace="computer")
    report: dict[str, Any] = (await scaler.status.remote())["pools"]["shell"]
    return report


def alive(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in report["workers"] if w["state"] in ("ready", "draining")]


async def until(check: Any, within: float) -> dict[str, Any]:
    """Poll the control loop's status until ``check(status)`` holds (bounded)."""
    deadline = time.monotonic() + within
    while True:
        report = await status()
        if check(report):
            return report
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {within} s: {json.dumps(report)[:3000]}")
        await asyncio.sleep(0.25)


async def burst(data_dir: str, out: dict[str, Any]) -> None:
    peak: dict[str, Any] = {"workers": 0, "nodes": set(), "queued": 0}

    async def watch() -> None:
        while True:
            try:
                report = await status()
            except ValueError:  # the control loop starts with the first workspace
                await asyncio.sleep(0.2)
                continue
            ready = [w for w in report["workers"] if w["state"] == "ready"]
            peak["workers"] = max(peak["workers"], len(ready))
            peak["nodes"] |= {w["node_id"] for w in ready}
            peak["queued"] = max(peak["queued"], report["queued"])
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())

    async with contextlib.AsyncExitStack() as stack:
        # One workspace per run (a workspace's later runs follow its live sandbox to one worker),
        # opened one after another first: only the runs come at once.
        spaces = [await stack.enter_async_context(computer.get_workspace(f"burst-{i}")) for i in range(12)]
        for ws in spaces:
            await ws.fs.mkdir("/workspace")
        handles = await asyncio.gather(
            *[ws.runtime.exec(f"sleep 2; echo {i} >> f") for i, ws in enumerate(spaces)]
        )
        results = await asyncio.gather(*[h.result() for h in handles])
        files = [await ws.fs.read_text("/workspace/f") for ws in spaces]
    watcher.cancel()
    report = await status()
    out["burst"] = {
        "statuses": [r.status for r in results],
        "errors": [r.error for r in results if r.error],
        "files_ok": files == [f"{i}\n" for i in range(12)],
        "peak_workers": peak["workers"],
        "peak_nodes": len(peak["nodes"]),
        "peak_queued": peak["queued"],
        "max": report["max"],
        "wait_p99": report["wait_p99"],
        "decisions": [d for _, d in report["decisions"]],
    }


async def shrink(out: dict[str, Any]) -> None:
    start = time.monotonic()
    report = await until(lambda r: len(r["workers"]) == 1, within=150)
    out["shrink"] = {"workers": len(report["workers"]), "seconds": time.monotonic() - start}


async def removal(data_dir: str, out: dict[str, Any]) -> None:
    # Four workspaces, one run each: runs of one workspace share its live sandbox on one worker (they
    # wait there for it), while runs of different workspaces spread over the pool. 15 s each: the
    # pool has one worker when they start, the three new ones take seconds to start on a busy machine
    # and the runs waiting for them are shed there: with 5 s the first run could end before the
    # last one started, and four never ran at once (the phase failed so at the base commit too).
    clients = [await computer.get_workspace(f"removal-{i}") for i in range(4)]
    try:
        for ws in clients:
            await ws.fs.mkdir("/workspace")
        handles = [
            await ws.runtime.exec(f"echo started; sleep 15; echo x >> h{i}") for i, ws in enumerate(clients)
        ]
        await until(lambda r: sum(w["running"] for w in r["workers"]) == 4, within=60)
        before = {w["name"] for w in alive(await status())}
        computer.init(data_dir=data_dir, **{**SETTINGS, "shell_pool_max": 2})
        # The control loop may mark the two it removes in successive rounds: wait for both.
        chosen = await until(lambda r: sum(w["state"] == "draining" for w in r["workers"]) >= 2, within=30)
        draining = [w["name"] for w in chosen["workers"] if w["state"] == "draining"]
        busy_when_chosen = [w["running"] for w in chosen["workers"] if w["state"] == "draining"]
        results = [await h.result() for h in handles]
        files = [await ws.fs.read_text(f"/workspace/h{i}") for i, ws in enumerate(clients)]
    finally:
        for ws in clients:
            await ws.close()
    after = await until(lambda r: not set(draining) & {w["name"] for w in r["workers"]}, within=150)
    out["removal"] = {
        "before": len(before),
        "draining": draining,
        "busy_when_chosen": busy_when_chosen,
        "statuses": [r.status for r in results],
        "errors": [r.error for r in results if r.error],
        "files": files,
        "left": [w["name"] for w in alive(after)],
    }


async def demand(data_dir: str, out: dict[str, Any]) -> None:
    from ray.autoscaler.v2 import sdk

    computer.init(data_dir=data_dir, **{**SETTINGS, "shell_pool_max": 8, "pool_worker_cpus": 1.0})
    gcs = ray.get_runtime_context().gcs_address
    seen: list[dict[str, float]] = []
    pending_seen = 0
    async with computer.get_workspace("demand") as ws:
        await ws.fs.mkdir("/workspace")
        handles = await asyncio.gather(*[ws.runtime.exec(f"sleep 6; echo {i} > d{i}") for i in range(10)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen:
            report = await status()
            pending_seen = max(pending_seen, sum(1 for w in report["workers"] if w["state"] == "pending"))
            cluster_status = sdk.get_cluster_status(gcs)
            for request in cluster_status.resource_demands.ray_task_actor_demand:
                for bundle in request.bundles_by_count:
                    if bundle.bundle.get("CPU", 0) >= 1:
                        seen.append(dict(bundle.bundle))
            await asyncio.sleep(0.5)
        results = await asyncio.gather(*[h.result() for h in handles])
    out["demand"] = {
        "pending_workers": pending_seen,
        "demands": seen[:4],
        "statuses": [r.status for r in results],
        "errors": [r.error for r in results if r.error],
    }


async def pinned(data_dir: str, out: dict[str, Any]) -> None:
    # A long idle time: the new worker must not be drained while the pinned runs find their way to it.
    computer.init(data_dir=data_dir, **{**SETTINGS, "shell_pool_max": 2, "pool_idle_after": 60.0})
    clients = [await computer.get_workspace(f"pinned-{i}") for i in range(2)]
    rounds: list[dict[str, Any]] = []
    statuses: list[str] = []
    try:
        for ws in clients:  # one after another: both live sandboxes on the pool's one worker
            await ws.fs.mkdir("/workspace")
            statuses.append((await (await ws.runtime.exec("true")).result()).status)
        start = alive(await status())
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            handles = [await ws.runtime.exec(f"sleep 2; echo {len(rounds)} >> f") for ws in clients]
            statuses += [(await h.result()).status for h in handles]
            report = await status()
            rounds.append({"workers": len(alive(report)), "moved": report["moved"]})
            if report["moved"] >= 1:
                break
        files = [await ws.fs.read_text("/workspace/f") for ws in clients]
    finally:
        for ws in clients:
            await ws.close()
    report = await status()
    out["pinned"] = {
        "workers_at_start": len(start),
        "rounds": rounds,
        "statuses": statuses,
        "files_ok": files == ["".join(f"{k}\n" for k in range(len(rounds)))] * 2,
        "decisions": [d for _, d in report["decisions"]],
    }


PHASES = {"burst": burst, "shrink": shrink, "removal": removal, "demand": demand, "pinned": pinned}


async def main(data_dir: str, phases: list[str]) -> dict[str, Any]:
    computer.init(data_dir=data_dir, **SETTINGS)
    out: dict[str, Any] = {"nodes": len([n for n in ray.nodes() if n["Alive"]])}
    for phase in [PHASES[p] for p in phases]:
        started = time.monotonic()
        try:
            await (phase(data_dir, out) if phase is not shrink else phase(out))  # type: ignore[call-arg,arg-type]
        except Exception as exc:
            out.setdefault("failed", {})[phase.__name__] = f"{type(exc).__name__}: {exc}"[:3000]
        out.setdefault("seconds", {})[phase.__name__] = round(time.monotonic() - started, 1)
    return out


if __name__ == "__main__":
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, _node_ip_address="127.0.0.1")
        report = asyncio.run(main(sys.argv[1], sys.argv[2:] or ["burst", "shrink", "removal", "demand"]))
        print(json.dumps(report, default=list), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
