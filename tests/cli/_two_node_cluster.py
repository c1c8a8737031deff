"""Run by the CLI tests in a subprocess: a two-node Ray cluster on loopback, kept up until stdin closes.

Prints the cluster address as its first stdout line. ``Cluster.shutdown`` then stops exactly the
processes this cluster started (never a broad ``ray stop``).
"""

from __future__ import annotations

import os
import sys

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.pop("RAY_ADDRESS", None)

from ray.cluster_utils import Cluster

if __name__ == "__main__":
    node_args = {"num_cpus": 2, "object_store_memory": 100 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    try:
        cluster.add_node(**node_args)
        cluster.wait_for_nodes()
        print(cluster.address, flush=True)
        sys.stdin.read()  # until the test session closes our stdin
    finally:
        cluster.shutdown()
