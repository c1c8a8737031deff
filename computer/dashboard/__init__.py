"""The read-only dashboard: workspaces, live timelines of tool calls and runs, files, exec output,
published links and the cluster, in a browser (``computer dashboard``).

Server-rendered HTML (Starlette) with one small plain script (server-sent events and fetch); no
framework and no build step. See README.md in this folder.
"""

from __future__ import annotations

from ._access import AccessPolicy, check_origin, is_loopback
from ._app import create_app
from ._serve import dashboard_url, serve_dashboard
from ._source import ClusterSource, DataDirSource
from ._transcript import TRANSCRIPT_PATH, keep_transcript, read_transcript

__all__ = [
    "TRANSCRIPT_PATH",
    "AccessPolicy",
    "ClusterSource",
    "DataDirSource",
    "check_origin",
    "create_app",
    "dashboard_url",
    "is_loopback",
    "keep_transcript",
    "read_transcript",
    "serve_dashboard",
]
