"""The workspace directory: placement (which node holds a file), owner leases with fencing epochs,
last activity and hibernation state. One protocol, an embedded SQLite and a cluster Redis implementation.
"""

from __future__ import annotations

from ._directory import Directory
from ._head import HeadDirectory
from ._open import open_directory
from ._record import DELETING, WorkspaceRecord, WorkspaceState, refuse_while_deleting
from ._redis import RedisDirectory
from ._registry import (
    REGISTRY_FILE,
    RegisteredDirectory,
    covered,
    deleted_before,
    last_known_file,
    registry_used,
    tombstones_kept,
)
from ._renew import LeaseRenewal, renew_leases
from ._sqlite import SqliteDirectory

__all__ = [
    "DELETING",
    "REGISTRY_FILE",
    "Directory",
    "HeadDirectory",
    "LeaseRenewal",
    "RedisDirectory",
    "RegisteredDirectory",
    "SqliteDirectory",
    "WorkspaceRecord",
    "WorkspaceState",
    "covered",
    "deleted_before",
    "last_known_file",
    "open_directory",
    "refuse_while_deleting",
    "registry_used",
    "renew_leases",
    "tombstones_kept",
]
