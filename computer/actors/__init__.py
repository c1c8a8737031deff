"""Ray actors: the workspace owner (durable object), ``WorkspaceHost``, placement, the directory.

``computer.init`` configures and connects; ``workspace_actor(name)`` finds or creates the owner of a
workspace; a ``WorkspaceHost`` subclass lets a user's own actor own a workspace.
"""

from __future__ import annotations

from ._backends import owner_backends
from ._delete import DeletedWorkspace, delete_workspace
from ._errors import OutcomeUnknownError, UploadLostError, WorkspaceUnavailableError
from ._host import WorkspaceHost
from ._init import cluster_settings, ensure_ray, init
from ._owner import OwnerActor
from ._placement import workspace_actor
from .directory import Directory, RedisDirectory, SqliteDirectory, WorkspaceRecord, open_directory
from .naming import NAMESPACE, actor_name

__all__ = [
    "NAMESPACE",
    "DeletedWorkspace",
    "Directory",
    "OutcomeUnknownError",
    "OwnerActor",
    "RedisDirectory",
    "SqliteDirectory",
    "UploadLostError",
    "WorkspaceHost",
    "WorkspaceRecord",
    "WorkspaceUnavailableError",
    "actor_name",
    "cluster_settings",
    "delete_workspace",
    "ensure_ray",
    "init",
    "open_directory",
    "owner_backends",
    "workspace_actor",
]
