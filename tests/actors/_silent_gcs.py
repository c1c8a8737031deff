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


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
