"""Ray nodes and the machines they run on: a stable host identity that outlives Ray sessions, and the
one bounded way the library lists nodes and asks the GCS anything else (:func:`gcs_answer`: the
named actors' lookups and listing here, the key-value store and the actor table in ``raycompat``,
named actors' creation where they are made; ``computer/actors/README.md`` says per path what a caller
sees when the GCS is silent, and what stays unbounded).

A node id is new in every Ray session (a local restart, a whole-cluster restart), but a workspace
file on a node's local disk stays on that machine. The directory therefore records both the node id
and the host (``<hostname>/<ip>`` as Ray reports it), and placement falls back from a dead node id to
an alive node of the same host.

Listing nodes is bounded (:func:`listed_nodes`, :func:`gcs_answer`). ``ray.nodes()`` has no deadline:
with the cluster's GCS stopped (SIGSTOP) or wedged it waited forever (measured: > 100 s, no end; the
key-value store and the resources table the same), and so did every placement, directory or pool
control-loop call behind it. The call runs on a daemon thread and the caller waits
:data:`NODES_TIMEOUT` for it; past that it raises :class:`ClusterSilentError`, naming the cluster and
the wait. Ray cannot cancel the call: the thread stays until the GCS answers, and a caller meanwhile
waits for that same call rather than starting another (one per cluster and kind of call), so a silent
GCS costs one thread, not one per caller. What each caller does then (decided per caller):

- placement (``_placement``, ``_host_placement``: the alive nodes, a node's CPUs for its host count,
  a creation claim), ``_full_nodes.place_elsewhere`` and the head directory (``head_node_id``): the
  error propagates: an older answer could place a workspace on a dead node, judge a live node's
  claim dead (two files of one name) or pick the wrong directory;
- :func:`current_host` (an owner's own machine): what Ray would report for this machine, as when the
  node is not listed yet (the same ``<hostname>/<ip>``, read locally);
- ``_lease.ray_owner_gone``: False, "Ray cannot tell", as documented there;
- the pools' control loop (``_pool_scaler``): its last answer (settings and nodes change rarely, and
  its decisions are soft: a worker placed on a stale node's room is pending, not wrong), so it keeps
  polling its workers and owners keep a fresh view; a round without any answer yet fails, logged,
  and the next tries again.

Callers on an event loop wait in a thread (``asyncio.to_thread``, ``offload``); an owner's
constructor and a hosted workspace's opening wait on their own workspace's loop, as for every other
blocking call they make there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, wait
from typing import Any, TypeVar

__all__ = [
    "NODES_TIMEOUT",
    "ClusterSilentError",
    "alive_nodes",
    "current_host",
    "gcs_answer",
    "host_of",
    "listed_nodes",
    "named_actor",
    "named_actors",
]

T = TypeVar("T")

# Seconds a caller waits for the GCS to list the nodes (as the CLI's ``watch_cluster`` waits for it).
NODES_TIMEOUT = 20.0

# Calls of one cluster still unanswered past their caller's wait: beyond this many, a call of a new
# kind is not started (its thread would wait with them) and raises at once. A silent GCS costs at most
# this many threads, whatever the number of names asked about.
MAX_UNANSWERED = 16

_calls_lock = threading.Lock()
_calls: dict[tuple[str, Hashable], Future[Any]] = {}  # (cluster, share) -> the call under way
_overdue: set[tuple[str, Hashable]] = set()  # keys of _calls whose caller gave up waiting
_inside = threading.local()  # .call: this thread runs a call of gcs_answer


class ClusterSilentError(TimeoutError):
    """The Ray cluster's GCS did not answer a call within the wait (stopped, wedged, overloaded)."""

    def __init__(self, cluster: str, what: str, seconds: float, unanswered: int = 0) -> None:
        waited = (
            f"within {seconds:g} s"
            if not unanswered
            else f"(not asked: {unanswered} of its calls are unanswered past their {seconds:g} s)"
        )
        super().__init__(
            f"the Ray cluster at {cluster} did not {what} {waited}: its GCS does not answer "
            "(stopped, wedged or overloaded; `ray status` on its head tells more)"
        )
        self.cluster, self.what, self.seconds, self.unanswered = cluster, what, seconds, unanswered

    def __reduce__(self) -> tuple[type[ClusterSilentError], tuple[str, str, float, int]]:
        return (type(self), (self.cluster, self.what, self.seconds, self.unanswered))


def _cluster() -> str:
    import ray

    try:
        return str(ray.get_runtime_context().gcs_address)  # local: answered without the GCS
    except Exception:
        return "?"


def gcs_answer(
    call: Callable[[], T], what: str, timeout: float | None = None, *, share: Hashable | None = None
) -> T:
    """``call()`` (blocking calls of the GCS, ``what`` it does, e.g. "list its nodes") run on a daemon
    thread, waited for at most ``timeout`` (default :data:`NODES_TIMEOUT`) seconds:
    :class:`ClusterSilentError` past it. A caller that comes while the same call is under way for this
    cluster waits for that call instead of starting another (its answer, or its error, is this caller's
    too): the same ``share`` (default: ``what``; a write passes what it writes, so that only equal
    writes share). While :data:`MAX_UNANSWERED` calls of this cluster are unanswered past their wait, a
    call that would start a new thread raises :class:`ClusterSilentError` at once instead. Never call
    it on an event loop's thread: it blocks for up to ``timeout``. Called inside such a call (a bounded
    whole, e.g. the control loop's ``_cluster_state``), ``call()`` runs right there: the outer wait
    bounds it, and its error is the outer call's."""
    if getattr(_inside, "call", False):
        return call()
    seconds = NODES_TIMEOUT if timeout is None else timeout
    cluster = _cluster()
    key = (cluster, what if share is None else share)
    with _calls_lock:
        future = _calls.get(key)
        if future is None:
            unanswered = sum(1 for c, _ in _overdue if c == cluster)
            if unanswered >= MAX_UNANSWERED:
                raise ClusterSilentError(cluster, what, seconds, unanswered)
            future = _calls[key] = Future()
            threading.Thread(
                target=_answer, args=(call, key, future), name="computer-gcs-call", daemon=True
            ).start()
    if not wait([future], seconds).done:
        with _calls_lock:
            if _calls.get(key) is future:
                _overdue.add(key)
        raise ClusterSilentError(cluster, what, seconds)
    result: T = future.result()
    return result


def _answer(call: Callable[[], Any], key: tuple[str, Hashable], future: Future[Any]) -> None:
    _inside.call = True
    try:
        value = call()
    except BaseException as exc:  # the caller's error, raised where it waits
        _done(key)
        future.set_exception(exc)
        return
    _done(key)
    future.set_result(value)


def _done(key: tuple[str, Hashable]) -> None:
    with _calls_lock:
        _calls.pop(key, None)
        _overdue.discard(key)


def named_actor(name: str, namespace: str, timeout: float | None = None) -> Any:
    """``ray.get_actor(name, namespace=namespace)``, bounded (:func:`gcs_answer`, waited ``timeout``
    seconds, default :data:`NODES_TIMEOUT`; one call per name under way): ``ValueError`` when there is
    no such actor, as Ray says it (at once, the GCS answering); :class:`ClusterSilentError` past the
    wait (Ray's own wait is 60 s, then its ``GetTimeoutError``)."""
    import ray

    return gcs_answer(
        lambda: ray.get_actor(name, namespace=namespace),
        f"find its actor {name!r}",
        timeout,
        share=("get_actor", namespace, name),
    )


def named_actors(timeout: float | None = None) -> list[Any]:
    """``ray.util.list_named_actors(all_namespaces=True)``, bounded (:func:`gcs_answer`, waited
    ``timeout`` seconds, default :data:`NODES_TIMEOUT`; Ray's own wait is 60 s)."""
    import ray

    actors: list[Any] = gcs_answer(
        lambda: ray.util.list_named_actors(all_namespaces=True), "list its named actors", timeout
    )
    return actors


def listed_nodes(timeout: float | None = None) -> list[dict[str, Any]]:
    """``ray.nodes()`` (every node the GCS knows, alive or not), bounded: :func:`gcs_answer`."""
    import ray

    nodes: list[dict[str, Any]] = gcs_answer(ray.nodes, "list its nodes", timeout)
    return nodes


def host_of(node: dict[str, Any]) -> str:
    """The host identity of one ``ray.nodes()`` entry: ``<hostname>/<ip>``."""
    return f"{node.get('NodeManagerHostname') or ''}/{node.get('NodeManagerAddress') or ''}"


def alive_nodes() -> dict[str, str]:
    """Every alive node of the cluster: node id -> host identity (:class:`ClusterSilentError` when the
    GCS does not list them within :data:`NODES_TIMEOUT`)."""
    return {str(n["NodeID"]): host_of(n) for n in listed_nodes() if n.get("Alive")}


def current_host(node_id: str) -> str | None:
    """The host identity of node ``node_id`` (this process's node), None outside Ray. Not listed (yet),
    or the GCS silent: what Ray reports for this machine, read locally."""
    import ray

    if not ray.is_initialized():
        return None
    try:
        host = alive_nodes().get(node_id)
    except ClusterSilentError:
        host = None
    if host is not None:
        return host
    import socket

    return f"{socket.gethostname()}/{ray.util.get_node_ip_address()}"  # type: ignore[no-untyped-call]
