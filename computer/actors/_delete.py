"""``delete_workspace``: remove a workspace as a whole (SPEC section 10, "Workspaces as a whole").

In order: refuse when a live client holds it (unless ``force``); stop its owner actor when this
process is connected to Ray (closed, then killed, so its name is free; a hosted workspace is closed
inside its owner host, which keeps serving its other workspaces): the owner checks that nothing holds
it and closes in one step (``WorkspaceHost.close_for_deletion``: no run can start between the check
and the close, decided in ``computer/actors/README.md``) and hands its lease to the deletion; take the
workspace's lease (unless handed over) with a new epoch and raise the file's stored epoch to it, so
any owner still running (one we could not reach, or one started meanwhile) has every later write
refused; remove its share links (their URLs
answer 404), its SQLite file with the files beside it (SQLite's ``-wal``, ``-shm``, ``-journal``), and
last its directory record. A later ``get_workspace`` of the same name starts an empty workspace. The
removal runs on the node that holds the file (a task there, when that is another node than the
caller's and the data directory is not shared); its node down is ``WorkspaceUnavailableError``. While
the deletion's lease lives, no owner may take the workspace's (EBUSY: ``refuse_while_deleting``).

"Held by a live client" means what keeps an owner from hibernating, except idle time: a call, stream
or upload in flight, a lock held, or a run going. An idle awake owner is simply stopped. An owner this
process cannot reach (no Ray connection, another cluster, a command's own process, a user's
``WorkspaceHost`` actor) whose lease is live counts as held: ``force`` deletes anyway, and that owner's
writes are refused from then on. An owner whose process is known dead does not hold it: one of this
machine by the pid its lease names (``_lease.awake``), one elsewhere by Ray's actor table when this
process is connected (``_lease.ray_owner_gone``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Settings, settings
from ..storage import FileSystem
from ..storage.errors import fs_error
from ._lease import awake, awake_where, ray_owner_gone, take_lease
from ._nodes import named_actor
from .directory import DELETING, Directory, WorkspaceRecord, open_directory
from .naming import NAMESPACE, actor_name, check_name, workspace_file
from .wire import Reply

__all__ = [
    "DeletedWorkspace",
    "close_owners",
    "delete_workspace",
    "hand_to_deletion",
    "in_use",
    "remove_workspace_files",
    "workspace_files",
]

log = logging.getLogger(__name__)

_STOP_TIMEOUT = 30.0  # seconds a busy owner may take to close before it is killed anyway
_DELETE_LEASE = 60.0  # the deletion's own lease: long enough for the removal, short if it dies midway


@dataclass(frozen=True)
class DeletedWorkspace:
    """What :func:`delete_workspace` removed."""

    name: str
    owner_stopped: bool  # an awake owner actor was stopped
    bytes: int  # size of the files removed (SQLite file and journals)
    links: int  # share links removed


def workspace_files(config: Settings, name: str) -> list[Path]:
    """The SQLite file of ``name`` and every file beside it named ``<file>-<letters>`` (SQLite's
    ``-wal``, ``-shm``, ``-journal``, and any such companion, e.g. a space reserve). A suffix never
    holds a dot, so another workspace's file (``<name>.sqlite-x.sqlite``) never matches."""
    base = workspace_file(config, name)
    companion = re.compile(re.escape(base.name) + r"(-[a-z]+)?")
    try:
        names = os.listdir(base.parent)
    except FileNotFoundError:
        return []
    return sorted(base.parent / n for n in names if companion.fullmatch(n))


def remove_workspace_files(config: Settings, name: str) -> int:
    """Unlink :func:`workspace_files` of ``name``; the bytes they held."""
    size = 0
    for file in workspace_files(config, name):
        try:
            size += file.stat().st_size
            file.unlink()
        except FileNotFoundError:
            pass
    return size


async def delete_workspace(name: str, *, force: bool = False) -> DeletedWorkspace:
    """Remove workspace ``name``: owner stopped, file, directory record, journal, share links.

    ``FileNotFoundError`` when neither a record nor a file of ``name`` exists; ``OSError`` with errno
    ``EBUSY`` when a live client holds it (the message says how), unless ``force``.

    With a directory in Redis the deletion leaves a tombstone (time, process, its lease's epoch) so
    that a Redis restored from a dump taken before it brings the name back new (``get_workspace`` makes
    it anew, empty; ``computer ls`` leaves the stale record out), not "unavailable, its file is
    missing": in the head node's file registry (``placements.sqlite``), or with ``shared_data_dir`` in
    the shared data directory's (same file, same table, opened directly by every node: there is no
    head registry; one read of it per owner wake, to drop a new life's tombstone). The embedded
    directory keeps none: it never comes back from an older state. See
    ``computer/actors/directory/_registry.py``.
    """
    check_name(name)
    config = await asyncio.to_thread(_settings)  # the published settings: a GCS read, bounded
    directory = await asyncio.to_thread(open_directory, config)
    try:
        record = await asyncio.to_thread(directory.get, name)
        if record is None and not workspace_files(config, name):
            if not await asyncio.to_thread(_held_elsewhere, config, name, force):
                raise fs_error(errno.ENOENT, name, "no such workspace")
        stopped, lease = await _stop_owner(config, name, force=force)
        record = await asyncio.to_thread(directory.get, name)
        ours = lease is not None and record is not None and record.owner == lease[0]
        if awake(record) and record is not None and not force and not ours:
            if not await asyncio.to_thread(ray_owner_gone, record):  # one on another machine died
                raise fs_error(errno.EBUSY, name, _unreachable_owner(record))
        there = await asyncio.to_thread(
            _file_elsewhere, config, name, force, None if lease is None else lease[0]
        )
        if there is not None:
            return await _remove_there(there, config, name, stopped, lease)
        return await asyncio.to_thread(_remove, config, directory, name, stopped, lease)
    finally:
        await asyncio.to_thread(directory.close)


def _held_elsewhere(config: Settings, name: str, force: bool) -> bool:
    """Whether another node holds the file of ``name``, which the directory has no record of (a Redis
    restarted empty or flushed while its owner slept) and this node has no file of: asked of every alive
    node, as placement does. A file the file registry knows and no alive node holds is
    ``WorkspaceUnavailableError``, unless ``force`` (then it is forgotten). Before, the deletion looked
    here only and said ENOENT ("no such workspace"), and the next ``get_workspace`` served the whole
    workspace again."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized() or config.shared_data_dir:
        return False
    from ._errors import WorkspaceUnavailableError
    from ._nodes import alive_nodes
    from ._placement import nodes_holding, refuse_a_registered_file

    alive = alive_nodes()
    if len(alive) > 1 and nodes_holding(config, name, alive):
        return True
    try:
        refuse_a_registered_file(config, name, alive)
    except WorkspaceUnavailableError:
        if not force:
            raise
        return True  # lost for good: the deletion's lease and its record's removal drop the registry's note
    return False


def _file_elsewhere(config: Settings, name: str, force: bool, deletion: str | None) -> Any:
    """Where the file of ``name`` is when that is another node than this process's (a Ray scheduling
    strategy), else None (also when the file is here); ``WorkspaceUnavailableError`` when its node is
    down, unless ``force`` (then what is here goes: the record). Owner placement's own answer
    (``_scheduling``): a deletion run from another node removed nothing there, said it had (``bytes=0``),
    and the next ``get_workspace`` served the whole workspace again. ``deletion``: the lease the
    deletion holds (``close_for_deletion`` handed it over), whose "deleting" record is not a refusal
    here: it refused the deletion itself, EBUSY "being deleted"."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized() or workspace_file(config, name).exists():
        return None
    from ._errors import WorkspaceUnavailableError
    from ._placement import _scheduling

    try:
        strategy = _scheduling(config, name, deletion)
    except WorkspaceUnavailableError:
        if not force:
            raise
        return None
    node = getattr(strategy, "node_id", None)
    return None if node is None or node == ray.get_runtime_context().get_node_id() else strategy


async def _remove_there(
    strategy: Any, config: Settings, name: str, stopped: bool, lease: tuple[str, int] | None
) -> DeletedWorkspace:
    """:func:`_remove` in a task on the node that holds the file."""
    import ray

    task = ray.remote(num_cpus=0, max_retries=0)(_remove_in_task)
    return await task.options(scheduling_strategy=strategy).remote(
        config.model_dump_json(), name, stopped, lease
    )


def _remove_in_task(
    config_json: str, name: str, stopped: bool, lease: tuple[str, int] | None
) -> DeletedWorkspace:
    config = Settings.model_validate_json(config_json)
    directory = open_directory(config)
    try:
        return _remove(config, directory, name, stopped, lease)
    finally:
        directory.close()


async def close_owners(names: list[str], config: Settings | None = None) -> int:
    """Close the awake owners of ``names`` that this process reaches, in either owner model (a
    workspace in an owner host is closed there; the host stays for its others; a dedicated owner actor
    closes and ends): afterwards those workspaces are asleep, lease released, nothing removed. A
    workspace asleep already is skipped. Returns how many were closed. For a process about to stop the
    Ray it started (``computer demo``), so its workspaces read as asleep rather than awake until their
    leases run out."""
    import ray

    from ._host_placement import host_handles

    config = config or _settings()
    hosts = list((await asyncio.to_thread(host_handles, config)).values())

    async def close(name: str) -> bool:
        closed = False
        for host in hosts:
            try:
                closed = bool(await host.close_workspace.remote(name)) or closed
            except ray.exceptions.RayActorError:
                continue  # exited meanwhile: it holds nothing
        try:
            handle = await asyncio.to_thread(named_actor, actor_name(name, config), NAMESPACE)
        except ValueError:
            return closed
        await handle.close_workspace.remote()
        return True

    outcomes = await asyncio.gather(*(close(name) for name in names), return_exceptions=True)
    return sum(1 for outcome in outcomes if outcome is True)


def _settings() -> Settings:
    """The cluster's settings when this process is connected to Ray, else its own (Ray not imported)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        from ._init import cluster_settings

        return cluster_settings()
    return settings()


async def _stop_owner(config: Settings, name: str, *, force: bool) -> tuple[bool, tuple[str, int] | None]:
    """Close and kill the owner actor of ``name`` if this process reaches one: ``(stopped, lease)``,
    ``lease`` the deletion's, which the owner took as it closed (``close_for_deletion``), else None.
    EBUSY (nothing stopped) when the owner says a live client holds it, unless ``force``."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False, None
    stopped, lease = await _stop_hosted(config, name, force=force)  # whatever the model: it may have changed
    try:  # bounded (``ClusterSilentError``), off the loop
        handle = await asyncio.to_thread(named_actor, actor_name(name, config), NAMESPACE)
    except ValueError:
        return stopped, lease  # no owner actor: asleep, hosted, or owned outside this cluster
    try:
        stats: dict[str, Any] = await handle.stats.remote()
    except ray.exceptions.RayActorError:
        return stopped, lease  # it died meanwhile
    _refuse_if_in_use(name, stats, force=force)  # early: nothing closed yet
    try:
        lease = _handed(
            name,
            await asyncio.wait_for(handle.close_for_deletion.remote(force, _DELETE_LEASE), _STOP_TIMEOUT),
        )
    except (TimeoutError, ray.exceptions.RayActorError):
        pass  # killed below either way; the fence stops whatever it would still write
    ray.kill(handle, no_restart=True)
    return True, lease


async def _stop_hosted(config: Settings, name: str, *, force: bool) -> tuple[bool, tuple[str, int] | None]:
    """Close ``name`` in whichever owner host of this data directory has it open (``owners="hosted"``);
    the host stays up for its other workspaces. ``(stopped, lease)`` as :func:`_stop_owner`."""
    import ray

    from ._host_placement import forget_claim, host_handles

    await asyncio.to_thread(forget_claim, config, name)  # a new workspace of that name goes anywhere
    hosts = await asyncio.to_thread(host_handles, config)
    stopped = False
    lease: tuple[str, int] | None = None
    for host in hosts.values():
        try:
            stats: dict[str, Any] | None = await host.ws_info.remote(name)
        except ray.exceptions.RayActorError:
            continue  # died or exited meanwhile: it holds nothing
        if stats is None:
            continue
        _refuse_if_in_use(name, stats, force=force)  # early: nothing closed yet
        try:
            reply = await asyncio.wait_for(
                host.close_for_deletion.remote(name, force, _DELETE_LEASE), _STOP_TIMEOUT
            )
        except (TimeoutError, ray.exceptions.RayActorError):
            stopped = True  # the fence below stops whatever it would still write
            continue
        if reply is not None:
            lease = _handed(name, reply) or lease
            stopped = True
    return stopped, lease


def _handed(name: str, reply: Reply) -> tuple[str, int] | None:
    """The lease an owner's ``close_for_deletion`` handed over (None: closing already, or the hand-over
    failed: the deletion takes the lease itself); EBUSY when the owner found a live client."""
    kind, value = reply
    if kind != "ok" or not isinstance(value, dict):
        return None
    if value.get("busy"):
        _refuse(name, list(value["busy"]))
    lease = value.get("lease")
    return (str(lease[0]), int(lease[1])) if lease else None


def hand_to_deletion(directory: Directory, name: str, config: Settings, ttl: float) -> tuple[str, int] | None:
    """An owner closing for a deletion: take the deletion's lease (node ``deleting``, for ``ttl`` s) in
    place of releasing its own, so that no owner opens the workspace in between; ``(owner id, epoch)``,
    None when it failed (logged: the deletion then takes the lease itself)."""
    try:
        return take_lease(directory, name, workspace_file(config, name), node=DELETING, host=None, ttl=ttl)
    except Exception:
        log.exception("workspace %s: handing the lease to its deletion failed", name)
        return None


def _refuse_if_in_use(name: str, stats: dict[str, Any], *, force: bool) -> None:
    """EBUSY when an owner's ``stats`` say a live client holds ``name`` (unless ``force``)."""
    reasons = in_use(stats)
    if reasons and not force:
        _refuse(name, reasons)


def _refuse(name: str, reasons: list[str]) -> None:
    raise fs_error(
        errno.EBUSY,
        name,
        f"in use by a live client ({', '.join(reasons)}); retry when it is done, or force the deletion",
    )


def in_use(stats: dict[str, Any]) -> list[str]:
    """Why an owner counts as held by a live client, from its ``stats`` (empty when it is not)."""
    counts = (
        ("inflight", "call(s) in flight"),
        ("streams", "stream(s) open"),
        ("uploads", "upload(s) open"),
        ("locks_held", "lock(s) held"),
        ("runs", "run(s) going"),
    )
    return [f"{stats[key]} {what}" for key, what in counts if stats.get(key)]


def _unreachable_owner(record: WorkspaceRecord) -> str:
    left = max(0.0, record.lease_expires - time.time())
    ray = sys.modules.get("ray")
    if (record.node or "").startswith("process:"):  # an embedded owner: a program (a CLI command) holds it
        stop = "end the program holding it"
    elif ray is not None and ray.is_initialized():  # a user's own WorkspaceHost, another cluster's owner
        stop = "stop it (an actor of your own, or another cluster's owner)"
    else:
        stop = "connect to its cluster first"
    return (
        f"awake {awake_where(record)}, an owner this process cannot stop: {stop}, "
        f"wait until it is asleep (within {left:.0f} s if that owner is gone), or force the deletion"
    )


def _remove(
    config: Settings, directory: Directory, name: str, stopped: bool, lease: tuple[str, int] | None = None
) -> DeletedWorkspace:
    """Fence, then remove links, files and the record (blocking: runs in a thread). ``lease``: the
    deletion's, handed over by the owner as it closed; else taken here."""
    path = workspace_file(config, name)
    if lease is None:
        lease = take_lease(directory, name, path, node=DELETING, host=None, ttl=_DELETE_LEASE)
    (owner_id, epoch), workspace_id = _fence_and_hold(directory, name, path, lease)
    links = asyncio.run(_remove_links(config, workspace_id)) if workspace_id else 0
    size = remove_workspace_files(config, name)  # after the fence, which may have made -wal/-shm
    directory.remove(name, owner_id)
    _note_deleted(directory, name, epoch)
    return DeletedWorkspace(name, stopped, size, links)


def _note_deleted(directory: Directory, name: str, epoch: int) -> None:
    """Leave the deletion's tombstone where the directory keeps one (the file registry beside Redis,
    ``directory/_registry.py``), so a Redis restored from a dump taken before this deletion brings no
    workspace back as "unavailable, its file is missing": the name is new again. A tombstone that
    cannot be written is logged, the deletion done: such a dump then reads "unavailable" (the safe side)."""
    note = getattr(directory, "bury", None)  # ``RegisteredDirectory`` only
    if note is None:
        return
    try:
        note(name, epoch, f"process {os.getpid()} on {socket.gethostname()}")
    except Exception:
        log.exception("workspace %s: deleted, but its tombstone could not be written", name)


_HOLD_TRIES = 5  # rounds of "the record is not the deletion's": each one a directory that lost it again


def _fence(path: Path, epoch: int) -> str | None:
    """Raise the stored epoch of the file at ``path`` to ``epoch`` (every write of an owner still running
    somewhere is refused from then on); the workspace's id, None when there is no file."""
    if not path.exists():
        return None
    fs = FileSystem.open(str(path), fence=epoch, garbage_timer=False)
    try:
        return fs.id
    finally:
        fs.close()


def _fence_and_hold(
    directory: Directory, name: str, path: Path, lease: tuple[str, int]
) -> tuple[tuple[str, int], str | None]:
    """Fence the file with the deletion's epoch, then make sure the directory record is still the
    deletion's before anything is removed; ``(lease, workspace id)``, the lease possibly taken anew.

    A Redis that lost the deletion's record (``FLUSHALL``, restarted empty) between its lease and the
    removal refuses no owner any more. Decided: the deletion writes its record back where none is
    (``restore_lease``, as a live owner does, ``_restore.py``); a record of an older epoch than the
    deletion's is an owner that wrote its own lease back before the fence (its file still carried its
    epoch): the deletion takes the lease again above it and fences again (before, it removed the file
    and left that owner's record, live and "active", naming a file that was gone: every later
    ``get_workspace`` of the name was "unavailable", its file missing, for good); a record of a newer
    epoch, or a file fenced above the deletion's epoch, is an owner that opened the workspace after the
    record was lost: EBUSY, nothing removed (before, the deletion unlinked the file that owner served,
    its acknowledged writes with it). Once the record is the deletion's, no owner takes the lease until
    the removal ends (EBUSY "being deleted"), short of the directory losing it once more."""
    for _ in range(_HOLD_TRIES):
        owner_id, epoch = lease
        workspace_id = _fence(path, epoch)
        record = directory.get(name)
        restore = getattr(directory, "restore_lease", None)
        if record is None and restore is not None:
            restore(name, DELETING, owner_id, epoch, _DELETE_LEASE)
            record = directory.get(name)  # the deletion's again, or whoever's came first
        mine = record is None or record.owner == owner_id  # None: a directory that cannot lose records
        if (record is not None and not mine and record.epoch > epoch) or (
            path.exists() and FileSystem.stored_epoch(str(path)) > epoch
        ):
            raise fs_error(
                errno.EBUSY,
                name,
                "an owner opened the workspace while the directory had lost the deletion's record "
                "(a Redis flushed or restarted empty): nothing removed; retry the deletion",
            )
        if mine:
            return lease, workspace_id
        lease = take_lease(directory, name, path, node=DELETING, host=None, ttl=_DELETE_LEASE)
    raise fs_error(errno.EBUSY, name, "the directory kept losing the deletion's record: nothing removed")


async def _remove_links(config: Settings, workspace_id: str) -> int:
    from ..assets import default_store

    store = default_store(config)
    remove = getattr(store, "delete_workspace_links", None)  # both built-in stores have it
    if remove is None:
        return 0
    try:
        return int(await remove(workspace_id))
    finally:
        await store.close()
