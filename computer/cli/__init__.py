"""The ``computer`` command line: demo, tool, ls, shell, mcp, serve, bench, status.

Besides the app, the workspace listing behind ``computer ls`` (``list_workspaces``, given the
``GlobalOptions`` of a command) is public: the dashboard lists workspaces with it.
"""

from __future__ import annotations

from ._app import app, main
from ._context import GlobalOptions
from ._ls import WorkspaceRow, list_workspaces

__all__ = ["GlobalOptions", "WorkspaceRow", "app", "list_workspaces", "main"]
