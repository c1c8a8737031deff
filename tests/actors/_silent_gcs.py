"""Run by ``test_silent_gcs.py``: a driver of the test's own head asks the library's node listings
(``nodes``) or its other GCS calls on the user-facing paths (``paths``: opening a workspace, the
handle of one, deletion, a pool's handles, the dashboard) while the head's GCS is stopped (SIGSTOP),
each bounded by a short ``NODES_TIMEOUT``. One JSON line per call on stdout: what it answered or
raised. Usage: ``_silent_gcs.py ADDRESS MARKS [nodes|paths]``; the test stops the GCS once
``MARKS/joined`` exists and says so with ``MARKS/stopped``, continues it and says
``MARKS/continued``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ray

import computer.actors._nodes as _nodes
from computer.actors._host_placement import _node_cpus
from computer.actors._lease import ray_owner_gone
from computer.actors._pool_scaler import PoolScaler
from computer.actors.directory import WorkspaceRecord
from computer.actors.directory._head import head_node_id
from computer.config import Settings
from computer.dashboard import ClusterSource

WAIT = 2.0  # NODES_TIMEOUT here: seconds each listing may wait
BOUND = 60.0  # the test's own steps


def say(call: str, **fields: Any) -> None:
    print(json.dumps({"call": call, **fields}), flush=True)


def outcome(call: str, ask: Any) -> None:
    try:
        value = ask()
    except Exception as exc:
        say(call, raised=type(exc).__name__, message=str(exc))
    else:
        say(call, value=value)


def listing_threads() -> int:
    return sum(t.name == "computer-gcs-call" and t.is_alive() for t in threading.enumerate())


def wait_for(mark: Path) -> None:
    deadline = time.monotonic() + BOUND
    while not mark.exists():
        if time.monotonic() > deadline:
            os._exit(3)
        time.sleep(0.05)


def main(address: str, marks: Path, mode: str = "nodes") -> None:
    if mode == "paths":
        paths(address, marks)
        return
    if mode in ("work", "work dedicated"):
        work(address, marks, mode.removeprefix("work").strip() or "hosted")
        return
    ray.init(address=address, log_to_driver=False)
    _nodes.NODES_TIMEOUT = WAIT
    node = str(ray.get_runtime_context().get_node_id())
    scaler = SimpleNamespace(_last_state=None)  # a control loop's state (its class's own method runs)
    say("before", nodes=sorted(_nodes.alive_nodes()))
    outcome("scaler before", lambda: sorted(asyncio.run(PoolScaler._cluster_state(scaler))[1]))  # type: ignore[arg-type]
    (marks / "joined").touch()
    wait_for(marks / "stopped")

    outcome("alive_nodes", _nodes.alive_nodes)
    before = listing_threads()
    outcome("alive_nodes again", _nodes.alive_nodes)
    outcome("alive_nodes a third time", _nodes.alive_nodes)
    say("listing threads", before=before, after=listing_threads())
    outcome("head_node_id", head_node_id)
    outcome("node cpus", lambda: _node_cpus(node))
    outcome("current_host", lambda: _nodes.current_host(node))
    record = WorkspaceRecord(
        "w",
        node,
        f"computer:ws:x:w#{os.getpid()}/{uuid.uuid4().hex}",
        1,
        time.time() + 60,
        time.time(),
        "active",
    )
    outcome("ray_owner_gone", lambda: ray_owner_gone(record))
    outcome("scaler", lambda: sorted(asyncio.run(PoolScaler._cluster_state(scaler))[1]))  # type: ignore[arg-type]
    fresh = SimpleNamespace(_last_state=None)
    outcome("scaler first round", lambda: asyncio.run(PoolScaler._cluster_state(fresh)))  # type: ignore[arg-type]
    dashboard = ClusterSource(Settings(data_dir=marks / "data"))
    outcome("dashboard cluster", lambda: asyncio.run(dashboard.cluster()).get("silent"))
    say("stopped calls done")

    wait_for(marks / "continued")
    outcome("alive_nodes continued", lambda: sorted(_nodes.alive_nodes()))
    outcome("head_node_id continued", head_node_id)
    sys.stdout.flush()
    os._exit(0)  # Ray's own shutdown is not this test's subject


class Probe:
    """A named actor of the test: a handle for the calls that read the actor table."""

    def ping(self) -> int:
        return 1


def paths(address: str, marks: Path) -> None:
    from computer.actors import NAMESPACE, adopt, delete_workspace, managed_name, workspace_actor
    from computer.actors._host_placement import claim_new_node, host_handles
    from computer.actors._pool_registry import published_info, worker_handle
    from computer.actors._pool_scaler import get_scaler
    from computer.actors.naming import workspace_file
    from computer.actors.raycompat import actor_death_time
    from computer.client import get_workspace
    from computer.dashboard._source import _pool_control_status

    ray.init(address=address, log_to_driver=False)
    _nodes.NODES_TIMEOUT = WAIT
    node = str(ray.get_runtime_context().get_node_id())
    data = marks / "data"
    dedicated = Settings(data_dir=data, owners="dedicated")
    probe = ray.remote(num_cpus=0)(Probe).options(name="computer:ws:test:probe", namespace=NAMESPACE).remote()
    say("probe", value=ray.get(probe.ping.remote(), timeout=BOUND))
    # ``worker_handle``: a named actor's lookup (``ray.get_actor``), as the pools' dispatchers ask it.
    outcome("lookup missing before", lambda: worker_handle("computer:nobody"))
    outcome("head_node_id before", head_node_id)  # known from then on, as in a process that ran a while
    (marks / "joined").touch()
    wait_for(marks / "stopped")

    async def opened() -> Any:
        return await get_workspace("w")

    # This process never called computer.init: opening a name reads the cluster's published settings.
    outcome("get_workspace", lambda: asyncio.run(opened()))
    outcome("workspace_actor dedicated", lambda: workspace_actor("w", config=dedicated))
    outcome("managed_name", lambda: managed_name(probe, config=dedicated))
    outcome("actor_death_time", lambda: actor_death_time(probe))
    outcome("get_scaler", get_scaler)
    outcome("worker_handle", lambda: worker_handle("computer:pool:x:0"))
    outcome("published_info", lambda: published_info("x"))
    outcome("pool control status", lambda: asyncio.run(_pool_control_status()))
    outcome("host_handles", lambda: host_handles(dedicated))
    outcome("claim_new_node", lambda: claim_new_node(dedicated, "w", node, {node: "h"}))
    config = adopt(data_dir=data)  # as after computer.init: the settings are this process's
    workspace_file(config, "w").parent.mkdir(parents=True, exist_ok=True)
    workspace_file(config, "w").touch()  # a workspace to delete (its owner is asked first)
    outcome("delete_workspace", lambda: asyncio.run(delete_workspace("w")))
    # Calls left unanswered past their wait hold a thread each, until the GCS answers: past
    # MAX_UNANSWERED of them, a call of a new kind raises at once and starts none.
    before = listing_threads()
    _nodes.MAX_UNANSWERED = before  # the test's own ceiling
    for i in range(5):
        outcome(f"lookup new {i}", lambda i=i: worker_handle(f"computer:nobody:{i}"))
    say("unanswered threads", before=before, after=listing_threads())
    say("stopped calls done")

    wait_for(marks / "continued")
    deadline = time.monotonic() + BOUND
    while listing_threads() and time.monotonic() < deadline:
        time.sleep(0.05)  # the calls left waiting are answered now: bounded by the deadline
    say("threads continued", value=listing_threads())
    outcome("lookup missing continued", lambda: worker_handle("computer:nobody"))
    outcome("lookup continued", lambda: type(worker_handle("computer:ws:test:probe")).__name__)
    sys.stdout.flush()
    os._exit(0)


def work(address: str, marks: Path, owners: str) -> None:
    """A workspace's life with the GCS stopped: exec through a pool, writes, hibernation, the next call
    after it; then the GCS continued and every file read back (nothing lost, never recreated empty)."""
    import computer

    computer.init(
        address=address, data_dir=marks / "data", owners=owners, hibernate_after=2.0,
        shell_pool_size=1, shell_pool_max=1, python_pool_size=0, python_pool_max=0, pool_worker_cpus=0,
    )  # fmt: skip
    _nodes.NODES_TIMEOUT = WAIT

    async def run(ws: Any, command: str) -> Any:
        handle = await asyncio.wait_for(ws.runtime.exec(command, backend="shell"), BOUND)
        result = await asyncio.wait_for(handle.result(), BOUND)
        return [result.status, result.stdout.strip()]

    async def life() -> None:
        ws = await asyncio.wait_for(computer.get_workspace("w"), BOUND)
        await ws.fs.mkdir("/workspace", recursive=True)
        await ws.fs.write_file("/workspace/before", b"before")
        say("exec before", value=await run(ws, "echo ran > /workspace/ran-before; cat /workspace/before"))
        (marks / "joined").touch()
        await asyncio.to_thread(wait_for, marks / "stopped")

        async def step(call: str, ask: Any) -> None:
            try:
                value = await asyncio.wait_for(ask(), BOUND)
            except Exception as exc:
                say(call, raised=type(exc).__name__, message=str(exc))
            else:
                say(call, value=value)

        await step(
            "exec stopped", lambda: run(ws, "echo ran > /workspace/ran-stopped; cat /workspace/before")
        )
        await step("write stopped", lambda: ws.fs.write_file("/workspace/during", b"during"))
        await step("read stopped", lambda: ws.fs.read_text("/workspace/ran-stopped"))
        gone = False
        deadline = time.monotonic() + BOUND
        while not gone and time.monotonic() < deadline:  # its hibernation (2 s idle): bounded
            await asyncio.sleep(0.5)
            gone = not await asyncio.to_thread(_awake, ws)
        say("hibernated", value=gone)
        await asyncio.sleep(3.0)  # an idle host lingers min(hibernate_after, 5 s), then exits
        await step("read after hibernation", lambda: ws.fs.read_text("/workspace/during"))
        await step("exec after hibernation", lambda: run(ws, "cat /workspace/during"))
        say("stopped calls done")
        await asyncio.to_thread(wait_for, marks / "continued")
        names = ("before", "ran-before", "ran-stopped", "during")

        async def files() -> dict[str, str]:
            found = {}
            for n in names:
                path = f"/workspace/{n}"
                found[n] = await ws.fs.read_text(path) if await ws.fs.exists(path) else "<missing>"
            return found

        await step("files continued", files)
        await step("exec continued", lambda: run(ws, "ls /workspace"))
        fresh = await asyncio.wait_for(computer.get_workspace("w"), BOUND)
        await step("files of a new client", lambda: fresh.fs.ls("/workspace"))

    asyncio.run(life())
    sys.stdout.flush()
    os._exit(0)


def _awake(ws: Any) -> bool:
    """Whether the workspace's owner is awake (a dedicated owner: its process alive), asked of Ray
    without the GCS (an actor call); a host or owner that exited is not."""
    handle = ws.handle
    try:
        if hasattr(handle, "host"):
            stats = ray.get(handle.host.host_stats.remote(), timeout=10)
            return "w" in stats["workspaces"]
        ray.get(handle.__ray_ready__.remote(), timeout=10)
    except Exception:
        return False
    return True


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
