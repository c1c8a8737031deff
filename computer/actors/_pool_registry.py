"""Where pool workers live: deterministic names in the project namespace, get-or-create, replacement.

Worker ``i`` of backend ``b`` is the detached named actor ``computer:pool:<b>:<i>`` in the
``computer`` namespace, so every owner of the cluster finds (and shares) the same workers without a
registry actor; each owner keeps its own view of the loads it puts on them. Workers are spread across
nodes (node ``i mod n`` of the alive nodes). A dead worker's name becomes free, and the next
get-or-create makes a new one.
"""

from __future__ import annotations

import time
from typing import Any

from ._nodes import alive_nodes
from ._pool_worker import PoolWorker
from .naming import NAMESPACE
from .raycompat import actor_id

__all__ = ["WORKER_MAX_CONCURRENCY", "get_worker", "worker_name"]

# Runs of one worker proceed concurrently (each is mostly waiting on its process or the owner).
WORKER_MAX_CONCURRENCY = 256
# A crashed worker process is restarted by Ray (it holds only caches); ``ray.kill`` ends it for good.
WORKER_MAX_RESTARTS = 3

_remote_class: Any = None


def worker_name(backend: str, index: int) -> str:
    """The Ray actor name of worker ``index`` of ``backend``'s pool."""
    return f"computer:pool:{backend}:{index}"


def _worker_class() -> Any:
    global _remote_class
    if _remote_class is None:
        import ray

        _remote_class = ray.remote(PoolWorker)
    return _remote_class


def _spread(index: int) -> Any:
    """Worker ``index``'s placement: node ``index mod n`` of the alive nodes, in node id order.

    Ray's ``SPREAD`` is best effort and put all the workers of a pool on one node now and then, and
    so did a *soft* node affinity (seen in the two-node test). The affinity is hard: a worker whose
    node dies dies with it (Ray does not restart it elsewhere), and the dispatcher's replacement is
    placed among the nodes alive then.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(alive_nodes())
    if len(nodes) < 2:
        return "SPREAD"
    return NodeAffinitySchedulingStrategy(nodes[index % len(nodes)], soft=False)


def get_worker(backend: str, index: int, *, not_id: Any = None, wait: float = 10.0) -> Any:
    """Worker ``index`` of ``backend`` (an ``ActorHandle``), created when missing (blocking GCS calls).

    ``not_id`` is the actor id of a worker known to be dead: until the cluster has freed its name, the
    lookup may still return it, so this waits (up to ``wait`` seconds) for a different one.
    """
    import ray

    name = worker_name(backend, index)
    deadline = time.monotonic() + wait
    while True:
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            try:
                handle = (
                    _worker_class()
                    .options(
                        name=name,
                        namespace=NAMESPACE,
                        get_if_exists=True,
                        lifetime="detached",
                        max_concurrency=WORKER_MAX_CONCURRENCY,
                        max_restarts=WORKER_MAX_RESTARTS,
                        num_cpus=0,
                        scheduling_strategy=_spread(index),
                    )
                    .remote(backend, name)
                )
            except ValueError:  # lost a creation race to a name being freed: look again
                handle = None
        if handle is not None and (not_id is None or actor_id(handle) != not_id):
            return handle
        if time.monotonic() > deadline:
            raise RuntimeError(f"pool worker {name} could not be replaced within {wait:.0f} s")
        time.sleep(0.05)  # the cluster is still releasing the dead worker's name
