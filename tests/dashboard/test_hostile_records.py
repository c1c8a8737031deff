"""Audit records a model's input shaped: the dashboard shows them, never a server error."""

from __future__ import annotations

import json

import httpx

from computer.config import Settings
from computer.dashboard import DataDirSource
from computer.tools import create_tools

from .conftest import Serve, open_workspace


async def test_a_lone_surrogate_in_a_record_is_shown_not_a_server_error(
    settings: Settings, serve: Serve
) -> None:
    """``json.loads`` takes a model's broken emoji escape (``"\\ud83d"``) and the audit log keeps the
    string as given; the timeline page, its fragments and the records' JSON encoded it to UTF-8 whole,
    which raised: a 500 for every page that held such a record."""
    ws = open_workspace(settings, "alpha")
    tools = create_tools(ws)
    await tools["ls"].run({"path": "/tmp/\ud83d"})
    await tools["ls"].run({"path": "/", "depth": float("nan")})
    ws.audit.flush()
    base = await serve(DataDirSource(settings, workspaces={"alpha": ws}))
    async with httpx.AsyncClient(base_url=base) as http:
        page = await http.get("/w/alpha")
        assert page.status_code == 200 and "/tmp/" in page.text
        answer = await http.get("/api/w/alpha/records")
        assert answer.status_code == 200
        records = json.loads(answer.content)  # strict UTF-8 JSON, no NaN
        assert [r["args"]["path"] for r in records] == ["/tmp/\ud83d", "/"]  # the same string back
    await ws.close()
