"""Ray clusters of their own for the scripts that tests run in a subprocess, both nodes on this machine.

- :func:`run_on_two_nodes` (``_two_nodes.py``, ``_hosted_two_nodes.py``): ``ray.cluster_utils.Cluster``,
  1 CPU a node, sharing this machine's disk.
- :func:`second_machine` (``_node_local.py``, ``_full_node.py``): a head (``ray start --head`` on
  loopback) and a second node started inside ``unshare --uts --mount`` with its own hostname and a
  private tmpfs over the data directory, as a second machine with its own disk would be. Both run in
  sessions of their own and are stopped by process group (never ``ray stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster


def run_on_two_nodes(main: Callable[[str], Coroutine[Any, Any, None]], data_dir: str) -> None:
    """Start the cluster, run ``main(data_dir)`` connected to it, and stop everything after."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        asyncio.run(main(data_dir))
    finally:
        ray.shutdown()
        cluster.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_RAY = str(Path(sys.executable).with_name("ray"))
_NODE = (
    "--block --num-cpus=2 --node-ip-address=127.0.0.1 --object-store-memory=80000000 --disable-usage-stats"
)


def _start_head(port: int, temp: Path) -> subprocess.Popen[bytes]:
    command = f"{_RAY} start --head --port={port} --temp-dir={temp} --include-dashboard=false {_NODE}"
    return subprocess.Popen(
        command.split(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _start_second_node(address: str, data: Path, *, hostname: str, disk: str) -> subprocess.Popen[bytes]:
    script = (
        f"hostname {hostname} && mount -t tmpfs -o size={disk} tmpfs {data} && "
        f"exec {_RAY} start --address={address} {_NODE}"
    )
    return subprocess.Popen(
        ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
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


class SecondMachine:
    """The two nodes of :func:`second_machine`: their node ids, and the second one's stop."""

    def __init__(self, head: str, second: str, proc: subprocess.Popen[bytes]) -> None:
        self.head = head
        self.second = second
        self._proc: subprocess.Popen[bytes] | None = proc

    def stop_second(self) -> None:
        """Stop the second node and wait (bounded) until Ray says it is dead."""
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None
        deadline = time.monotonic() + 120
        while any(n["Alive"] for n in ray.nodes() if n["NodeID"] == self.second):
            assert time.monotonic() < deadline, "the second node is still alive"
            time.sleep(0.5)

    def close(self) -> None:
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None


@contextlib.contextmanager
def second_machine(data: Path, temp: Path, *, hostname: str, disk: str) -> Iterator[SecondMachine]:
    """A head (its ``--temp-dir`` ``temp``) and a second node, ``hostname``, with a tmpfs of ``disk``
    over ``data`` (see the module docstring), this process connected to the head; stopped after."""
    address = f"127.0.0.1:{free_port()}"
    head_proc = _start_head(int(address.rsplit(":", 1)[1]), temp)
    nodes: SecondMachine | None = None
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
        second_proc = _start_second_node(address, data, hostname=hostname, disk=disk)
        nodes = SecondMachine(head, "", second_proc)
        while True:
            alive = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
            if alive:
                break
            assert time.monotonic() < deadline, "the second node did not join"
            time.sleep(0.2)
        nodes.second = str(alive[0])
        yield nodes
    finally:
        ray.shutdown()
        if nodes is not None:
            nodes.close()
        _stop(head_proc)
