"""The workspace directory: placement (which node holds a file), owner leases with fencing epochs,
last activity and hibernation state. One protocol, an embedded SQLite and a cluster Redis implementation.
"""

from __future__ import annotations

from ._directory import Directory
from ._head import HeadDirectory
from ._open import open_directory
from ._record import WorkspaceRecord, WorkspaceState
from ._redis import RedisDirectory
from ._sqlite import SqliteDirectory

__all__ = [
    "Directory",
    "HeadDirectory",
    "RedisDirectory",
    "SqliteDirectory",
    "WorkspaceRecord",
    "WorkspaceState",
    "open_directory",
]
