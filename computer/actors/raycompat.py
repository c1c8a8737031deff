"""Every Ray API outside Ray's public, stable surface that this project uses, in one place.

A Ray upgrade that moves or renames one of these breaks here and nowhere else:

- the GCS key-value store (``ray.experimental.internal_kv``), for cluster settings and published
  backend descriptions: readable without an actor call (an owner opening a workspace must not block
  its event loop on one);

  Every call here that asks the GCS is bounded (``_nodes.gcs_answer``): with the GCS silent, Ray's own
  calls wait forever (the key-value store, the actor table, the resources: > 150 s measured, no end),
  these raise ``ClusterSilentError`` after ``NODES_TIMEOUT`` (the actor table's readers answer "cannot
  be read", as documented for each);
- an actor handle's id (``handle._actor_id``): tells a restarted actor from the one that died;
- the GCS actor table (``ray._private.state``): when an actor died, so a client can tell a call sent
  to an already dead owner (it never ran) from one cut by the death (its outcome is unknown);
  whether the process holding a workspace's lease still lives (``delete_workspace``); and the Ray name
  of a dead owner's handle (``get_workspace(handle)`` wakes the workspace it named);
- a streaming generator's backpressure (``_generator_backpressure_num_objects``): bounds how far a
  producer may run ahead of its consumer;
- the resources still available on each node (``ray._private.state``): where the exec pools' control
  loop places a new worker;
- a ``@ray.remote`` class's own class and options (``__ray_metadata__``, ``_default_options``):
  ``computer.agent.spawn`` makes it again with the concurrency groups an agent needs, which
  ``.options()`` cannot add;
- the driver's printer of cluster messages (``ray._private.worker.print_to_stdstream``), which
  writes them to stdout with colour codes, in the middle of a command's own output.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

from ._nodes import gcs_answer

__all__ = [
    "actor_class_parts",
    "actor_id",
    "actor_process",
    "actor_ray_name",
    "actor_restarts",
    "available_per_node",
    "death_among",
    "kv_del",
    "kv_get",
    "kv_put",
    "kv_put_new",
    "process_incarnation",
    "process_worker",
    "quiet_driver_messages",
    "streaming",
    "worker_death_time",
]


def kv_get(key: bytes) -> bytes | None:
    """The value stored under ``key`` in the cluster's key-value store (None when absent)."""
    from ray.experimental import internal_kv

    value: bytes | None = gcs_answer(
        lambda: internal_kv._internal_kv_get(key), f"read {key!r} from its key-value store"
    )
    return value


def kv_put(key: bytes, value: bytes) -> None:
    """Store ``value`` under ``key`` (replacing it) in the cluster's key-value store."""
    from ray.experimental import internal_kv

    what = f"store {key!r} in its key-value store"
    gcs_answer(lambda: internal_kv._internal_kv_put(key, value, overwrite=True), what, share=(what, value))


def kv_put_new(key: bytes, value: bytes) -> bool:
    """Store ``value`` under ``key`` unless a value is there already; True when this call stored it.
    Atomic in the GCS: of several processes racing, exactly one stores its value."""
    from ray.experimental import internal_kv

    what = f"store a new {key!r} in its key-value store"
    # Callers storing different values never share one call: each must learn whether its value won.
    existed: bool = gcs_answer(
        lambda: internal_kv._internal_kv_put(key, value, overwrite=False), what, share=(what, value)
    )
    return not existed


def kv_del(key: bytes) -> None:
    """Remove ``key`` from the cluster's key-value store (nothing when absent)."""
    from ray.experimental import internal_kv

    gcs_answer(lambda: internal_kv._internal_kv_del(key), f"remove {key!r} from its key-value store")


def actor_id(handle: Any) -> Any:
    """The id of the actor behind ``handle`` (equal for two handles of the same actor incarnation)."""
    return handle._actor_id


def actor_death_time(handle: Any) -> float | None:
    """When the actor behind ``handle`` died for good (wall-clock seconds), None if it is not dead.

    An actor restarted in place is not dead; one killed without restart, or out of restarts, is.
    None as well when the table cannot be read (the caller must then assume the worst).
    """
    info = _actor_row(handle._actor_id.hex())
    if not info or info.get("State") != "DEAD" or not info.get("EndTime"):
        return None
    return float(info["EndTime"]) / 1000.0


def actor_process(actor: str) -> tuple[str, int] | None:
    """``(state, pid)`` of the actor with id ``actor`` (hex) in the GCS actor table: ``ALIVE``, ``DEAD``,
    ``RESTARTING``...; pid 0 when unknown. None when the table has no such actor or cannot be read."""
    info = _actor_row(actor)
    if not info or not info.get("State"):
        return None
    return str(info["State"]), int(info.get("Pid") or 0)


def actor_ray_name(handle: Any) -> str | None:
    """The Ray name the actor behind ``handle`` was created with (alive or dead), from the GCS actor
    table; None for an unnamed actor, or when the table cannot be read."""
    info = _actor_row(handle._actor_id.hex())
    return str(info["Name"]) if info and info.get("Name") else None


def actor_restarts(actor: str) -> int | None:
    """How many times Ray restarted the actor with id ``actor`` (hex) in place (the actor table's
    ``NumRestarts``); None when the table cannot be read or has no such actor."""
    info = _actor_row(actor)
    if not info or info.get("NumRestarts") is None:
        return None
    return int(info["NumRestarts"])


_incarnation: list[int | None] = []  # this process's, once known


def process_incarnation(*, blocking: bool = True) -> int | None:
    """Which life of its Ray actor this process is: 0 for the first, n after n restarts in place (the
    actor table's ``NumRestarts``, read once, only in a restarted process: a first life asks the GCS
    nothing); None outside an actor, or when the table could not be read (blocks up to
    ``NODES_TIMEOUT``, once per process: call it off an event loop); with ``blocking=False`` also
    None where the GCS would have to be asked."""
    if _incarnation:
        return _incarnation[0]
    import ray

    context = ray.get_runtime_context()
    actor = context.get_actor_id()
    if not actor:
        return None
    if context.was_current_actor_reconstructed and not blocking:
        return None
    known = 0 if not context.was_current_actor_reconstructed else actor_restarts(str(actor))
    _incarnation.append(known)  # unknown (the GCS silent) stays unknown: asked once per process
    return known


def process_worker() -> str | None:
    """This process's Ray worker id (hex), which names it in Ray's worker table; None outside Ray."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        return str(ray.get_runtime_context().get_worker_id()) or None
    except Exception:
        return None


def worker_death_time(pid: int, alive_at: float = 0.0, worker: str | None = None) -> float | None:
    """When the Ray worker process ``pid``, known alive at ``alive_at`` (wall-clock seconds), died,
    from the GCS worker table, which records a dead worker's end (the actor table does not, for an
    actor restarted in place). ``worker``: its Ray worker id (:func:`process_worker`), which picks its
    row among others of the same pid. None when the table cannot be read, or when no dead row is that
    process, or several may be (:func:`death_among`)."""
    try:
        from ray._private.state import state
        from ray.core.generated import gcs_pb2

        def read() -> list[bytes]:
            return list(state._connect_and_get_accessor().get_worker_table())

        rows = [
            gcs_pb2.WorkerTableData.FromString(raw)  # type: ignore[attr-defined]
            for raw in gcs_answer(read, "read its worker table")
        ]
    except Exception:
        return None
    return death_among(rows, pid, alive_at, worker)


def death_among(rows: Iterable[Any], pid: int, alive_at: float, worker: str | None) -> float | None:
    """The end (wall-clock seconds) of process ``pid``, known alive at ``alive_at``, among the worker
    table's ``rows`` (``WorkerTableData``). One pid can have several dead rows: a pid reused on a node
    (an earlier process), the same pid on several nodes, and one worker listed more than once. With
    ``worker`` (its Ray worker id, hex) only that worker's rows count, which is exact. Without it
    (an owner from before ``describe`` said its worker), rows of the same worker are one process, and
    a row that ended before ``alive_at`` or started after it (1 s either side for clocks apart) is
    another process. None unless exactly one process is left. Before, several dead rows of the pid
    gave None, and the client could not tell a call sent after the death from one that may have run
    ("unknown outcome")."""
    ends: dict[bytes, float] = {}
    for row in rows:
        if row.pid != pid or row.is_alive or not row.end_time_ms:
            continue
        wid = bytes(row.worker_address.worker_id)
        if worker is not None:
            if wid.hex() != worker:
                continue
        elif row.end_time_ms < (alive_at - 1.0) * 1000 or (
            alive_at and row.start_time_ms and row.start_time_ms > (alive_at + 1.0) * 1000
        ):
            continue
        ends[wid] = max(ends.get(wid, 0.0), float(row.end_time_ms))
    return next(iter(ends.values())) / 1000.0 if len(ends) == 1 else None


def _actor_row(actor: str) -> dict[str, Any] | None:
    """The GCS actor table's row of the actor with id ``actor`` (hex): empty when it has none, None
    when the table cannot be read (the GCS silent: after ``NODES_TIMEOUT``)."""
    try:
        from ray._private.state import state

        info: dict[str, Any] = gcs_answer(lambda: state.actor_table(actor), f"read actor {actor}'s row")
    except Exception:
        return None
    return info


def streaming(method: Any, ahead: int, group: str | None = None) -> Any:
    """``method`` (an actor method of a streaming generator) with at most ``ahead`` items in flight,
    on the actor's concurrency group ``group`` when given (one ``options`` call: its result has none)."""
    if group is not None:
        return method.options(_generator_backpressure_num_objects=ahead, concurrency_group=group)
    return method.options(_generator_backpressure_num_objects=ahead)


def available_per_node() -> dict[str, dict[str, float]]:
    """Node id -> resources not reserved now (a resource fully taken is absent), one GCS call (bounded:
    ``ClusterSilentError``)."""
    from ray._private.state import available_resources_per_node

    per_node = gcs_answer(available_resources_per_node, "give its available resources")
    return {str(node): dict(res) for node, res in per_node.items()}


# Advice for Ray's developers, not a failure of the user's work: "N PYTHON worker processes have been
# started on node ... (12x the maximum expected startup concurrency)", printed whenever many actors
# start at once (the demo opens one owner per agent).
_NOISE = (re.compile(r"worker processes have been started on node"),)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def quiet_driver_messages() -> None:
    """Route the messages Ray's raylet and GCS send to this driver (a worker died, out of memory...)
    to stderr as plain ``ray: <message>`` lines, without colour codes, dropping known noise.

    Ray prints them from a background thread of every driver to stdout, so they land inside a
    command's tables and JSON. Worker output (``log_to_driver``) is untouched. Idempotent.
    """
    from ray._private import worker

    original = worker.print_to_stdstream
    if getattr(original, "_computer_quiet", False):
        return

    def print_quietly(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":  # worker output, when a driver asked for it
            original(data, ignore_prefix)
            return
        for line in data.get("lines", ()):
            text = _ANSI.sub("", str(line)).strip()
            if text and not any(noise.search(text) for noise in _NOISE):
                print(f"ray: {text}", file=sys.stderr, flush=True)

    print_quietly._computer_quiet = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_quietly


def actor_class_parts(actor_class: Any) -> tuple[type, dict[str, Any]]:
    """The class ``@ray.remote`` decorated into ``actor_class`` and the options it was given."""
    cls: type = actor_class.__ray_metadata__.modified_class.__ray_actor_class__
    return cls, dict(actor_class._default_options)
