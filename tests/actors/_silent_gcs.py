"""Run by ``test_silent_gcs.py``: a driver of the test's own head asks the library's node listings while
the head's GCS is stopped (SIGSTOP), each bounded by a short ``NODES_TIMEOUT``. One JSON line per call
on stdout: what it answered or raised. Usage: ``_silent_gcs.py ADDRESS MARKS``; the test stops the GCS
once ``MARKS/joined`` exists and says so with ``MARKS/stopped``, continues it and says
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


def main(address: str, marks: Path) -> None:
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


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
