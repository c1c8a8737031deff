"""Where a hosted workspace lives (``owners="hosted"``, issue 20): the handle clients hold and placement.

A client holds a :class:`HostedHandle` (what :func:`~computer.actors.workspace_actor` returns in this
model): its attributes are the owner's RPC methods with ``.remote(*args)`` and ``.options(...)``,
sent to the owner host as ``ws_call(name, method, *args)`` (``ws_stream`` for the streaming ones).
:func:`hosted_owner` finds (or creates) the host of a name: the node placement chooses for a
dedicated owner, then the name's stable hash among that node's hosts, so every process agrees
without asking anyone. The host itself (:class:`~computer.actors._hosts.OwnerHost`) is in
``_hosts.py``; this module imports it only when it creates one.
"""

from __future__ import annotations

import inspect
import time
from functools import partial
from typing import Any

from ..config import Settings
from ._errors import WorkspaceUnavailableError
from ._owner import (
    CONTROL_GROUP,
    CONTROL_SLOTS,
    GROUP_NAMES,
    PROBE_GROUP,
    STREAM_GROUP,
    WAIT_GROUP,
    OwnerActor,
)
from .naming import HOST_PREFIX, NAMESPACE, data_dir_key, host_actor_name, host_index
from .raycompat import kv_get, kv_put_new

__all__ = [
    "HOST_MAX_CONCURRENCY",
    "HOST_MAX_RESTARTS",
    "HOST_STREAM_SLOTS",
    "HOST_WAIT_SLOTS",
    "METHODS",
    "STREAM_METHODS",
    "ClaimedElsewhere",
    "HostedHandle",
    "HostedMethod",
    "claim_new_node",
    "claim_to_create",
    "forget_claim",
    "host_handles",
    "hosted_owner",
    "hosts_per_node",
    "kill_hosts",
    "release_unborn_claim",
]

# Lock waits and exec streams park calls inside a host, for every workspace it owns.
HOST_MAX_CONCURRENCY = 100_000
# Slots of its wait group (``_owner.WAIT_GROUP``: lock requests, runs' results, tools that wait), apart.
HOST_WAIT_SLOTS = 100_000
# Slots of its stream group (``_owner.STREAM_GROUP``: file streams, which wait for their readers).
HOST_STREAM_SLOTS = 100_000
# A crashing host is restarted a few times (its workspaces reopen on their next call), then left dead.
HOST_MAX_RESTARTS = 3
# The owner RPC methods a host dispatches (public coroutine methods of a managed owner), and those of
# them that stream (async generators).
METHODS = frozenset(
    n
    for n, f in inspect.getmembers(OwnerActor)
    if not n.startswith("_") and (inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f))
)
STREAM_METHODS = frozenset(n for n in METHODS if inspect.isasyncgenfunction(getattr(OwnerActor, n)))

# -- the handle clients hold ------------------------------------------------------------------------


class HostedMethod:
    """One owner RPC method of a hosted workspace: ``.remote(*args)`` and ``.options(**ray_options)``."""

    def __init__(self, host: Any, name: str, method: str, options: dict[str, Any] | None = None) -> None:
        self._host = host
        self._name = name
        self._method = method
        self._options = options or {}

    def options(self, **options: Any) -> HostedMethod:
        return HostedMethod(self._host, self._name, self._method, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        target = self._host.ws_stream if self._method in STREAM_METHODS else self._host.ws_call
        if self._options:
            target = target.options(**self._options)
        return target.remote(self._name, self._method, *args, **kwargs)


class HostedHandle:
    """The owner of workspace ``name`` inside the owner host ``host`` (an ``ActorHandle``); picklable.

    ``handle.<method>.remote(*args)`` calls the workspace's owner RPC ``method``, as on the handle of a
    dedicated owner actor. ``_actor_id`` is the host's: the process the recovery rules reason about.
    """

    def __init__(self, host: Any, name: str, host_name: str) -> None:
        self._host = host
        self._name = name
        self._host_name = host_name

    @property
    def host(self) -> Any:
        """The owner host's ``ActorHandle`` (``ray.kill(handle.host)`` kills every workspace it owns)."""
        return self._host

    @property
    def name(self) -> str:
        return self._name

    @property
    def host_name(self) -> str:
        return self._host_name

    @property
    def _actor_id(self) -> Any:
        return self._host._actor_id

    def __getattr__(self, method: str) -> HostedMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return HostedMethod(self._host, self._name, method)

    def __repr__(self) -> str:
        return f"HostedHandle({self._name!r} on {self._host_name})"


# -- placement --------------------------------------------------------------------------------------

_remote_class: Any = None
_hosts_of: dict[tuple[str, str], int] = {}  # (data dir key, node) -> hosts of that node (fixed)


def _host_class() -> Any:
    global _remote_class
    if _remote_class is None:
        import ray

        from ._hosts import OwnerHost

        # A probe of a host whose 100,000 slots wait (lock requests...) must not wait with them, nor a
        # lock holder's release, nor (once the calls that wait have their own group) an ordinary call
        # (``tests/reliability/test_saturated_owner.py``).
        groups = {
            PROBE_GROUP: 1,
            CONTROL_GROUP: CONTROL_SLOTS,
            WAIT_GROUP: HOST_WAIT_SLOTS,
            STREAM_GROUP: HOST_STREAM_SLOTS,
        }
        _remote_class = ray.remote(concurrency_groups=groups)(OwnerHost)  # type: ignore[call-overload]
    return _remote_class


def _node_cpus(node: str) -> int:
    """The CPUs of ``node`` (1 when unknown); ``ClusterSilentError`` when the GCS does not list the
    nodes in time (no older answer: the count is stored for the whole cluster)."""
    from ._nodes import listed_nodes

    for info in listed_nodes():
        if info.get("NodeID") == node:
            return max(1, int(info.get("Resources", {}).get("CPU", 1)))
    return 1


def hosts_per_node(config: Settings, node: str) -> int:
    """How many owner hosts ``node`` has for ``config``'s data directory (decided once per session)."""
    key = (data_dir_key(config.data_dir), node)
    known = _hosts_of.get(key)
    if known is not None:
        return known
    wanted = config.owner_hosts_per_node or _node_cpus(node)
    kv_key = f"computer:hosts:{key[0]}:{node}".encode()
    if kv_put_new(kv_key, str(wanted).encode()):
        count = wanted
    else:
        raw = kv_get(kv_key)
        count = int(raw) if raw else wanted
    _hosts_of[key] = count
    return count


def _owner_node(config: Settings, name: str) -> str:
    """The node a hosted owner of ``name`` goes to: where placement puts a dedicated one."""
    import ray

    from ._placement import _scheduling

    strategy = _scheduling(config, name)
    if strategy is not None:
        return str(strategy.node_id)
    here = str(ray.get_runtime_context().get_node_id())
    if config.shared_data_dir:
        # Any node may open the file: the one whose owner holds the lease, else the name's claimant
        # (racing first calls from two nodes must agree), else the caller's.
        from ._nodes import alive_nodes
        from ._placement import directory_record

        record = directory_record(config, name)
        alive = alive_nodes()
        if record is not None and record.node in alive and record.lease_live():
            return record.node
        if len(alive) > 1:
            return claim_new_node(config, name, here, alive)
    return here


def hosted_owner(name: str, config: Settings) -> HostedHandle:
    """The :class:`HostedHandle` of workspace ``name``: its node's host for the name, created if needed."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ._nodes import gcs_answer, named_actor

    node = _owner_node(config, name)
    host_name = host_actor_name(config, node, host_index(name, hosts_per_node(config, node)))
    try:
        return HostedHandle(named_actor(host_name, NAMESPACE), name, host_name)
    except ValueError:
        pass
    deadline = time.monotonic() + 30.0
    while True:
        try:
            remote = (
                _host_class()
                .options(
                    name=host_name,
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    lifetime="detached",
                    max_restarts=HOST_MAX_RESTARTS,
                    max_concurrency=HOST_MAX_CONCURRENCY,
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
                )
                .remote
            )
            settings = config.model_dump(mode="json")
            # A named actor's creation waits for the GCS (Ray's own wait: 60 s): bounded.
            host = gcs_answer(
                partial(remote, settings, host_name, **GROUP_NAMES), f"create its actor {host_name!r}"
            )
            return HostedHandle(host, name, host_name)
        except ValueError:
            # Another process registered the name between our lookup and our creation.
            try:
                return HostedHandle(named_actor(host_name, NAMESPACE), name, host_name)
            except ValueError:
                if time.monotonic() > deadline:
                    raise WorkspaceUnavailableError(name, "could not create its owner host") from None
                time.sleep(0.05)  # an exiting host still holds the name: back off, then retry


def host_handles(config: Settings) -> dict[str, Any]:
    """Every live owner host of ``config``'s data directory in the cluster: Ray name -> handle
    (blocking; ``ClusterSilentError`` when the GCS does not answer within ``NODES_TIMEOUT``)."""
    from ._nodes import named_actor, named_actors

    prefix = f"{HOST_PREFIX}{data_dir_key(config.data_dir)}:"
    found: dict[str, Any] = {}
    for actor in named_actors():
        name = str(actor.get("name", "")) if isinstance(actor, dict) else str(actor)
        if name.startswith(prefix):
            try:
                found[name] = named_actor(name, NAMESPACE)
            except ValueError:
                continue  # exited meanwhile
    return found


def _claim_key(config: Settings, name: str) -> bytes:
    return f"computer:new:{data_dir_key(config.data_dir)}:{name}".encode("utf-8", "surrogatepass")


def claim_new_node(config: Settings, name: str, here: str, alive: dict[str, str]) -> str:
    """The node a new workspace ``name`` is created on when no node holds its file: the first
    claimant's (this caller's node unless another process claimed the name first, on a node still
    alive). Dedicated owners need no claim: their actor name is unique in the cluster; hosts are
    named per node, so two callers on two nodes would otherwise each create the workspace."""
    from .raycompat import kv_put

    key = _claim_key(config, name)
    if kv_put_new(key, here.encode()):
        return here
    raw = kv_get(key)
    claimed = raw.decode() if raw else None
    if claimed in alive:
        return str(claimed)
    kv_put(key, here.encode())  # the claimant's node is gone: its claim made nothing that lives
    return here


def forget_claim(config: Settings, name: str) -> None:
    """Drop the creation claim of ``name`` (its workspace was deleted: a new one goes anywhere)."""
    from .raycompat import kv_del

    kv_del(_claim_key(config, name))


class ClaimedElsewhere(WorkspaceUnavailableError):
    """A host was asked to create a new name whose creation another alive node claimed (its caller
    placed it before that claim was made): the host answers "moved", and the caller places it again."""


def claim_to_create(config: Settings, directory: Any, name: str, node: str) -> None:
    """Before an owner host on ``node`` opens ``name``: when that creates it (no file here, no record
    in ``directory``), make the name's creation claim this node's, or raise :class:`ClaimedElsewhere`
    when another alive node holds it. A caller that read this node's claim before a failed creation
    here dropped it (:func:`release_unborn_claim`) still comes here; it must not create the workspace
    while another node's caller, placing it anew, creates it there: two files of one name."""
    from .naming import workspace_file

    if workspace_file(config, name).exists() or directory.get(name) is not None:
        return  # not a creation: its file or its record says where it lives
    key = _claim_key(config, name)
    if kv_put_new(key, node.encode()):
        return
    raw = kv_get(key)
    if raw is not None and raw.decode() == node:
        return
    from ._nodes import alive_nodes

    claimed = claim_new_node(config, name, node, alive_nodes())
    if claimed != node:
        raise ClaimedElsewhere(name, f"node {claimed[:12]} claimed its creation: place it again")


def release_unborn_claim(config: Settings, directory: Any, name: str, node: str) -> bool:
    """After an owner on ``node`` failed to open ``name``: drop the name's creation claim when it
    names ``node`` and the failure left no workspace (no file here: a failed creation removes what
    it made, see ``_lease._forget_unborn``; no record in ``directory``). Before, a new name whose
    creation failed on a full node kept its claim there, and every later attempt, from any node, was
    sent back to that node and failed, while another node had room. A workspace with a file or a
    record keeps its claim (placement finds it by them anyway): it is never made anew elsewhere.
    True when the claim was dropped."""
    from .naming import workspace_file

    if workspace_file(config, name).exists() or directory.get(name) is not None:
        return False
    raw = kv_get(_claim_key(config, name))
    if raw is None or raw.decode() != node:
        return False  # no claim, or another node's (only the claimant's node knows its creation failed)
    forget_claim(config, name)
    return True


def kill_hosts(config: Settings | None = None) -> int:
    """Kill every owner host of ``config``'s data directory (default: the cluster's settings), as
    tests do after each test; their workspaces reopen on the next call. The number killed."""
    import ray

    from ._init import cluster_settings

    killed = 0
    for handle in host_handles(config or cluster_settings()).values():
        ray.kill(handle, no_restart=True)
        killed += 1
    return killed
