"""Where pool workers live: names in the project namespace, creation with real resources, lookup.

Worker ``i`` of backend ``b`` is the detached named actor ``computer:pool:<b>:<i>`` in the
``computer`` namespace. Only the pool's control loop (:mod:`~computer.actors._pool_scaler`) creates
and removes workers; it hands out new indices in increasing order, so a name is never reused while
dispatchers may still remember its dead worker. Owners learn the workers from the control loop's view
and look the handles up by name.

A pool's description (its backend's ``BackendInfo``) is published once in Ray's key-value store, so
that owners opening a workspace read it without an actor call (:func:`published_info`); the first
owner asks a ready worker for it: awaited on its loop where the owner opens from a coroutine (an
owner host: :func:`described_async`), blocking where the constructor is all there is (a dedicated
owner actor, a user's ``WorkspaceHost``: :func:`described`, the same coroutine run on a thread).

A worker reserves ``num_cpus`` and ``memory`` from Ray: a pool wanting more than the cluster has
leaves pending actors, which Ray's autoscaler reads as demand and answers with nodes from
``cluster.yaml``. The control loop chooses each new worker's node (spread over nodes, where CPUs are
free) and asks for it softly: a node that filled up meanwhile sends the worker elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..runtime import offload
from ..runtime.types import BackendInfo
from ._nodes import gcs_answer, named_actor, named_actors
from ._pool_worker import PoolWorker
from .naming import NAMESPACE
from .raycompat import kv_get, kv_put

if TYPE_CHECKING:
    from ._pool_scaler import PoolView

__all__ = [
    "INFO_RETRIES",
    "INFO_TIMEOUT",
    "PROBE_GROUP",
    "WORKER_MAX_CONCURRENCY",
    "WORKER_PREFIX",
    "create_worker",
    "described",
    "described_async",
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
INFO_TIMEOUT = 120.0  # seconds for a new pool's first worker to start and describe itself
INFO_RETRIES = 3  # workers that died as they were asked to describe the pool, before giving up
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
    remote = _worker_class().options(**options).remote
    # A named actor's creation waits for the GCS (Ray's own wait: 60 s): bounded.
    return gcs_answer(lambda: remote(backend, name, cpus, target), f"create its actor {name!r}")


def named_workers() -> dict[str, tuple[str, int]]:
    """Every live named pool worker of the cluster: name -> (backend, index) (a blocking GCS call,
    bounded: ``ClusterSilentError``)."""
    found: dict[str, tuple[str, int]] = {}
    for entry in named_actors():
        if not isinstance(entry, dict) or entry.get("namespace") != NAMESPACE:
            continue
        match = _NAME.match(str(entry.get("name", "")))
        if match:
            found[match.group(0)] = (match.group(1), int(match.group(2)))
    return found


def worker_handle(name: str) -> Any:
    """The handle of the named worker (a blocking GCS call, bounded: ``ClusterSilentError``);
    ``ValueError`` when there is none."""
    return named_actor(name, NAMESPACE)


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


def _first_ready(view: PoolView, backend: str) -> str:
    """The name of the first ready worker of ``view`` (the control loop waited for one)."""
    ready = [w for w in view.workers if not w.draining]
    if not ready:
        raise RuntimeError(f"no worker of the {backend} pool became ready within {INFO_TIMEOUT:g} s")
    return ready[0].name


def described(backend: str, scaler: Callable[[], Any]) -> BackendInfo:
    """:func:`described_async`, blocking, for a caller with no coroutine around it (``Runtime`` needs
    the description when the owner opens its workspace: a dedicated owner's constructor, a user's
    ``WorkspaceHost``): run to its end on a thread and an event loop of its own (the caller's thread
    may have a loop running: an async actor's). An owner opening from a coroutine awaits
    :func:`described_async` first instead (a blocking call on an async actor's loop stalls the loop,
    and Ray warns)."""
    info = published_info(backend)
    if info is not None:
        return info
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="computer-describe") as thread:
        return thread.submit(asyncio.run, described_async(backend, scaler)).result()


async def described_async(backend: str, scaler: Callable[[], Any]) -> BackendInfo:
    """The pool's description: the published one, else asked of a ready worker (waiting up to
    :data:`INFO_TIMEOUT` for one; ``scaler()``: the control loop's handle) and published, once per
    cluster. The caller's loop runs on while the pool's first worker starts; the handle look-ups
    (blocking GCS calls) run in a thread."""
    info = published_info(backend)
    if info is not None:
        return info
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + INFO_TIMEOUT
    control = await offload(None, scaler)  # a thread of its own: never the loop's pool, shared in a host
    for attempt in range(INFO_RETRIES + 1):
        view: PoolView = await asyncio.wait_for(
            control.view.remote(backend, 1, INFO_TIMEOUT), timeout=INFO_TIMEOUT + 10
        )
        name = _first_ready(view, backend)
        try:
            worker = await offload(None, worker_handle, name)
            info = await asyncio.wait_for(worker.info.remote(), timeout=max(1.0, deadline - time.monotonic()))
            break
        except (RayActorError, ValueError):  # a worker that just died: ask for another
            if attempt == INFO_RETRIES:
                raise
    assert isinstance(info, BackendInfo)
    publish_info(info)
    return info
