"""Run by test_placement.py in a subprocess: a new workspace refused by a full node goes to one with room.

The cluster is ``_cluster.second_machine``: the head's data directory on the machine's disk (the
embedded directory lives there), the second node's a small private tmpfs of its own, as a second
machine with its own disk would be. A task on the second node makes a workspace there and fills that node's disk;
a task there then asks for new names: each is created on the head. Before, a failed creation kept
its claim on the full node (every later attempt, from the head too, went back there), and once it
was dropped the full node's own callers still placed the name on their node, ENOSPC for good; now
the refusing owner marks its node and its caller places the name again, and later new names skip
the node (``computer/actors/_full_nodes.py``). Hosted owners first, then dedicated ones. The workspace that exists on the full node still opens there with its bytes,
never made anew on the head. Prints ``OK`` on success; any failure exits non-zero with a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

import ray
from _cluster import second_machine  # this script's folder is on sys.path
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import computer
from computer.actors.naming import data_dir_key
from computer.actors.raycompat import kv_del

DISK = "16m"


def fill_the_full_node(data: str) -> str:
    """Run as a task on the second node: make ``kept`` there and fill the disk; the node of ``kept``."""

    async def kept() -> str:
        async with computer.get_workspace("kept") as ws:
            await ws.fs.write_file("/who", "kept")
            return str((await ws.handle.stats.remote())["node"])

    node = asyncio.run(kept())
    # Unbuffered: a buffered file's 1 MiB write that the disk took all but its last page of kept
    # that page in its buffer, and the ``with``'s close flushed it: ENOSPC out of this task (the
    # script exited 1 once, when the free space happened to end a page short of a whole MiB).
    with open(os.path.join(data, "filler"), "ab", buffering=0) as filler:
        for _ in range(64):  # the tmpfs holds 16 MiB
            try:
                filler.write(b"\0" * (1 << 20))  # a short write when the disk is nearly full
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    return node


def new_from_the_full_node(names: list[str]) -> list[tuple[int | None, str | None]]:
    """Run as a task on the second node (full): open each new workspace of ``names`` and write to it.
    Each: (the errno it was refused with, None) or (None, the node it is on)."""

    async def attempt(name: str) -> tuple[int | None, str | None]:
        try:
            async with computer.get_workspace(name) as ws:
                await ws.fs.write_file("/f", f"{name} from the full node")
                return None, str((await ws.handle.stats.remote())["node"])
        except OSError as exc:
            return exc.errno, None

    return [asyncio.run(attempt(name)) for name in names]


def _exists(path: str) -> bool:
    return os.path.exists(path)


def made_on_the_head(conf: computer.Settings, second: str, head: str, names: list[str]) -> None:
    """New names asked for on the full node are created on the head: the first refused there
    (ENOSPC: the owner marks its node, and the caller is told to place it again, "moved" from a host,
    a dedicated owner's start failure), the next placed on the head at once (the mark). Before, the
    first failed with ENOSPC and so did every retry from the full node: it placed them there again."""
    there = NodeAffinitySchedulingStrategy(node_id=second, soft=False)
    task = ray.remote(num_cpus=0)(new_from_the_full_node).options(scheduling_strategy=there)
    placed = ray.get(task.remote(names), timeout=120)
    assert placed == [(None, head)] * len(names), (placed, head)
    exists = ray.remote(num_cpus=0)(_exists).options(scheduling_strategy=there)
    workspaces = conf.workspaces_dir
    for name in names:
        assert not ray.get(exists.remote(str(workspaces / f"{name}.sqlite")))
        assert (workspaces / f"{name}.sqlite").exists()
    print(f"{', '.join(names)}: asked for on the full node, created on the head")


async def scenario(data: Path, second: str) -> None:
    conf = computer.init(data_dir=data, owners="hosted", shell_pool_max=0, python_pool_max=0)
    head = str(ray.get_runtime_context().get_node_id())
    there = NodeAffinitySchedulingStrategy(node_id=second, soft=False)
    task = ray.remote(num_cpus=0)(fill_the_full_node).options(scheduling_strategy=there)
    kept_node = ray.get(task.remote(str(data)), timeout=120)
    assert kept_node == second, (kept_node, second)
    made_on_the_head(conf, second, head, ["unborn", "unborn-2"])
    async with computer.get_workspace("unborn") as ws:  # from the head: it is on the head
        assert await ws.fs.read_text("/f") == "unborn from the full node"
        await ws.fs.write_file("/f", "made on the head")
        assert await ws.fs.read_text("/f") == "made on the head"
        assert (await ws.handle.stats.remote())["node"] == head
    async with computer.get_workspace("kept") as ws:  # it exists on the full node: it opens there
        assert await ws.fs.read_text("/who") == "kept"
        assert (await ws.handle.stats.remote())["node"] == second
    assert not (conf.workspaces_dir / "kept.sqlite").exists()  # never made anew on the head
    print("the head holds it; the full node's own workspace still opens there")
    a_marked_node_creates_nothing(conf, second)
    # The full node's mark forgotten: the claim rule alone answers "moved" below, and the dedicated
    # owners start afresh.
    kv_del(f"computer:full:{data_dir_key(conf.data_dir)}:{second}".encode())
    await claimed_by_the_head(conf, head, second)
    conf = computer.init(data_dir=data, owners="dedicated", shell_pool_max=0, python_pool_max=0)
    made_on_the_head(conf, second, head, ["dedicated", "dedicated-2"])


def host_holding_kept(conf: computer.Settings, second: str) -> object:
    """The second node's host that holds ``kept`` open (it stays up: ``hibernate_after`` is 300 s).
    Not any host of the node: one left with no workspace (the one that refused ``unborn``) exits
    after lingering 5 s, and a call sent to it then died with it (ActorDiedError, seen under load)."""
    from computer.actors._hosts import host_handles

    for name, host in sorted(host_handles(conf).items()):
        if f":{second[:12]}:" not in name:
            continue
        try:
            if "kept" in ray.get(host.host_stats.remote(), timeout=60)["workspaces"]:
                return host
        except ray.exceptions.RayActorError:
            continue  # exited meanwhile
    raise AssertionError(f"no host of {second} holds kept: {sorted(host_handles(conf))}")


def a_marked_node_creates_nothing(conf: computer.Settings, second: str) -> None:
    """A caller that placed a new name on the full node under its claim (made before the node's
    refusal marked it) reaches the full node's host: refused there for lack of space, the host drops
    the claim and, the head having room, answers "moved" (the caller places it again), not ENOSPC."""
    from computer.actors.raycompat import kv_get, kv_put

    key = f"computer:new:{data_dir_key(conf.data_dir)}:stale".encode()
    kv_put(key, second.encode())
    reply = ray.get(host_holding_kept(conf, second).ws_call.remote("stale", "stats"), timeout=60)
    assert reply[0] == "moved", reply
    assert kv_get(key) is None
    print("a host on the full node refused a name it claimed: moved, its claim dropped")


async def claimed_by_the_head(conf: computer.Settings, head: str, second: str) -> None:
    """A caller that placed a new name on the second node before the head claimed it (a claim read
    before a failed creation there dropped it) reaches the second node's host: the host answers
    "moved" and creates nothing; placed again, the name is created on the head."""
    from computer.actors.raycompat import kv_put

    name = "claimed"
    kv_put(f"computer:new:{data_dir_key(conf.data_dir)}:{name}".encode(), head.encode())
    reply = ray.get(host_holding_kept(conf, second).ws_call.remote(name, "stats"), timeout=60)
    assert reply[0] == "moved", reply
    there = NodeAffinitySchedulingStrategy(node_id=second, soft=False)
    exists = ray.remote(num_cpus=0)(_exists).options(scheduling_strategy=there)
    assert not ray.get(exists.remote(str(conf.workspaces_dir / f"{name}.sqlite")))
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", "on the head")
        assert (await ws.handle.stats.remote())["node"] == head
    print("a host asked to create a name the head claimed answered moved")


def main(data: Path, temp: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    with second_machine(data, temp, hostname="computer-full-node", disk=DISK) as nodes:
        asyncio.run(scenario(data, nodes.second))
        print("OK")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
