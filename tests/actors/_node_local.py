"""Run by test_placement.py in a subprocess: a second node with its own, node-local data directory.

The cluster is ``_cluster.second_machine``: a head on loopback and a second node with its own hostname
and a private tmpfs over the data directory, as on a real second machine. Workspaces are created from a task on that node; then the directory forgets (Redis flushed)
or was never shared (the embedded directory), the owners die, and the head opens every workspace
again: each must come back with its bytes from the second node, never empty on the head. Then the second
node goes down (and Redis forgets again): each of its workspaces is ``WorkspaceUnavailableError``.
Prints ``OK`` on success; any failure exits non-zero with a traceback.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

import ray
import redis
from _cluster import free_port, second_machine  # this script's folder is on sys.path
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import computer
from computer.actors import NAMESPACE, WorkspaceUnavailableError, actor_name, open_directory

NAMES = [f"nl-{i}" for i in range(4)]


def create_on_second_node(names: list[str]) -> dict[str, str]:
    """Run as a task on the second node: create each workspace, write its name, report its node."""

    async def run() -> dict[str, str]:
        nodes = {}
        for name in names:
            async with computer.get_workspace(name) as ws:
                await ws.fs.write_file("/who", name)
                nodes[name] = (await ws.handle.stats.remote())["node"]
        return nodes

    return asyncio.run(run())


def kill_owners(names: list[str], config: computer.Settings) -> None:
    """Kill every owner process of ``names``: their dedicated actors, or every owner host of the data
    directory (``owners="hosted"``); wait until their names are free."""
    from computer.actors._hosts import host_handles, kill_hosts

    for name in names:
        try:
            ray.kill(ray.get_actor(actor_name(name, config), namespace=NAMESPACE))
        except ValueError:
            continue
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                ray.get_actor(actor_name(name, config), namespace=NAMESPACE)
            except ValueError:
                break
            time.sleep(0.05)
    kill_hosts(config)
    deadline = time.monotonic() + 20
    while host_handles(config) and time.monotonic() < deadline:
        time.sleep(0.05)  # bounded: Ray frees a killed actor's name asynchronously, with no event to await


async def scenario(data_dir: Path, second: str, *, redis_url: str | None) -> None:
    conf = computer.init(data_dir=data_dir, redis_url=redis_url)
    names = [f"{n}-{'redis' if redis_url else 'embedded'}" for n in NAMES]
    task = ray.remote(num_cpus=0)(create_on_second_node).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=second, soft=False)
    )
    placed = ray.get(task.remote(names), timeout=120)
    on_second = [n for n, node in placed.items() if node == second]
    assert on_second, f"no owner was placed on the second node: {placed}"
    if redis_url:
        redis.Redis.from_url(redis_url).flushall()  # the directory forgets every placement
    else:  # one embedded directory for the cluster: the head's file holds the second node's leases too
        directory = open_directory(conf)
        for name in on_second:
            record = directory.get(name)
            assert record is not None and record.node == second, (name, record)
        directory.close()
    kill_owners(names, conf)
    for name in names:
        async with computer.get_workspace(name) as ws:
            assert await ws.fs.read_text("/who") == name, name  # never a new, empty workspace
            await ws.fs.write_file("/again", b"1")
            node = (await ws.handle.stats.remote())["node"]
        assert node == placed[name], (name, node, placed[name])
    for name in on_second:  # no second, diverging file on the head
        assert not (conf.workspaces_dir / f"{name}.sqlite").exists(), name
    print(f"{'redis' if redis_url else 'embedded'}: {len(on_second)} of {len(names)} on the second node")
    await delete_from_the_head(conf, second, f"gone-{'redis' if redis_url else 'embedded'}")
    if redis_url:
        await delete_forgotten_from_the_head(conf, second, "gone-forgotten", redis_url)


def _holds(path: str) -> bool:
    return os.path.exists(path)


async def delete_from_the_head(conf: computer.Settings, second: str, name: str) -> None:
    """A workspace on the second node deleted from the head: its file there is removed (the deletion
    unlinked the head's path, said ``bytes=0``, and the next ``get_workspace`` served it whole)."""
    on_second = NodeAffinitySchedulingStrategy(node_id=second, soft=False)
    placed = ray.get(
        ray.remote(num_cpus=0)(create_on_second_node).options(scheduling_strategy=on_second).remote([name])
    )
    assert placed[name] == second, placed
    path = str(conf.workspaces_dir / f"{name}.sqlite")
    holds = ray.remote(num_cpus=0)(_holds).options(scheduling_strategy=on_second)
    assert ray.get(holds.remote(path))
    deleted = await computer.delete_workspace(name)
    assert deleted.owner_stopped and deleted.bytes > 0, deleted
    assert not ray.get(holds.remote(path))
    assert open_directory(conf).get(name) is None
    print(f"deleted {name} of the second node from the head")


async def delete_forgotten_from_the_head(
    conf: computer.Settings, second: str, name: str, redis_url: str
) -> None:
    """A sleeping workspace of the second node whose record Redis lost, deleted from the head: its file
    there is removed. Before, the deletion looked for the file on the head only and said ENOENT ("no such
    workspace"), and the next ``get_workspace`` served the whole workspace again."""
    on_second = NodeAffinitySchedulingStrategy(node_id=second, soft=False)
    placed = ray.get(
        ray.remote(num_cpus=0)(create_on_second_node).options(scheduling_strategy=on_second).remote([name])
    )
    assert placed[name] == second, placed
    kill_owners([name], conf)  # asleep: no owner writes its record back
    redis.Redis.from_url(redis_url).flushall()
    path = str(conf.workspaces_dir / f"{name}.sqlite")
    holds = ray.remote(num_cpus=0)(_holds).options(scheduling_strategy=on_second)
    assert ray.get(holds.remote(path))
    deleted = await computer.delete_workspace(name)
    assert deleted.bytes > 0, deleted
    assert not ray.get(holds.remote(path))
    print(f"deleted {name} of the second node, its record lost, from the head")


async def scenario_node_down(data_dir: Path, names: list[str], *, redis_url: str | None) -> None:
    """The second node is down and the directory forgot (Redis flushed) or still knows (embedded) its
    files: opening one of them is ``WorkspaceUnavailableError``, never a new, empty workspace here."""
    conf = computer.init(data_dir=data_dir, redis_url=redis_url)
    if redis_url:
        redis.Redis.from_url(redis_url).flushall()
    for name in names:
        try:
            async with computer.get_workspace(name) as ws:
                text = await ws.fs.read_text("/who")
        except WorkspaceUnavailableError as exc:
            assert "no alive Ray node" in str(exc), exc
        else:
            raise AssertionError(f"{name} opened with its node down (read {text!r})")
        assert not (conf.workspaces_dir / f"{name}.sqlite").exists(), name


def main(data: Path, temp: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = shutil.which("redis-server") or "redis-server"
    redis_proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with second_machine(data, temp, hostname="computer-second-node", disk="256m") as nodes:
            second = nodes.second
            asyncio.run(scenario(data / "embedded", second, redis_url=None))
            asyncio.run(scenario(data / "redis", second, redis_url=f"redis://127.0.0.1:{port}/0"))
            nodes.stop_second()
            for kind, url in (("embedded", None), ("redis", f"redis://127.0.0.1:{port}/0")):
                asyncio.run(scenario_node_down(data / kind, [f"{n}-{kind}" for n in NAMES], redis_url=url))
            print("node down: every workspace of it unavailable, none created empty")
            print("OK")
    finally:
        redis_proc.terminate()
        redis_proc.wait(timeout=10)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
