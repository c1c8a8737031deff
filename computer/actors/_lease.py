"""Taking a workspace's owner lease: the one step every owner (and a deletion) starts with.

The directory hands out epochs; the SQLite file remembers the highest epoch any owner opened it with.
A directory that lost its records (a Redis restarted empty) counts from 1 again, so a lease is taken
until its epoch is above the file's: only then does opening the file with ``fence=epoch`` stop every
earlier owner's writes (EROFS).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
import sys
import uuid
from pathlib import Path

from ..storage import FileSystem
from ._errors import WorkspaceUnavailableError
from .directory import DELETING, Directory, WorkspaceRecord

log = logging.getLogger(__name__)

__all__ = [
    "awake",
    "awake_where",
    "holder_gone",
    "lock_process",
    "owner_file",
    "owner_id",
    "owner_process",
    "process_node",
    "ray_owner_gone",
    "take_lease",
]


def take_lease(
    directory: Directory, name: str, path: str | Path, *, node: str, host: str | None, ttl: float
) -> tuple[str, int]:
    """Take the lease of ``name`` for a new owner id; return ``(owner_id, epoch)``, the epoch above
    every epoch the file at ``path`` has seen (0 when it does not exist)."""
    stored = FileSystem.stored_epoch(str(path))
    while True:
        owner_id = uuid.uuid4().hex
        epoch = directory.acquire_lease(name, node, owner_id, ttl, host=host)
        if epoch > stored:
            return owner_id, epoch


def owner_file(directory: Directory, name: str, path: Path, *, host: str | None) -> None:
    """Before an owner (of a cluster, or a command's own process) takes its lease and opens ``path``:
    raise ``WorkspaceUnavailableError`` when the file is missing but the directory has a record of
    ``name`` (an owner opened it before: its file was created then), so a data directory that is
    unreachable here (unmounted, on another machine, a shared mount missing on this node) is an error,
    never a new empty workspace under the old name. A new name's file is made here, before its record,
    so that a record always means a file (an owner killed in between would make the name unavailable).

    A deleted workspace has no record (``delete_workspace`` removes it last), so its name is new again;
    so is one whose deletion died after removing the file (the record is the deletion's), and one whose
    record is older than its deletion's tombstone (a Redis restored from a dump taken before the
    deletion: ``directory/_registry.py``). A file lost otherwise has no tombstone: unavailable.
    """
    if path.exists():
        return
    record = directory.get(name)
    deleted = _deleted_before(directory, record)
    if deleted is not None:
        log.warning("workspace %s: %s; a new, empty workspace is made under its name", name, deleted)
    if record is None or record.node == DELETING or deleted is not None:  # deleted, or a deletion's
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            FileSystem.open(str(path), garbage_timer=False).close()
        except BaseException:
            _forget_unborn(path)
            raise
        return
    raise WorkspaceUnavailableError(
        name,
        f"its file {path} is missing on {host or socket.gethostname()}, but the directory knows the "
        f"workspace (epoch {record.epoch}, last owner {awake_where(record)}): its data directory is "
        "not reachable here; an owner never opens it as a new empty workspace "
        "(delete_workspace(name, force=True) forgets a workspace whose file is lost for good)",
    )


def _deleted_before(directory: Directory, record: WorkspaceRecord | None) -> str | None:
    """What the tombstone of a deletion newer than ``record`` says, where the directory keeps
    tombstones (``RegisteredDirectory.deleted_before``); None otherwise."""
    check = getattr(directory, "deleted_before", None)
    if record is None or check is None:
        return None
    found: str | None = check(record)
    return found


def _forget_unborn(path: Path) -> None:
    """Remove what a failed creation of a new workspace's file left at ``path`` (a full disk leaves an
    empty file): placement asks every node whether it holds the file, and would send the name back to
    this node for good, or trust an empty file as the workspace. Only a file no owner ever opened with
    a lease (stored epoch 0: nothing was ever written to it) is removed."""
    try:
        if FileSystem.stored_epoch(str(path)) != 0:
            return
        for leftover in ("", "-wal", "-shm", "-journal", "-calls", "-calls-wal", "-calls-shm"):
            path.with_name(path.name + leftover).unlink(missing_ok=True)
    except OSError:
        pass  # what cannot be removed stays: the name then opens (or fails) on this node again


def forget_failed_creation(directory: Directory, name: str, owner_id: str, path: Path) -> None:
    """A new workspace's owner made its file (``owner_file``) and then failed to open it (a full disk:
    the lease's directory write, the journal, the fencing epoch): remove the file, and the record when
    it is this owner's, while the file's stored epoch is 0 (no owner ever opened it: nothing of it was
    ever written). Before, an ENOSPC after the file was made left an empty file and no record: this
    node "held" the name for placement (every later attempt came back to the full node, and its claim
    was kept) though it was never created."""
    try:
        if not path.exists() or FileSystem.stored_epoch(str(path)) != 0:
            return
        record = directory.get(name)
        if record is not None and (record.owner != owner_id or not directory.remove(name, owner_id)):
            return  # another owner's lease, or the record could not go: the file stays with it
    except Exception:
        return  # what cannot be checked stays: the name then opens (or fails) on this node again
    _forget_unborn(path)


def process_node() -> str:
    """The ``node`` an owner outside Ray records: ``process:<pid>@<hostname>~<place>`` (:func:`place`).

    It is never an alive Ray node id, so placement treats it like the node of an owner that is gone
    (the file is on this machine).
    """
    return f"process:{os.getpid()}@{socket.gethostname()}~{place()}"


def awake_where(record: WorkspaceRecord) -> str:
    """Where the owner of ``record`` runs, in words: ``in process 812 on box``, ``on node 1a2b3c4d (box)``."""
    node = record.node or "?"
    if node.startswith("process:"):
        pid, _, where = node.removeprefix("process:").partition("@")
        hostname = where.partition("~")[0]
        return f"in process {pid} on {hostname}" if hostname else f"in process {pid}"
    hostname = (record.host or "").partition("/")[0]
    return f"on node {node[:8]} ({hostname})" if hostname else f"on node {node[:8]}"


def owner_id(actor: str) -> str:
    """A new owner id for a lease of an owner in a Ray actor: ``<actor>#<pid>~<place>/<uuid>``
    (:func:`owner_process`, :func:`place`)."""
    return f"{actor}#{os.getpid()}~{place()}/{uuid.uuid4().hex}"


def owner_process(owner: str | None) -> tuple[str, int] | None:
    """``(actor, pid)`` of the owner id of an owner in a Ray actor, ``<actor>#<pid>~<place>/<uuid>``
    (before this session's ids, ``<actor>#<pid>/<uuid>``): an owner host's Ray name
    (``computer:host:...``) or a dedicated owner's actor id (hex, empty outside an actor), and the pid
    of its process. None for other ids (a bare uuid: older owners, commands)."""
    actor, sep, rest = (owner or "").partition("#")
    pid = rest.partition("/")[0].partition("~")[0]
    return (actor, int(pid)) if sep and pid.isdigit() else None


def _owner_place(owner: str | None) -> str:
    """The place an owner id names (:func:`owner_id`); empty for an older id."""
    return (owner or "").partition("#")[2].partition("/")[0].partition("~")[2]


def awake(record: WorkspaceRecord | None, now: float | None = None) -> bool:
    """Whether an owner holds ``record``'s workspace: a live lease, unless that owner was a process of
    this machine that is gone (killed before it could release the lease: no need to wait it out): a
    command's process (``process:<pid>@<hostname>``), or an owner actor or owner host whose lease names
    its pid (:func:`owner_process`) on a node of this machine. Before, a killed owner host or owner
    actor was listed awake with its dead pid, and ``delete_workspace`` refused for the rest of its lease
    (~28 s). A pid reused by another process counts as alive: the safe side."""
    if record is None or not record.lease_live(now):
        return False
    node = record.node or ""
    if node.startswith("process:"):
        pid, _, where = node.removeprefix("process:").partition("@")
        hostname, _, at = where.partition("~")
    else:
        hostname = (record.host or "").partition("/")[0]
        process = owner_process(record.owner)
        pid = str(process[1]) if process is not None else ""
        at = _owner_place(record.owner)
    if not _here(hostname, at) or not pid.isdigit():
        return True
    return _alive(int(pid))


def _here(hostname: str, at: str) -> bool:
    """Whether a pid recorded with ``hostname`` and place ``at`` is one of this process's pid
    namespace: by the place when the record has one (:func:`place`), by the hostname for a record
    older than places (the one way before: a container sharing the host's name was taken for here)."""
    if at:
        return at == place()
    return hostname == socket.gethostname()


@functools.cache
def place() -> str:
    """This process's machine and pid namespace, in 12 hex digits (``computer.runtime.host_mark``: the
    boot's id and the pid namespace's inode). A hostname alone does not tell them apart: cloned
    machines keep theirs, and containers sharing the host's network (``--net=host``, Ray's docker
    setups) share the host's name while each has pids of its own. Empty when ``/proc`` cannot tell
    (then a pid recorded with it is never taken for one of here)."""
    from ..runtime import host_mark

    mark = host_mark()
    return "" if "unknown-" in mark else hashlib.sha256(mark.encode()).hexdigest()[:12]


def lock_process() -> str:
    """This process as its lock requests name it, ``<pid>@<hostname>~<place>`` (:func:`place`), so an
    owner can tell that it died while a request of it waited (:func:`holder_gone`)."""
    return f"{os.getpid()}@{socket.gethostname()}~{place()}"


def holder_gone(holder: str) -> bool:
    """Whether the client process a lock request names is known dead: a client's request is
    ``client:<id>#<request>:<lock_process>`` (``computer/client/_locks.py``), and a process of this
    machine and pid namespace (the same place, not only the same hostname) that no longer lives is
    gone. Anything else (another machine or container, another holder, a place unknown): False."""
    _, sep, request = holder.partition("#")
    pid, _, where = request.partition(":")[2].partition("@")
    hostname, _, at = where.partition("~")
    if not sep or not holder.startswith("client:") or not pid.isdigit() or not at or not _here(hostname, at):
        return False
    return not _alive(int(pid))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine lives; a zombie (dead, not yet reaped by its parent:
    Ray's raylet takes a moment) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no /proc here: as the signal said
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def ray_owner_gone(record: WorkspaceRecord) -> bool:
    """Whether Ray's actor table shows that the owner process holding ``record``'s lease is gone (this
    process connected to the cluster; blocking): its actor dead, restarting or restarted (another pid),
    an owner host no longer named. False when Ray cannot tell: no Ray connection, an id without its
    actor, an owner on a node that is not an alive node of this cluster (another cluster's, sharing the
    directory), the table unreadable, the GCS silent (no node list within ``_nodes.NODES_TIMEOUT``). For
    an owner on another machine, where :func:`awake` cannot look."""
    ray = sys.modules.get("ray")
    process = owner_process(record.owner)
    if ray is None or not ray.is_initialized() or process is None or not process[0]:
        return False
    from ._nodes import ClusterSilentError, alive_nodes, named_actor
    from .naming import HOST_PREFIX, NAMESPACE
    from .raycompat import actor_id, actor_process

    actor, pid = process
    try:
        alive = alive_nodes()
    except ClusterSilentError:
        return False  # Ray cannot tell now
    if record.node not in alive:
        return False
    if actor.startswith(HOST_PREFIX):
        try:
            actor = actor_id(named_actor(actor, NAMESPACE)).hex()
        except ValueError:
            return True  # no such host: it died for good (one that exits releases its leases first)
        except ClusterSilentError:
            return False  # Ray cannot tell now
    state = actor_process(actor)
    if state is None:
        return False
    status, current = state
    return status in ("DEAD", "RESTARTING") or (status == "ALIVE" and current not in (0, pid))
