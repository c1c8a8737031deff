"""Run by test_placement.py in a subprocess: a workspace survives a restart of a local Ray.

Session 1 starts a local Ray on a data directory and writes; Ray shuts down; session 2 starts a NEW
local Ray (new node ids) on the same data directory and reads the file back: the owner wakes on the
alive node of the recorded host, and the directory then records the new node. Prints ``OK``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

import ray

import computer
from computer.actors import open_directory
from computer.config import configure


def start_ray(temp_dir: str) -> str:
    ray.init(
        include_dashboard=False,
        num_cpus=1,
        object_store_memory=80 * 1024 * 1024,
        _temp_dir=temp_dir,
        log_to_driver=False,
    )
    return str(ray.get_runtime_context().get_node_id())


async def write(data_dir: str) -> None:
    computer.init(data_dir=data_dir)
    async with computer.get_workspace("kept") as ws:
        await ws.fs.write_file("/notes.txt", "written before the restart")


async def read(data_dir: str) -> tuple[str, dict[str, object]]:
    computer.init(data_dir=data_dir)
    async with computer.get_workspace("kept") as ws:
        return await ws.fs.read_text("/notes.txt"), await ws.handle.stats.remote()


def main(data_dir: str) -> None:
    temp_dir = tempfile.mkdtemp(prefix="rr-", dir="/tmp")  # Ray's socket paths must stay short
    try:
        first = start_ray(temp_dir)
        asyncio.run(write(data_dir))
        ray.shutdown()

        conf = configure(data_dir=data_dir)  # no Ray now: the next session starts below
        directory = open_directory(conf)
        before = directory.get("kept")
        assert before is not None and before.node == first and before.host, before

        second = start_ray(temp_dir)
        assert second != first
        text, stats = asyncio.run(read(data_dir))
        assert text == "written before the restart", text
        assert stats["node"] == second and stats["host"] == before.host, stats
        after = directory.get("kept")
        assert after is not None and after.node == second and after.host == before.host, after
        ray.shutdown()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    main(sys.argv[1])
