"""The file registry: where each workspace's file is, kept on the head node's disk beside Redis.

Redis (``redis_url``) is the directory of a multi-node cluster, and a Redis restarted empty (or a key
evicted, or flushed by hand) forgets every placement. Placement then asks every alive node whether it
holds the file, which finds every file on an alive node; a file whose only node is down could not be
told from a name never used, and a new, empty workspace would be created elsewhere. So every lease
taken through Redis also notes ``(node, host)`` of the file in a SQLite file on the head node
(``<data_dir>/placements.sqlite``, table ``files``; other nodes reach it through a head actor, as the
embedded directory), and placement reads it when Redis has no record and no alive node
holds the file: a file it knows is ``WorkspaceUnavailableError``, on a machine with no alive node as on
one that is up without it (its data directory not mounted: not a file removed by hand, which made a
new, empty workspace under the old name); ``delete_workspace(name, force=True)`` forgets it.

Only with Redis and node-local data directories: the embedded directory keeps its records on the head
already (it is its own registry), and a shared data directory has every file on every node. A note
costs one local SQLite write on the head node, one directory actor call (about 1 ms) elsewhere, once
per owner wake. Owners outside Ray (the command line working in process, a deletion) note nothing:
their node is not a Ray node, and the file stays where the registry says.

Tombstones (table ``deleted``): ``delete_workspace`` notes each name it removed, with the time, the
process and its lease's epoch (above every epoch of the life it ended). Redis restored from a dump
taken before the deletion brings the name's record back, naming a file that is gone; an owner finding
its file missing reads that record as a lost file ("unavailable") unless a tombstone covers it: a
record of an epoch below the tombstone's is from before the deletion, and the name is new again
(``_lease.owner_file``, ``_placement._scheduling``): ``get_workspace`` makes it anew, empty, as it
does after any deletion (SPEC section 9: created on first use). A file lost otherwise (removed behind
the system's back, its disk gone) has no tombstone: still ``WorkspaceUnavailableError``, never a new
empty workspace. An owner's lease of a new life drops the tombstone (``note_file``, same write), so a
later loss of that life's file is "unavailable" again. Bounded: a tombstone older than
``TOMBSTONE_TTL`` (30 days) is dropped, and only the newest ``TOMBSTONES_KEPT`` (100,000, a few MB)
are kept, compacted in the deletion's own write; a dump older than that brings a deleted name back as
"unavailable" (the safe side: ``delete_workspace(name, force=True)`` forgets it). Only where the
registry is (Redis, node-local data directories), and with Redis and ``shared_data_dir``, where no
file is noted (every node sees every file) but the tombstones are kept all the same, in the shared
data directory's ``placements.sqlite`` opened directly by every node (``tombstones_kept``; a new life's
lease reads it once and drops its name's tombstone, ``forget_deletion``); before, a dump restored after
a deletion made the name "unavailable" there until ``force``. Owners outside Ray, which note nothing,
do not drop a tombstone either: their new life is still found by its file (an owner opens a file it finds).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...config import Settings
from ._head import HeadDirectory, on_head_node
from ._record import DELETING, WorkspaceRecord
from ._redis import RedisDirectory
from ._sqlite import SqliteDirectory

__all__ = [
    "REGISTRY_FILE",
    "TOMBSTONES_KEPT",
    "TOMBSTONE_TTL",
    "RegisteredDirectory",
    "covered",
    "deleted_before",
    "file_registry",
    "last_known_file",
    "tombstones_kept",
]

REGISTRY_FILE = "placements.sqlite"
TOMBSTONE_TTL = 30 * 24 * 3600.0  # seconds a deletion's tombstone is kept
TOMBSTONES_KEPT = 100_000  # at most this many tombstones (the newest)

log = logging.getLogger(__name__)


def file_registry(config: Settings) -> SqliteDirectory | HeadDirectory:
    """The head node's registry file, opened directly on the head and through its actor elsewhere; with
    ``shared_data_dir``, the shared data directory's, opened directly on every node (tombstones only)."""
    if config.shared_data_dir or on_head_node():
        return SqliteDirectory(config.data_dir / REGISTRY_FILE)
    return HeadDirectory(config, REGISTRY_FILE)


def registry_used(config: Settings) -> bool:
    """Whether placements are also noted in the head's file (Redis with node-local data directories)."""
    return bool(config.redis_url) and not config.shared_data_dir


def tombstones_kept(config: Settings) -> bool:
    """Whether deletions leave tombstones (Redis: it can come back from an older dump), in the head's
    registry file, or with ``shared_data_dir`` in the shared data directory's (``REGISTRY_FILE``)."""
    return bool(config.redis_url)


def last_known_file(config: Settings, name: str) -> tuple[str, str] | None:
    """``(node, host)`` where ``name``'s file was last opened by an owner, when the registry is used."""
    if not registry_used(config):
        return None
    registry = file_registry(config)
    try:
        return registry.file_of(name)
    finally:
        registry.close()


def deleted_before(config: Settings, record: WorkspaceRecord) -> str | None:
    """When a deletion removed ``record``'s workspace after that record was written (a record of an
    epoch below the deletion's tombstone: a Redis restored from an older dump), what it says ("deleted
    at <time> by <process>"); else None (no registry, no tombstone, or a record of a later life)."""
    if not tombstones_kept(config) or record.node == DELETING:
        return None
    registry = file_registry(config)
    try:
        return covered(registry.deletion_of(record.name), record)
    finally:
        registry.close()


def covered(tombstone: tuple[float, str, int] | None, record: WorkspaceRecord) -> str | None:
    """What ``tombstone`` (``(at, by, epoch)``, or None) says of ``record`` when it is from before that
    deletion (a lower epoch); None otherwise."""
    if tombstone is None or record.epoch >= tombstone[2]:
        return None
    at, by, epoch = tombstone
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    return (
        f"deleted at {when} by {by} (epoch {epoch}; the directory's record, epoch {record.epoch}, is older)"
    )


class RegisteredDirectory:
    """A :class:`RedisDirectory` whose leases also note the file's place in the head's registry."""

    def __init__(self, config: Settings, redis: RedisDirectory | None = None) -> None:
        assert config.redis_url is not None
        self._config = config
        self._redis = redis if redis is not None else RedisDirectory(config.redis_url)
        self._files: SqliteDirectory | HeadDirectory | None = None  # opened at the first note, kept
        self._notes_files = registry_used(config)  # else tombstones only (``shared_data_dir``)

    def get(self, name: str) -> WorkspaceRecord | None:
        return self._redis.get(name)

    def acquire_lease(
        self, name: str, node: str, owner_id: str, ttl: float, *, host: str | None = None
    ) -> int:
        epoch = self._redis.acquire_lease(name, node, owner_id, ttl, host=host)
        if host is not None and not node.startswith("process:") and node != DELETING:
            if self._notes_files:
                self._registry(lambda registry: registry.note_file(name, node, host))
            else:  # shared data directory: no notes, a new life's tombstone only (one read a wake)
                # Opening the file fails ESTALE when it was made anew under the running cluster
                # (``_identity.py``): the shared data directory is not mounted here, and the owner does
                # not open (nor create) a workspace there; that open failure is not ``_unbury``'s.
                self._registry(lambda registry: _unbury(registry, name))
        return epoch

    def renew_lease(
        self, name: str, owner_id: str, epoch: int, ttl: float, *, last_active: float | None = None
    ) -> bool:
        return self._redis.renew_lease(name, owner_id, epoch, ttl, last_active=last_active)

    def restore_lease(
        self, name: str, node: str, owner_id: str, epoch: int, ttl: float, **kwargs: Any
    ) -> bool:
        return self._redis.restore_lease(name, node, owner_id, epoch, ttl, **kwargs)

    def release_lease(self, name: str, owner_id: str, epoch: int, *, hibernating: bool = False) -> bool:
        return self._redis.release_lease(name, owner_id, epoch, hibernating=hibernating)

    def remove(self, name: str, owner_id: str) -> bool:
        removed = self._redis.remove(name, owner_id)
        if removed and self._notes_files:
            self._registry(lambda registry: registry.forget_file(name))
        return removed

    def bury(self, name: str, epoch: int, by: str) -> None:
        """A deletion under lease ``epoch`` removed ``name``: its tombstone (bounded, see the module).
        Only this directory has it: the embedded one (``SqliteDirectory``, ``HeadDirectory``) never
        comes back from an older state, so a deletion leaves no tombstone there."""
        self._registry(
            lambda registry: registry.note_deleted(name, epoch, by, ttl=TOMBSTONE_TTL, kept=TOMBSTONES_KEPT)
        )

    def deleted_before(self, record: WorkspaceRecord) -> str | None:
        """:func:`deleted_before` through this directory's registry connection."""
        if record.node == DELETING:
            return None
        found: list[tuple[float, str, int] | None] = []
        self._registry(lambda registry: found.append(registry.deletion_of(record.name)))
        return covered(found[0], record)

    def names(self) -> list[str]:
        return self._redis.names()

    def close(self) -> None:
        self._redis.close()
        if self._files is not None:
            self._files.close()

    def _registry(self, step: Any) -> None:
        if self._files is None:  # an owner keeps its directory: one registry opened per owner
            self._files = file_registry(self._config)
        step(self._files)

    def __repr__(self) -> str:
        return f"RegisteredDirectory({self._redis!r})"


def _unbury(registry: SqliteDirectory | HeadDirectory, name: str) -> None:
    """Drop ``name``'s tombstone, if any: a new life's lease (the read first: most wakes have none).
    A failure (the shared file unreadable, locked too long) is logged and the owner opens all the
    same: the tombstone left only makes a dump from before it, restored after this life's file was
    lost by other means, read as deleted (new again) instead of "unavailable"."""
    try:
        if registry.deletion_of(name) is not None:
            registry.forget_deletion(name)  # type: ignore[union-attr]
    except Exception:
        log.warning("workspace %s: its tombstone could not be checked or dropped", name, exc_info=True)
