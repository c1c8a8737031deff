"""Run by the CLI tests in a subprocess: a two-node Ray cluster on loopback, kept up until stdin closes.

Prints the cluster address as its first stdout line. ``Cluster.shutdown`` then stops exactly the
processes this cluster started (never a broad ``ray stop``).
"""

from __future__ import annotations

import os
import select
import signal
import sys

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

from ray.cluster_utils import Cluster


def _wait_for_the_end() -> None:
    """Until stdin closes, our parent dies (we get re-parented) or SIGTERM; then shut down cleanly."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while os.getppid() == parent:
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if ready and not sys.stdin.readline():
            return


if __name__ == "__main__":
    # Loopback only: the tests never touch another interface.
    node_args = {"num_cpus": 2, "object_store_memory": 100 * 1024 * 1024, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    try:
        cluster.add_node(**node_args)
        cluster.wait_for_nodes()
        print(cluster.address, flush=True)
        _wait_for_the_end()
    finally:
        cluster.shutdown()
