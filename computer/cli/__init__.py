"""The ``computer`` command line: demo, tool, ls, shell, mcp, serve, bench, status.

Besides the app, the workspace listing behind ``computer ls`` (``list_workspaces``, given the
``GlobalOptions`` of a command) is public: the dashboard lists workspaces with it. It loads on first
use (``GlobalOptions`` too), so a command that lists nothing (``tool``, ``mcp``) does not import
rich's tables. ``app`` (the typer app) loads on first use too: ``main`` runs the everyday command
lines without typer (``_fast``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import app
    from ._context import GlobalOptions
    from ._ls import WorkspaceRow, list_workspaces

__all__ = ["GlobalOptions", "WorkspaceRow", "app", "list_workspaces", "main"]


def main() -> None:
    """Console-script entry point (``computer``, ``python -m computer.cli``): ``_fast.main``, loaded
    here so that Ctrl-C while the command line's own modules load (~15 ms) ends it with 130 and no
    import-time traceback. What is left is the interpreter's own start (~25 ms), as for any Python
    program."""
    try:
        from ._fast import main as run
    except KeyboardInterrupt:
        sys.exit(130)
    run()


def __getattr__(name: str) -> Any:
    from ..lazy import lazy_attribute

    where = {"GlobalOptions": "._context", "WorkspaceRow": "._ls", "list_workspaces": "._ls", "app": "._app"}
    return lazy_attribute(__name__, where, name)
