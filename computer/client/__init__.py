"""``get_workspace``: a proxy with the owner's surface, usable from any process of the Ray cluster."""

from __future__ import annotations

from ..actors import WorkspaceUnavailableError
from ._get import WorkspaceOpening, get_workspace
from ._runtime import ClientExecHandle
from ._workspace import WorkspaceClient

__all__ = [
    "ClientExecHandle",
    "WorkspaceClient",
    "WorkspaceOpening",
    "WorkspaceUnavailableError",
    "get_workspace",
]
