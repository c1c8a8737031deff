"""Run by test_placement.py in a subprocess: a second node with its own, node-local data directory.

The head is ``ray start --head`` on loopback; the second node is ``ray start`` inside ``unshare --uts
--mount`` with its own hostname and a private tmpfs over the data directory, as on a real second
machine. Both run in sessions of their own and are stopped by process group (never ``ray stop``). Workspaces are created from a task on that node; then the directory forgets (Redis flushed)
or was never shared (the embedded directory), the owners die, and the head opens every workspace
again: each must come back with its bytes from the second node, never empty on the head. Then the second
node goes down (and Redis forgets again): each of its workspaces is ``WorkspaceUnavailableError``.
Prints ``OK`` on success; any failure exits non-zero with a traceback.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

import ray
import redis
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import computer
from computer.actors import NAMESPACE, WorkspaceUnavailableError, actor_name, open_directory

NAMES = [f"nl-{i}" for i in range(4)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_RAY = str(Path(sys.executable).with_name("ray"))
_NODE = (
    "--block --num-cpus=2 --node-ip-address=127.0.0.1 --object-store-memory=80000000 --disable-usage-stats"
)


def start_head(port: int, temp: Path) -> subprocess.Popen[bytes]:
    command = f"{_RAY} start --head --port={port} --temp-dir={temp} --include-dashboard=false {_NODE}"
    return subprocess.Popen(
        command.split(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def start_second_node(address: str, data: Path) -> subprocess.Popen[bytes]:
    script = (
        f"hostname computer-second-node && mount -t tmpfs -o size=256m tmpfs {data} && "
        f"exec {_RAY} start --address={address} {_NODE}"
    )
    return subprocess.Popen(
        ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a ``ray start --block`` and everything it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


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
    port = _free_port()
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
    gcs_port = _free_port()
    address = f"127.0.0.1:{gcs_port}"
    head_proc = start_head(gcs_port, temp)
    second_proc: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                ray.init(address=address, log_to_driver=False, _node_ip_address="127.0.0.1")
                break
            except (ConnectionError, RuntimeError):
                assert time.monotonic() < deadline, "the head did not start"
                time.sleep(0.5)
        head = str(ray.get_runtime_context().get_node_id())
        second_proc = start_second_node(address, data)
        while True:
            alive = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
            if alive:
                break
            assert time.monotonic() < deadline, "the second node did not join"
            time.sleep(0.2)
        second = str(alive[0])
        asyncio.run(scenario(data / "embedded", second, redis_url=None))
        asyncio.run(scenario(data / "redis", second, redis_url=f"redis://127.0.0.1:{port}/0"))
        stop(second_proc)
        second_proc = None
        deadline = time.monotonic() + 120
        while any(n["Alive"] for n in ray.nodes() if n["NodeID"] == second):
            assert time.monotonic() < deadline, "the second node is still alive"
            time.sleep(0.5)
        for kind, url in (("embedded", None), ("redis", f"redis://127.0.0.1:{port}/0")):
            asyncio.run(scenario_node_down(data / kind, [f"{n}-{kind}" for n in NAMES], redis_url=url))
        print("node down: every workspace of it unavailable, none created empty")
        print("OK")
    finally:
        ray.shutdown()
        if second_proc is not None:
            stop(second_proc)
        stop(head_proc)
        redis_proc.terminate()
        redis_proc.wait(timeout=10)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
