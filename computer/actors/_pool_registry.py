"""Where pool workers live: names in the project namespace, creation with real resources, lookup.

Worker ``i`` of backend ``b`` is the detached named actor ``computer:pool:<b>:<i>`` in the
``computer`` namespace. Only the pool's control loop (:mod:`~computer.actors._pool_scaler`) creates
and removes workers; it hands out new indices in increasing order, so a name is never reused while
dispatchers may still remember its dead worker. Owners learn the workers from the control loop's view
and look the handles up by name.

A pool's description (its backend's ``BackendInfo``) is published once in Ray's key-value store, so
that owners opening a workspace read it without an actor call (:func:`published_info`).

A worker reserves ``num_cpus`` and ``memory`` from Ray: a pool wanting more than the cluster has
leaves pending actors, which Ray's autoscaler reads as demand and answers with nodes from
``cluster.yaml``. The control loop chooses each new worker's node (spread over nodes, where CPUs are
free) and asks for it softly: a node that filled up meanwhile sends the worker elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from typing import Any

from ..runtime.types import BackendInfo
from ._pool_worker import PoolWorker
from .naming import NAMESPACE
from .raycompat import kv_get, kv_put

__all__ = [
    "PROBE_GROUP",
    "WORKER_MAX_CONCURRENCY",
    "WORKER_PREFIX",
    "create_worker",
    "named_workers",
    "publish_info",
    "published_info",
    "worker_handle",
    "worker_name",
]

# Runs of one worker proceed concurrently (each is mostly waiting on its process or the owner); how
# many actually run at once is the worker's admission target, the rest wait in its line.
WORKER_MAX_CONCURRENCY = 1024
# A crashed worker process is restarted by Ray (it holds only caches); ``ray.kill`` ends it for good.
WORKER_MAX_RESTARTS = 3
WORKER_PREFIX = "computer:pool:"
# The concurrency group of ``PoolWorker.probe``: its own thread and event loop, so a worker whose runs'
# loop is busy (a big pull) still answers at once, while a stopped (SIGSTOP) or wedged process does not.
PROBE_GROUP = "probe"
_NAME = re.compile(r"^computer:pool:([a-z0-9_]+):(\d+)$")

_remote_class: Any = None


def worker_name(backend: str, index: int) -> str:
    """The Ray actor name of worker ``index`` of ``backend``'s pool."""
    return f"{WORKER_PREFIX}{backend}:{index}"


def _worker_class() -> Any:
    global _remote_class
    if _remote_class is None:
        import ray

        _remote_class = ray.remote(concurrency_groups={PROBE_GROUP: 1})(PoolWorker)  # type: ignore[call-overload]
    return _remote_class


def create_worker(
    backend: str, index: int, *, cpus: float, memory: int, target: int, node_id: str | None
) -> Any:
    """Start worker ``index`` of ``backend`` reserving ``cpus`` and ``memory`` (bytes), on ``node_id``
    when it has room (soft affinity), else wherever Ray finds room (none: the actor waits, pending)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy: Any = (
        "SPREAD" if node_id is None else NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)
    )
    name = worker_name(backend, index)
    options: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "get_if_exists": True,
        "lifetime": "detached",
        "max_concurrency": WORKER_MAX_CONCURRENCY,
        "max_restarts": WORKER_MAX_RESTARTS,
        "num_cpus": cpus,
        "scheduling_strategy": strategy,
    }
    if memory > 0:
        options["memory"] = memory
    return _worker_class().options(**options).remote(backend, name, cpus, target)


def named_workers() -> dict[str, tuple[str, int]]:
    """Every live named pool worker of the cluster: name -> (backend, index) (a blocking GCS call)."""
    import ray

    found: dict[str, tuple[str, int]] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if not isinstance(entry, dict) or entry.get("namespace") != NAMESPACE:
            continue
        match = _NAME.match(str(entry.get("name", "")))
        if match:
            found[match.group(0)] = (match.group(1), int(match.group(2)))
    return found


def worker_handle(name: str) -> Any:
    """The handle of the named worker (a blocking GCS call); ``ValueError`` when there is none."""
    import ray

    return ray.get_actor(name, namespace=NAMESPACE)


def _info_key(backend: str) -> bytes:
    return f"computer:pool:info:{backend}".encode()


def published_info(backend: str) -> BackendInfo | None:
    """The description a pool published in the cluster's key-value store (a GCS read, no actor call).

    Owners read it when they open their workspace: blocking on an actor call there would stall the
    new owner's event loop (and Ray warns about it), so only the very first owner asks a worker.
    """
    try:
        raw = kv_get(_info_key(backend))
    except Exception:
        return None
    if not raw:
        return None
    fields = json.loads(raw)
    fields["commands"] = tuple(fields.get("commands", ()))
    fields["modules"] = tuple(fields.get("modules", ()))
    return BackendInfo(**fields)


def publish_info(info: BackendInfo) -> None:
    with contextlib.suppress(Exception):
        kv_put(_info_key(info.id), json.dumps(dataclasses.asdict(info)).encode())
