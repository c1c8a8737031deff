"""Run by test_owner_hosts.py in a subprocess: a two-node Ray cluster of its own, ``owners="hosted"``.

Owner hosts are named per node, so nothing like a dedicated owner's cluster-wide actor name stops
two first calls from two nodes from creating one new workspace on both: tasks pinned to each node
race to open the same new names; each name must end up with exactly one owner (one node, one owner
id, epoch 1, every write there). Prints ``OK`` on success; any failure exits non-zero.
"""

from __future__ import annotations

import asyncio
import os
import sys

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

import ray
from _cluster import run_on_two_nodes  # this script's folder is on sys.path
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import computer
from computer.actors import open_directory


@ray.remote(num_cpus=0)
def first_call(name: str, index: int) -> tuple[str | None, str, int]:
    async def go() -> tuple[str | None, str, int]:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file(f"/from-{index}", b"x")
            stats = await ws.handle.stats.remote()
            return ws._conn.owner_id, str(stats["node"]), int(stats["epoch"])

    return asyncio.run(go())


async def main(data_dir: str) -> None:
    # Both nodes run on this machine and see one data directory: what ``shared_data_dir`` is for
    # (without it, placement's probe finds the file on both nodes, which no real node-local disk does).
    conf = computer.init(
        data_dir=data_dir,
        owners="hosted",
        owner_hosts_per_node=1,
        shared_data_dir=True,
        shell_pool_size=0,
        python_pool_size=0,
    )
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    assert len(nodes) == 2, nodes
    for round_ in range(3):
        name = f"raced-{round_}"
        calls = [
            first_call.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nodes[i % 2], soft=False)
            ).remote(name, i)
            for i in range(6)
        ]
        results = await asyncio.gather(*calls)
        assert len({owner for owner, _, _ in results}) == 1, results
        assert len({node for _, node, _ in results}) == 1, results
        assert {epoch for _, _, epoch in results} == {1}, results
        async with computer.get_workspace(name) as ws:
            assert sorted(await ws.fs.ls("/")) == sorted(f"/from-{i}" for i in range(6))
        directory = open_directory(conf)
        try:
            record = directory.get(name)
        finally:
            directory.close()
        assert record is not None and record.epoch == 1, record
    print("OK")


if __name__ == "__main__":
    run_on_two_nodes(main, sys.argv[1])
