"""``workspace_actor``: find or create the owner actor of a workspace, on the node holding its file.

Placement never invents an empty workspace. With a directory record, the owner wakes on the recorded
node (or an alive node of the recorded host); a file on no alive node is ``WorkspaceUnavailableError``.
Without a record (a new name, a Redis that restarted empty, a record lost, a Redis unreachable for
``DIRECTORY_WAIT``: ``_placement_record``), every alive node is asked
whether it holds the file before anything is created: the owner goes to the node that has it (the
highest stored epoch when several do), and only a name whose file no node holds is created new (on the
caller's node, unless that node just refused a creation for lack of space and another has room:
``_full_nodes.py``). A node
that does not answer makes the call ``WorkspaceUnavailableError`` rather than a guess. When the record
is lost *and* no alive node holds the file (its node down, its data directory not mounted), the file
registry kept on the head node beside a Redis directory (``directory/_registry.py``) still knows the
file's machine: ``WorkspaceUnavailableError`` (``refuse_a_registered_file``).
"""

from __future__ import annotations

import logging
import time
import unicodedata
from functools import partial
from typing import Any

from ..config import Settings
from ._errors import WorkspaceUnavailableError
from ._full_nodes import node_for_new
from ._init import cluster_settings, ensure_ray
from ._nodes import alive_nodes, gcs_answer, named_actor
from ._owner import (
    CONTROL_GROUP,
    CONTROL_SLOTS,
    GROUP_NAMES,
    PROBE_GROUP,
    STREAM_GROUP,
    STREAM_SLOTS,
    WAIT_GROUP,
    WAIT_SLOTS,
    OwnerActor,
)
from .directory import (
    DELETING,
    RedisDirectory,
    WorkspaceRecord,
    deleted_before,
    last_known_file,
    open_directory,
    refuse_while_deleting,
    registry_used,
)
from .naming import (
    HOST_PREFIX,
    NAMESPACE,
    OWNER_PREFIX,
    actor_name,
    check_name,
    check_new_name,
    data_dir_key,
    workspace_file,
)
from .raycompat import actor_ray_name

log = logging.getLogger(__name__)

__all__ = [
    "OWNER_MAX_CONCURRENCY",
    "OWNER_MAX_RESTARTS",
    "managed_name",
    "nodes_holding",
    "refuse_a_registered_file",
    "workspace_actor",
]

# Lock waits and exec streams park calls inside the owner: they must never starve other calls.
OWNER_MAX_CONCURRENCY = 1000
# A crashing owner is restarted a few times (it re-opens its file with a new epoch), then left dead
# so a crash loop surfaces; the next workspace_actor() call creates a fresh one anyway.
OWNER_MAX_RESTARTS = 3

_PROBE_TIMEOUT = 20.0  # seconds every alive node has to say whether it holds a workspace file
DIRECTORY_WAIT = 2.0  # seconds placement waits for an unreachable Redis before it asks the nodes

_remote_class: Any = None
_probe_task: Any = None


def _stored_epoch_here(path: str) -> int | None:
    """Run on one node: the file's stored epoch when the file exists there, else None."""
    import os

    from ..storage import FileSystem

    if not os.path.exists(path):
        return None
    return FileSystem.stored_epoch(path)


def nodes_holding(config: Settings, name: str, alive: dict[str, str]) -> dict[str, int]:
    """Ask every node of ``alive`` whether it holds the file of ``name``: node id -> stored epoch."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    global _probe_task
    if _probe_task is None:
        _probe_task = ray.remote(num_cpus=0, max_retries=0)(_stored_epoch_here)
    path = str(workspace_file(config, name))
    refs = {
        node: _probe_task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        ).remote(path)
        for node in alive
    }
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=_PROBE_TIMEOUT)
    answered = {ref.hex() for ref in ready}
    holding: dict[str, int] = {}
    silent: list[str] = []
    for node, ref in refs.items():
        if ref.hex() not in answered:
            silent.append(node)
            ray.cancel(ref, force=True)
            continue
        try:
            epoch = ray.get(ref)
        except Exception:  # the node died while answering
            silent.append(node)
            continue
        if epoch is not None:
            holding[node] = int(epoch)
    if silent:
        raise WorkspaceUnavailableError(
            name, f"node(s) {', '.join(n[:12] for n in silent)} did not say whether they hold its file"
        )
    return holding


def _owner_class() -> Any:
    global _remote_class
    if _remote_class is None:
        import ray

        groups = {
            PROBE_GROUP: 1,
            CONTROL_GROUP: CONTROL_SLOTS,
            WAIT_GROUP: WAIT_SLOTS,
            STREAM_GROUP: STREAM_SLOTS,
        }
        _remote_class = ray.remote(concurrency_groups=groups)(OwnerActor)  # type: ignore[call-overload]
    return _remote_class


def directory_record(config: Settings, name: str) -> WorkspaceRecord | None:
    """The directory's record of ``name`` now (one read; the directory is opened and closed)."""
    directory = open_directory(config)
    try:
        return directory.get(name)
    finally:
        directory.close()


def _placement_record(config: Settings, name: str) -> WorkspaceRecord | None:
    """The record placement goes by: :func:`directory_record`, except that a Redis directory (with the
    head's file registry beside it) unreachable for ``DIRECTORY_WAIT`` is answered None, as a record
    lost: placement then asks the nodes and the registry (safe, see the module docstring), and a
    workspace open in a live owner host is reached while Redis is down, as a live dedicated owner is by
    its actor name. An owner that has to open the file still needs the directory for its lease (its
    own wait, then ``WorkspaceUnavailableError``), so nothing is opened or created without it. Before,
    every new client and every re-resolve of a hosted workspace failed after 30 s though its owner
    served its other clients (``tests/reliability/test_cluster_faults4.py``)."""
    if not registry_used(config):
        return directory_record(config, name)
    assert config.redis_url is not None
    directory = RedisDirectory(config.redis_url, retry_for=DIRECTORY_WAIT)
    try:
        return directory.get(name)
    except WorkspaceUnavailableError as exc:
        log.warning("placing workspace %s without the directory: %s", name, exc)
        return None
    finally:
        directory.close()


def _scheduling(config: Settings, name: str, deletion: str | None = None) -> Any:
    """Pin the owner to the node holding its file, unless the data directory is shared.

    The recorded node when it is alive; else (a new Ray session: new node ids) an alive node of the
    recorded host, since the file is on that machine (the new owner's lease then records its node);
    else ``WorkspaceUnavailableError``. ``deletion``: the lease owner of the deletion asking (its own
    "deleting" record is no refusal to it: where the file is, it asks every node).
    """
    if config.shared_data_dir:
        return None
    record = _placement_record(config, name)
    deleting = record is not None and record.node == DELETING  # the file's registry note is void then
    if record is not None and deleting:
        # EBUSY while a deletion runs; one that died midway (its lease ran out) left a record naming no
        # node: where the file is, if anywhere, is asked of every node as for a name without a record.
        if deletion is None or record.owner != deletion:
            refuse_while_deleting(name, record.node, record.lease_expires, "", time.time())
        record = None
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = alive_nodes()
    if record is not None and not _reachable(record, alive) and deleted_before(config, record):
        record = None  # from before the name's deletion (a Redis restored from an older dump): new again
    if record is None or not record.node:
        if len(alive) <= 1 and workspace_file(config, name).exists():
            return None  # one node: its file is here
        holding = nodes_holding(config, name, alive) if len(alive) > 1 else {}
        if not holding:
            if not deleting:
                refuse_a_registered_file(config, name, alive)
            if len(alive) <= 1:
                return None  # a new workspace on the one node
            # On no node: a new workspace, created on the caller's node (its file is written there),
            # not wherever Ray's scheduler likes: a worker on node B making workspaces gets them on B.
            # A node that just refused a creation for lack of space is skipped while another has room.
            here = node_for_new(config, name, ray.get_runtime_context().get_node_id(), alive)
            if config.owners == "hosted":  # no actor name settles a race of nodes there: a claim does
                from ._host_placement import claim_new_node

                here = claim_new_node(config, name, here, alive)
            return NodeAffinitySchedulingStrategy(node_id=here, soft=here not in alive)
        if len(holding) > 1:
            log.warning("workspace %s has a file on %d nodes: the highest epoch wins", name, len(holding))
        node = max(holding, key=lambda n: (holding[n], n))
        return NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    if record.node in alive:
        return NodeAffinitySchedulingStrategy(node_id=record.node, soft=False)
    if record.host is not None:
        same_host = sorted(node for node, host in alive.items() if host == record.host)
        if same_host:
            return NodeAffinitySchedulingStrategy(node_id=same_host[0], soft=False)
        where = f"host {record.host} (node {record.node})"
    else:
        # A record from before hosts were recorded: a file still on this machine wakes up here.
        if workspace_file(config, name).exists():
            here = ray.get_runtime_context().get_node_id()
            return NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        where = f"node {record.node}"
    raise WorkspaceUnavailableError(
        name, f"its file is on {where}, which has no alive Ray node (set shared_data_dir if shared)"
    )


def _reachable(record: WorkspaceRecord, alive: dict[str, str]) -> bool:
    """Whether ``record``'s node, or an alive node of its machine, is up (the tombstone is read only
    when not: placement's error path costs no registry read on the way to an alive node, where the
    owner reads it itself if the file is missing, ``_lease.owner_file``)."""
    return record.node in alive or (record.host is not None and record.host in alive.values())


def refuse_a_registered_file(config: Settings, name: str, alive: dict[str, str]) -> None:
    """No record and no alive node holds the file: unless the file registry (Redis directories, see
    ``directory/_registry.py``) knows a file of ``name`` (an owner opened it, no deletion removed it),
    the name is new. A file it knows is ``WorkspaceUnavailableError``, on a machine with no alive node
    as on one that is up without it (its data directory not mounted, not mounted yet): as for a record
    whose file is missing (``_lease.owner_file``), never a new empty workspace under the old name.
    Before, an alive machine without the file was taken for a file removed by hand, and a workspace
    was made anew, empty; the old file, mounted again, was then a second copy with the higher epoch.
    ``delete_workspace(name, force=True)`` forgets a file lost for good (the registry's note with it)."""
    known = last_known_file(config, name)
    if known is None:
        return
    node, host = known
    if node in alive or host in alive.values():
        state = "which is up but does not have it (its data directory not mounted?)"
    else:
        state = "which has no alive Ray node"
    raise WorkspaceUnavailableError(
        name,
        f"the directory has no record of it and its file was last on host {host} (node {node[:12]}), "
        f"{state}; an owner never opens it as a new empty workspace "
        "(delete_workspace(name, force=True) forgets a workspace whose file is lost for good)",
    )


def workspace_actor(name: str, *, config: Settings | dict[str, Any] | None = None) -> Any:
    """The owner actor of workspace ``name`` (a Ray ``ActorHandle``), created on first use; with
    ``owners="hosted"``, a :class:`~computer.actors._hosts.HostedHandle` of its owner host instead.

    Exactly one per name in the cluster, even when many processes race: Ray named actors with
    ``get_if_exists`` settle the race, and a lost creation race is retried by lookup. A new owner gets
    ``config`` (default: the settings of this process, see :func:`cluster_settings`).
    """
    check_name(name)
    ensure_ray()
    if isinstance(config, dict):
        config = Settings(**config)
    elif config is None:
        config = cluster_settings()
    if not unicodedata.is_normalized("NFC", name):  # only then is anything looked up (naming.py)
        check_new_name(
            name, workspace_file(config, name).exists() or directory_record(config, name) is not None
        )
    if config.owners == "hosted":  # many workspaces per owner host (issue 20)
        from ._host_placement import hosted_owner

        return hosted_owner(name, config)
    ray_name = actor_name(name, config)  # scoped by the data directory
    try:
        return named_actor(ray_name, NAMESPACE)
    except ValueError:
        pass
    deadline = time.monotonic() + 30.0
    while True:
        options: dict[str, Any] = {
            "name": ray_name,
            "namespace": NAMESPACE,
            "get_if_exists": True,
            "lifetime": "detached",
            "max_restarts": OWNER_MAX_RESTARTS,
            "max_concurrency": OWNER_MAX_CONCURRENCY,
            "num_cpus": 0,
        }
        strategy = _scheduling(config, name)
        if strategy is not None:
            options["scheduling_strategy"] = strategy
        remote = _owner_class().options(**options).remote
        settings = config.model_dump(mode="json")
        try:  # a named actor's creation waits for the GCS (Ray's own wait: 60 s): bounded
            return gcs_answer(
                partial(remote, name, settings, **GROUP_NAMES), f"create its actor {ray_name!r}"
            )
        except ValueError:
            # Another process registered the name between our lookup and our creation.
            try:
                return named_actor(ray_name, NAMESPACE)
            except ValueError:
                if time.monotonic() > deadline:
                    raise WorkspaceUnavailableError(name, "could not create its owner actor") from None
                time.sleep(0.05)  # the name is being freed by an exiting owner: back off, then retry


def managed_name(handle: Any, *, config: Settings | None = None) -> str | None:
    """The name of the workspace ``handle`` is the managed owner of (what ``workspace_actor`` returns: a
    ``HostedHandle``, or a dedicated owner's handle, alive or dead) when it is one of ``config``'s data
    directory (default: this process's settings), so ``workspace_actor`` of that name reaches its owner
    again (``get_workspace(handle)`` of a handle whose owner hibernated and exited); None for anything
    else (a user's ``WorkspaceHost`` actor, an owner of another data directory)."""
    from ._host_placement import HostedHandle

    key = data_dir_key((config or cluster_settings()).data_dir)
    if isinstance(handle, HostedHandle):
        return handle.name if handle.host_name.startswith(f"{HOST_PREFIX}{key}:") else None
    ray_name = actor_ray_name(handle)
    prefix = f"{OWNER_PREFIX}{key}:"
    if ray_name is None or not ray_name.startswith(prefix):
        return None
    return ray_name[len(prefix) :]
