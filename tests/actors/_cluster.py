"""A two-node Ray cluster of its own for the scripts that tests run in a subprocess
(``_two_nodes.py``, ``_hosted_two_nodes.py``): both nodes on this machine, 1 CPU each."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
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
