"""Scaling: many runs on a small pool, and a pool spread over a two-node cluster."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

from child_json import child_report

import computer
from computer.config import Settings

from .pool_helpers import worker_stats


async def test_eight_concurrent_runs_on_a_pool_of_two_all_complete(cluster: Settings, name: str) -> None:
    assert cluster.shell_pool_size == 2
    before = {s["name"]: s["runs"] for s in await worker_stats("shell")}
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        handles = await asyncio.gather(
            *[ws.runtime.exec(f"sleep 0.5; echo {i} > f{i}; echo {i}") for i in range(8)]
        )
        results = await asyncio.gather(*[h.result() for h in handles])
        assert [(r.status, r.stdout) for r in results] == [("completed", f"{i}\n") for i in range(8)]
        for i in range(8):
            assert await ws.fs.read_text(f"/workspace/f{i}") == f"{i}\n"
    after = {s["name"]: s["runs"] for s in await worker_stats("shell")}
    took = {worker: runs - before.get(worker, 0) for worker, runs in after.items()}
    assert sum(took.values()) == 8
    assert len([n for n in took.values() if n]) >= 2, took  # least-loaded dispatch used several workers


_TWO_NODES = textwrap.dedent(
    """
    import asyncio, json, os, sys
    import ray
    from ray.cluster_utils import Cluster

    import computer

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "object_store_memory": 80 * 1024 * 1024},
    )
    cluster.add_node(num_cpus=2, object_store_memory=80 * 1024 * 1024)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    # One run at a time per worker: 8 runs fill the owner's node (its workers are preferred) and spill over.
    computer.init(data_dir=sys.argv[1], shell_pool_size=4, shell_pool_max=4, python_pool_size=1, pool_runs_per_cpu=1)

    async def main():
        # Eight workspaces, a run each: one workspace's runs share its live sandbox, pinned to one
        # worker (issue 18), so the spread is across workspaces.
        spaces = [await computer.get_workspace(f"spread-{i}") for i in range(8)]
        for ws in spaces:
            await ws.fs.mkdir("/workspace")
        handles = await asyncio.gather(
            *[ws.runtime.exec(f"sleep 0.5; echo {i} > f{i}") for i, ws in enumerate(spaces)]
        )
        results = await asyncio.gather(*[h.result() for h in handles])
        files = [await ws.fs.read_text(f"/workspace/f{i}") for i, ws in enumerate(spaces)]
        for ws in spaces:
            await ws.close()
        stats = []
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["name"].startswith("computer:pool:shell:"):
                handle = ray.get_actor(entry["name"], namespace="computer")
                stats.append(await handle.stats.remote())
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        print(json.dumps({
            "statuses": [r.status for r in results],
            "files": files,
            "nodes": nodes,
            "ran_on": [s["node_id"] for s in stats if s["runs"] > 0],
        }))

    asyncio.run(main())
    ray.shutdown()
    cluster.shutdown()
    """
)


def test_runs_spread_across_the_nodes_of_a_two_node_cluster(tmp_path: Path) -> None:
    script = tmp_path / "two_nodes.py"
    script.write_text(_TWO_NODES)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    report = child_report(
        [sys.executable, str(script), str(tmp_path / "data")], env=env, timeout=240, cwd=tmp_path
    )
    assert report["statuses"] == ["completed"] * 8
    assert report["files"] == [f"{i}\n" for i in range(8)]
    assert len(report["nodes"]) == 2, report
    assert set(report["ran_on"]) == set(report["nodes"]), report
