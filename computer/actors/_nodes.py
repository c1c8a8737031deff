"""Ray nodes and the machines they run on: a stable host identity that outlives Ray sessions.

A node id is new in every Ray session (a local restart, a whole-cluster restart), but a workspace
file on a node's local disk stays on that machine. The directory therefore records both the node id
and the host (``<hostname>/<ip>`` as Ray reports it), and placement falls back from a dead node id to
an alive node of the same host.
"""

from __future__ import annotations

from typing import Any

__all__ = ["alive_nodes", "current_host", "host_of"]


def host_of(node: dict[str, Any]) -> str:
    """The host identity of one ``ray.nodes()`` entry: ``<hostname>/<ip>``."""
    return f"{node.get('NodeManagerHostname') or ''}/{node.get('NodeManagerAddress') or ''}"


def alive_nodes() -> dict[str, str]:
    """Every alive node of the cluster: node id -> host identity."""
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return {str(n["NodeID"]): host_of(n) for n in nodes if n.get("Alive")}


def current_host(node_id: str) -> str | None:
    """The host identity of node ``node_id`` (this process's node), None outside Ray."""
    import ray

    if not ray.is_initialized():
        return None
    host = alive_nodes().get(node_id)
    if host is not None:
        return host
    # Not listed (yet): what Ray would report for this machine.
    import socket

    return f"{socket.gethostname()}/{ray.util.get_node_ip_address()}"  # type: ignore[no-untyped-call]
