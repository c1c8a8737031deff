"""The ``computer`` command line: demo, tool, ls, shell, mcp, serve, bench, status.

Besides the app, the workspace listing behind ``computer ls`` (``list_workspaces``, given the
``GlobalOptions`` of a command) is public: the dashboard lists workspaces with it. It loads on first
use, so a command that lists nothing (``tool``, ``mcp``) does not import rich's tables. ``app`` (the
typer app) loads on first use too: ``main`` runs the everyday command lines without typer (``_fast``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._context import GlobalOptions
from ._fast import main

if TYPE_CHECKING:
    from ._app import app
    from ._ls import WorkspaceRow, list_workspaces

__all__ = ["GlobalOptions", "WorkspaceRow", "app", "list_workspaces", "main"]


def __getattr__(name: str) -> Any:
    from ..lazy import lazy_attribute

    return lazy_attribute(__name__, {"WorkspaceRow": "._ls", "list_workspaces": "._ls", "app": "._app"}, name)
