"""The embedded directory on a multi-node cluster: the head node's SQLite file, reached through one actor.

The embedded directory is a SQLite file in the data directory, which is node-local unless it is shared
storage. Were every node to keep its own, a workspace's record would live only on the node of its last
owner, and a caller elsewhere would not find it. So there is one embedded directory per cluster: the
head node's. Processes on the head node open that file directly; processes on other nodes reach it
through ``DirectoryService``, a detached actor pinned to the head node that opens the same file (SQLite
keeps the two kinds of access consistent). Redis (``redis_url``) or a shared data directory
(``shared_data_dir``) replace this.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ...config import Settings
from .._errors import WorkspaceUnavailableError
from ._record import WorkspaceRecord
from ._sqlite import SqliteDirectory

__all__ = ["HeadDirectory", "head_node_id", "on_head_node"]

_METHODS = frozenset(
    {
        "get",
        "acquire_lease",
        "renew_lease",
        "renew_leases",
        "release_lease",
        "remove",
        "names",
        "note_file",
        "file_of",
        "forget_file",
        "note_deleted",
        "deletion_of",
        "tombstones",
    }
)
DIRECTORY_FILE = "directory.sqlite"
_CALL_TIMEOUT = 30.0  # seconds one directory call may take before the directory counts as unavailable
_HEAD_RESOURCE = "node:__internal_head__"
_service_class: Any = None
_heads: dict[str, str | None] = {}  # per cluster (GCS address): a process may join a new Ray session


def head_node_id() -> str | None:
    """The Ray node id of the head node (None outside Ray, or when Ray does not mark one)."""
    import ray

    if not ray.is_initialized():
        return None
    cluster = str(ray.get_runtime_context().gcs_address)
    if cluster not in _heads:
        from .._nodes import listed_nodes  # ClusterSilentError when the GCS does not answer in time

        nodes = listed_nodes()
        heads = [
            str(n["NodeID"]) for n in nodes if n.get("Alive") and _HEAD_RESOURCE in (n.get("Resources") or {})
        ]
        _heads[cluster] = heads[0] if heads else None
    return _heads[cluster]


def on_head_node() -> bool:
    """Whether this process runs on the head node (True outside Ray: there is only this machine)."""
    ray = sys.modules.get("ray")  # not imported: no cluster (and importing it would cost ~0.5 s)
    if ray is None or not ray.is_initialized():
        return True
    head = head_node_id()
    return head is None or head == str(ray.get_runtime_context().get_node_id())


class DirectoryService:
    """The Ray actor (on the head node) serving the head's embedded directory to other nodes."""

    def __init__(self, path: str) -> None:
        self._directory = SqliteDirectory(path)

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method not in _METHODS:
            raise ValueError(f"unknown directory method {method!r}")
        return getattr(self._directory, method)(*args, **kwargs)


def _service(config: Settings, file: str) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .._nodes import gcs_answer
    from ..naming import NAMESPACE, data_dir_key

    global _service_class
    if _service_class is None:
        _service_class = ray.remote(DirectoryService)
    head = head_node_id()
    if head is None:
        raise WorkspaceUnavailableError("?", "the cluster has no alive head node to keep the directory")
    path = str(Path(config.data_dir).expanduser() / file)
    suffix = "" if file == DIRECTORY_FILE else f":{file}"
    name = f"computer:directory:{data_dir_key(config.data_dir)}{suffix}"
    remote = _service_class.options(
        name=name,
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=head, soft=False),
    ).remote
    # A named actor's creation (or, here, its lookup) waits for the GCS: Ray's own wait is 60 s.
    return gcs_answer(partial(remote, path), f"create its actor {name!r}")


class HeadDirectory:
    """A :class:`~computer.actors.directory.Directory` whose records live in the head node's SQLite file."""

    def __init__(self, config: Settings, file: str = DIRECTORY_FILE) -> None:
        """``file``: the SQLite file in the head's data directory (the file registry uses its own)."""
        self._config = config
        self._actor = _service(config, file)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        name = str(args[0]) if args else "?"
        try:
            return ray.get(self._actor.call.remote(method, args, kwargs), timeout=_CALL_TIMEOUT)
        except (RayError, GetTimeoutError) as exc:
            raise WorkspaceUnavailableError(
                name, f"the directory on the head node did not answer ({type(exc).__name__})"
            ) from exc

    def get(self, name: str) -> WorkspaceRecord | None:
        record: WorkspaceRecord | None = self._call("get", name)
        return record

    def acquire_lease(
        self, name: str, node: str, owner_id: str, ttl: float, *, host: str | None = None
    ) -> int:
        return int(self._call("acquire_lease", name, node, owner_id, ttl, host=host))

    def renew_lease(
        self, name: str, owner_id: str, epoch: int, ttl: float, *, last_active: float | None = None
    ) -> bool:
        return bool(self._call("renew_lease", name, owner_id, epoch, ttl, last_active=last_active))

    def renew_leases(self, renewals: Sequence[tuple[str, str, int, float, float | None]]) -> list[bool]:
        """Every renewal in one call to the head's directory (one SQLite transaction there)."""
        kept: list[bool] = self._call("renew_leases", [tuple(r) for r in renewals])
        return kept

    def release_lease(self, name: str, owner_id: str, epoch: int, *, hibernating: bool = False) -> bool:
        return bool(self._call("release_lease", name, owner_id, epoch, hibernating=hibernating))

    def remove(self, name: str, owner_id: str) -> bool:
        return bool(self._call("remove", name, owner_id))

    def names(self) -> list[str]:
        names: list[str] = self._call("names")
        return names

    def note_file(self, name: str, node: str, host: str) -> None:
        self._call("note_file", name, node, host)

    def file_of(self, name: str) -> tuple[str, str] | None:
        found = self._call("file_of", name)
        return None if found is None else (str(found[0]), str(found[1]))

    def forget_file(self, name: str) -> None:
        self._call("forget_file", name)

    def note_deleted(self, name: str, epoch: int, by: str, *, ttl: float, kept: int) -> None:
        self._call("note_deleted", name, epoch, by, ttl=ttl, kept=kept)

    def deletion_of(self, name: str) -> tuple[float, str, int] | None:
        found = self._call("deletion_of", name)
        return None if found is None else (float(found[0]), str(found[1]), int(found[2]))

    def tombstones(self) -> int:
        return int(self._call("tombstones"))

    def close(self) -> None:
        """Nothing to release: the service actor stays for the next caller."""

    def __repr__(self) -> str:
        return f"HeadDirectory({str(self._config.data_dir)!r})"
