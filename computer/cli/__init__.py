"""The ``computer`` command line: demo, tool, ls, shell, mcp, serve, bench, status."""

from __future__ import annotations

from ._app import app, main

__all__ = ["app", "main"]
