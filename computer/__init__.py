"""computer: durable, isolated workspaces for AI agents, on Ray.

The public face. Every name loads on first use (Ray and the actors, and the storage engine too), so
``import computer`` is cheap, the embedded ``Workspace`` never imports Ray, and a command that
needs no workspace file (``computer --help``, ``computer ls``) does not load the storage engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lazy import lazy_attribute

if TYPE_CHECKING:
    from .actors import WorkspaceHost, delete_workspace, init, workspace_actor
    from .client import get_workspace
    from .config import Settings
    from .runtime.types import BackendInfo, ExecResult, ExecSnapshot, OutputTruncation
    from .storage import AuditRecord, audit_caller
    from .storage.errors import FsInvalidError
    from .storage.types import DirEntry, FileStat, FindEntry, GrepContextLine, GrepMatch
    from .workspace import Workspace

__all__ = [
    "AuditRecord",
    "BackendInfo",
    "DirEntry",
    "ExecResult",
    "ExecSnapshot",
    "FileStat",
    "FindEntry",
    "FsInvalidError",
    "GrepContextLine",
    "GrepMatch",
    "OutputTruncation",
    "Settings",
    "Workspace",
    "WorkspaceHost",
    "audit_caller",
    "delete_workspace",
    "get_workspace",
    "init",
    "workspace_actor",
]

_LAZY = {
    "AuditRecord": ".storage",
    "audit_caller": ".storage",
    "FsInvalidError": ".storage.errors",
    **dict.fromkeys(("DirEntry", "FileStat", "FindEntry", "GrepContextLine", "GrepMatch"), ".storage.types"),
    "Workspace": ".workspace",
    "init": ".actors",
    "workspace_actor": ".actors",
    "WorkspaceHost": ".actors",
    "delete_workspace": ".actors",
    "get_workspace": ".client",
    "Settings": ".config",
    "BackendInfo": ".runtime.types",
    "ExecResult": ".runtime.types",
    "ExecSnapshot": ".runtime.types",
    "OutputTruncation": ".runtime.types",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)
