"""Ray actors: the workspace owner (durable object), ``WorkspaceHost``, placement, the directory.

``computer.init`` configures and connects; ``workspace_actor(name)`` finds or creates the owner of a
workspace; a ``WorkspaceHost`` subclass lets a user's own actor own a workspace.

Names load on first use (as in ``computer/__init__.py``): a process that only needs the directory or
the naming rules (the command line working in process) does not pay for the owner, the exec pools and
the runtime they import (~0.3 s of CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..lazy import lazy_attribute

if TYPE_CHECKING:
    from ._backends import owner_backends
    from ._delete import DeletedWorkspace, close_owners, delete_workspace, remove_workspace_files
    from ._errors import OutcomeUnknownError, UploadLostError, WorkspaceUnavailableError
    from ._host import WorkspaceHost
    from ._hosts import HostedHandle, OwnerHost
    from ._init import adopt, cluster_settings, ensure_ray, init, published_settings
    from ._lease import awake, awake_where, lock_process, owner_file, owner_process, process_node, take_lease
    from ._nodes import ClusterSilentError, gcs_answer, listed_nodes, named_actor, named_actors
    from ._owner import CONTROL_METHODS, OWNER_GROUPS, STREAM_GROUP_METHODS, WAIT_METHODS, OwnerActor
    from ._placement import managed_name, workspace_actor
    from ._pool_scaler import SCALER_NAME
    from .directory import Directory, RedisDirectory, SqliteDirectory, WorkspaceRecord, open_directory
    from .naming import NAMESPACE, actor_name

__all__ = [
    "CONTROL_METHODS",
    "NAMESPACE",
    "OWNER_GROUPS",
    "SCALER_NAME",
    "STREAM_GROUP_METHODS",
    "WAIT_METHODS",
    "ClusterSilentError",
    "DeletedWorkspace",
    "Directory",
    "HostedHandle",
    "OutcomeUnknownError",
    "OwnerActor",
    "OwnerHost",
    "RedisDirectory",
    "SqliteDirectory",
    "UploadLostError",
    "WorkspaceHost",
    "WorkspaceRecord",
    "WorkspaceUnavailableError",
    "actor_name",
    "adopt",
    "awake",
    "awake_where",
    "close_owners",
    "cluster_settings",
    "delete_workspace",
    "ensure_ray",
    "gcs_answer",
    "init",
    "listed_nodes",
    "lock_process",
    "managed_name",
    "named_actor",
    "named_actors",
    "open_directory",
    "owner_backends",
    "owner_file",
    "owner_process",
    "process_node",
    "published_settings",
    "remove_workspace_files",
    "take_lease",
    "workspace_actor",
]

_LAZY = {
    "owner_backends": "._backends",
    "ClusterSilentError": "._nodes",
    "gcs_answer": "._nodes",
    "listed_nodes": "._nodes",
    "named_actor": "._nodes",
    "named_actors": "._nodes",
    "lock_process": "._lease",
    "owner_process": "._lease",
    "DeletedWorkspace": "._delete",
    "close_owners": "._delete",
    "delete_workspace": "._delete",
    "remove_workspace_files": "._delete",
    "OutcomeUnknownError": "._errors",
    "UploadLostError": "._errors",
    "WorkspaceUnavailableError": "._errors",
    "WorkspaceHost": "._host",
    "cluster_settings": "._init",
    "ensure_ray": "._init",
    "adopt": "._init",
    "published_settings": "._init",
    "init": "._init",
    "awake": "._lease",
    "awake_where": "._lease",
    "process_node": "._lease",
    "owner_file": "._lease",
    "take_lease": "._lease",
    "CONTROL_METHODS": "._owner",
    "OWNER_GROUPS": "._owner",
    "STREAM_GROUP_METHODS": "._owner",
    "WAIT_METHODS": "._owner",
    "OwnerActor": "._owner",
    "HostedHandle": "._hosts",
    "OwnerHost": "._hosts",
    "managed_name": "._placement",
    "workspace_actor": "._placement",
    "SCALER_NAME": "._pool_scaler",
    "Directory": ".directory",
    "RedisDirectory": ".directory",
    "SqliteDirectory": ".directory",
    "WorkspaceRecord": ".directory",
    "open_directory": ".directory",
    "NAMESPACE": ".naming",
    "actor_name": ".naming",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)
