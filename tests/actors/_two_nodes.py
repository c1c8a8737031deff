"""Run by test_placement.py in a subprocess: a two-node Ray cluster of its own.

Each owner must come up on the node the directory says holds its file, also after hibernating.
Prints ``OK`` on success; any failure exits non-zero with a traceback.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

import ray
from _cluster import run_on_two_nodes  # this script's folder is on sys.path

import computer
from computer.actors import Directory, open_directory
from computer.actors.naming import workspace_file
from computer.storage import FileSystem


def hibernated(directory: Directory, name: str) -> bool:
    """The owner left (either owner model: a dedicated actor exits, a hosted workspace leaves its host)."""
    record = directory.get(name)
    return record is not None and record.state == "hibernating"


async def main(data_dir: str) -> None:
    conf = computer.init(data_dir=data_dir, hibernate_after=1.0)
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    assert len(nodes) == 2, nodes
    directory = open_directory(conf)
    for node in nodes:
        name = f"placed-{node[:8]}"
        # The directory says this workspace's file lives on `node` (as after an earlier life there, which
        # made the file: an owner refuses a known name whose file is missing, never opens it empty).
        path = workspace_file(conf, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        FileSystem.open(str(path)).close()
        epoch = directory.acquire_lease(name, node, "earlier-owner", 30.0)
        assert directory.release_lease(name, "earlier-owner", epoch, hibernating=True)
        handle = computer.workspace_actor(name)
        stats = await handle.stats.remote()
        assert stats["node"] == node, (stats["node"], node)
        async with computer.get_workspace(handle) as ws:
            await ws.fs.write_file("/f", node)
        deadline = time.monotonic() + 20
        while not hibernated(directory, name):
            assert time.monotonic() < deadline, "owner did not hibernate"
            await asyncio.sleep(0.05)
        record = directory.get(name)
        assert record is not None and record.state == "hibernating" and record.node == node
        async with computer.get_workspace(name) as ws:
            assert await ws.fs.read_text("/f") == node
            stats = await ws.handle.stats.remote()
            assert stats["node"] == node and stats["epoch"] == epoch + 2
    print("OK")


if __name__ == "__main__":
    run_on_two_nodes(main, sys.argv[1])
