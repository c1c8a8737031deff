"""The dashboard over HTTP: pages, fragments, the file viewer, event streams and who may read it."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from computer.config import Settings
from computer.dashboard import AccessPolicy, DataDirSource, check_origin, is_loopback
from computer.storage import audit_caller
from computer.tools import create_tools

from .conftest import PNG, Serve, open_workspace


async def test_pages_show_workspaces_timeline_files_and_links(settings: Settings, serve: Serve) -> None:
    ws = open_workspace(settings, "alpha")
    tools = create_tools(ws)
    with audit_caller(agent="fixer", adapter="openai"):
        await tools["write"].run({"path": "/workspace/notes.md", "content": "# hello <b>world</b>\n"})
        await tools["read"].run({"path": "/workspace/missing.md"})
    await ws.fs.write_file("/workspace/pic.png", PNG)
    await ws.fs.write_file("/workspace/x.svg", b"<svg onload=alert(1)></svg>")
    ws.audit.flush()
    base = await serve(DataDirSource(settings, workspaces={"alpha": ws}))
    async with httpx.AsyncClient(base_url=base) as http:
        index = await http.get("/")
        assert index.status_code == 200 and 'data-name="alpha"' in index.text
        assert "default-src 'self'" in index.headers["content-security-policy"]
        rows = (await http.get("/fragments/workspaces")).text
        assert "alpha" in rows and "awake in this process" in rows
        page = (await http.get("/w/alpha")).text
        assert "/workspace/notes.md" in page and "fixer via openai" in page and "No such file" in page
        listing = (await http.get("/w/alpha/files", params={"path": "/workspace"})).text
        assert "notes.md" in listing and "pic.png" in listing
        text = (await http.get("/w/alpha/file", params={"path": "/workspace/notes.md"})).text
        assert "# hello &lt;b&gt;world&lt;/b&gt;" in text  # escaped, never markup
        image = await http.get("/w/alpha/raw", params={"path": "/workspace/pic.png"})
        assert (
            image.status_code == 200 and image.content == PNG and image.headers["content-type"] == "image/png"
        )
        svg = await http.get("/w/alpha/raw", params={"path": "/workspace/x.svg"})
        assert svg.status_code == 404  # an SVG can carry script: shown as text only
        assert "&lt;svg onload" in (await http.get("/w/alpha/file", params={"path": "/workspace/x.svg"})).text
        assert (await http.get("/w/nobody")).status_code == 404
        records = (await http.get("/api/w/alpha/records", params={"status": "error"})).json()
        assert [r["tool"] for r in records] == ["read"]
        huge = await http.get("/api/w/alpha/records", params={"limit": str(10**20)})  # was a 500
        assert huge.status_code == 200 and len(huge.json()) >= 1
        assert "embedded view" in (await http.get("/cluster")).text
        assert (await http.post("/")).status_code == 405  # read-only
    await ws.close()


async def test_the_timeline_streams_new_records_as_server_sent_events(
    settings: Settings, serve: Serve
) -> None:
    ws = open_workspace(settings, "beta")
    tools = create_tools(ws)
    await tools["ls"].run({"path": "/"})
    ws.audit.flush()
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        async with http.stream("GET", "/events/w/beta/audit", params={"after": ws.audit.top()}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()

            async def next_event() -> tuple[str, str]:
                event = data = ""
                async for line in lines:
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        data += line[6:]
                    elif not line and event:
                        return event, data
                raise AssertionError("the stream ended")

            await tools["write"].run({"path": "/workspace/new.txt", "content": "x"})
            event, row = await asyncio.wait_for(next_event(), 10)
    assert event == "record" and "/workspace/new.txt" in row and 'class="record ok"' in row
    await ws.close()


async def test_a_timeline_stream_goes_on_while_more_workspaces_are_viewed_than_stay_open(
    settings: Settings, serve: Serve
) -> None:
    """The stream read a store the dashboard shares, closed once 32 other workspaces were viewed: it
    ended without a word and a later record never came."""
    ws = open_workspace(settings, "gamma")
    tools = create_tools(ws)
    others = []
    for i in range(34):
        other = open_workspace(settings, f"other{i}")
        await create_tools(other)["ls"].run({"path": "/"})
        other.audit.flush()
        others.append(other)
    await tools["ls"].run({"path": "/"})
    ws.audit.flush()
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        async with http.stream("GET", "/events/w/gamma/audit", params={"after": ws.audit.top()}) as stream:
            lines = stream.aiter_lines()
            for i in range(34):  # each viewed: the shared stores past 32 are closed
                assert (await http.get(f"/api/w/other{i}/records")).status_code == 200
            await tools["write"].run({"path": "/workspace/late.txt", "content": "x"})

            async def late_record() -> str:
                async for line in lines:
                    if line.startswith("data: ") and "/workspace/late.txt" in line:
                        return line
                raise AssertionError("the stream ended")

            await asyncio.wait_for(late_record(), 10)
    for other in others:
        await other.close()
    await ws.close()


async def test_a_finished_runs_output_comes_from_its_journal(settings: Settings, serve: Serve) -> None:
    from computer.runtime.shell import ShellBackend

    ws = open_workspace(settings, "gamma", backends=[ShellBackend()])
    result = await (await ws.runtime.exec("echo from-the-run; echo oops >&2; exit 4")).result()
    await ws.close()  # the owner is gone: the dashboard reads the file alone
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        page = (await http.get(f"/w/gamma/runs/{result.id}")).text
        assert "echo from-the-run" in page
        missing = await http.get("/w/gamma/runs/exec-nosuch")  # was 200 with an empty run page
        assert missing.status_code == 404 and "no run exec-nosuch" in missing.text
        body = (await http.get(f"/events/w/gamma/runs/{result.id}")).text
    snapshot = json.loads(next(line[6:] for line in body.splitlines() if line.startswith("data: {")))
    assert snapshot["stdout"] == "from-the-run\n" and snapshot["stderr"] == "oops\n"
    assert (snapshot["status"], snapshot["exit_code"], snapshot["live"]) == ("failed", 4, False)
    assert "event: done" in body


def test_loopback_and_the_share_link_origin() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert is_loopback("localhost") and not is_loopback("0.0.0.0") and not is_loopback("192.0.2.7")
    with pytest.raises(ValueError, match="share links"):
        check_origin("127.0.0.1", 8787, "http://127.0.0.1:8787")
    with pytest.raises(ValueError, match="share links"):
        check_origin("localhost", 8787, "http://127.0.0.1:8787")
    check_origin("127.0.0.1", 8788, "http://127.0.0.1:8787")
    assert AccessPolicy.for_bind("127.0.0.1", None).token is None
    assert len(AccessPolicy.for_bind("0.0.0.0", None).token or "") >= 24  # a token is always made


async def test_a_non_loopback_bind_refuses_requests_without_its_token(
    settings: Settings, serve: Serve
) -> None:
    # The policy of a dashboard bound to a non-loopback address, served here on 127.0.0.1 (tests never
    # touch other addresses): the token logic is what is under test.
    policy = AccessPolicy.for_bind("192.0.2.7", "s3cret-token-value")
    base = await serve(DataDirSource(settings), policy)
    async with httpx.AsyncClient(base_url=base) as http:
        refused = await http.get("/")
        assert refused.status_code == 401 and "token" in refused.text
        assert (await http.get("/api/workspaces")).status_code == 401
        assert (await http.get("/events/w/x/audit")).status_code == 401
        assert (await http.get("/", params={"token": "wrong"})).status_code == 401
        assert (await http.get("/", headers={"Authorization": "Bearer wrong"})).status_code == 401
        # Not ASCII (compare_digest refuses such a str: it was a 500 and a traceback in the log).
        assert (await http.get("/", params={"token": "é"})).status_code == 401
        assert (await http.get("/", headers={"Cookie": b"computer_dashboard=\xc3\xa9"})).status_code == 401
        assert (await http.get("/", headers={"Authorization": b"Bearer \xc3\xa9"})).status_code == 401
        opened = await http.get("/", params={"token": "s3cret-token-value"})
        assert opened.status_code == 200 and "HttpOnly" in opened.headers["set-cookie"]
        assert (await http.get("/api/workspaces")).status_code == 200  # the cookie now
    async with httpx.AsyncClient(base_url=base) as other:
        bearer = await other.get("/api/workspaces", headers={"Authorization": "Bearer s3cret-token-value"})
        assert bearer.status_code == 200


async def test_a_loopback_bind_answers_only_loopback_host_names(settings: Settings, serve: Serve) -> None:
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/")).status_code == 200
        assert (await http.get("/", headers={"Host": "localhost"})).status_code == 200
        rebound = await http.get("/", headers={"Host": "attacker.example"})  # DNS rebinding
        assert rebound.status_code == 401


async def test_an_agents_transcript_kept_in_its_workspace_is_shown(settings: Settings, serve: Serve) -> None:
    from computer.dashboard import TRANSCRIPT_PATH, keep_transcript

    ws = open_workspace(settings, "delta")
    messages = [
        {"role": "user", "content": "Fix <the> bug"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "/a"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "def add(a, b): return a - b"},
    ]
    await keep_transcript(ws, messages[:1])  # the first write makes its directory
    await keep_transcript(ws, messages)
    assert (await ws.fs.stat(TRANSCRIPT_PATH)).size > 0
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base) as http:
        page = (await http.get("/w/delta/transcript")).text
        assert "Fix &lt;the&gt; bug" in page and "return a - b" in page and "read" in page
        none = (await http.get("/fragments/w/alpha-none/transcript")).text
        assert "keeps no transcript" in none
    await ws.close()


async def test_a_workspace_deleted_and_made_again_is_read_anew(settings: Settings, serve: Serve) -> None:
    from computer.actors.naming import workspace_file

    ws = open_workspace(settings, "epsilon")
    await create_tools(ws)["write"].run({"path": "/workspace/old.txt", "content": "1"})
    await ws.close()
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base) as http:
        assert "/workspace/old.txt" in (await http.get("/w/epsilon")).text
        path = workspace_file(settings, "epsilon")
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)
        assert (await http.get("/w/epsilon")).status_code == 404
        ws = open_workspace(settings, "epsilon")
        await create_tools(ws)["write"].run({"path": "/workspace/new.txt", "content": "2"})
        ws.audit.flush()
        page = (await http.get("/w/epsilon")).text
        assert "/workspace/new.txt" in page and "/workspace/old.txt" not in page
        await ws.close()


async def test_a_reconnecting_timeline_resumes_after_the_last_record_it_got(
    settings: Settings, serve: Serve
) -> None:
    ws = open_workspace(settings, "zeta")
    tools = create_tools(ws)
    for path in ("/workspace/1", "/workspace/2"):
        await tools["write"].run({"path": path, "content": "x"})
    ws.audit.flush()
    first, second = await ws.audit.query()
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        headers = {"Last-Event-ID": str(first.id)}
        async with http.stream("GET", "/events/w/zeta/audit", params={"after": 0}, headers=headers) as stream:
            lines = []
            async for line in stream.aiter_lines():
                lines.append(line)
                if line.startswith("data: "):
                    break
    assert f"id: {second.id}" in lines and "/workspace/2" in lines[-1] and "/workspace/1" not in lines[-1]
    await ws.close()


async def test_a_carriage_return_in_a_record_cannot_cut_or_forge_a_timeline_event(
    settings: Settings, serve: Serve
) -> None:
    """An event stream's lines also end at a lone CR; lines were split at LF only, so a caller named
    ``a\\r\\revent: forged\\rdata: tail`` (an agent's name is a workspace name: only "/" and NUL are
    refused) ended its row's event early and forged another (paths and commands are shown with their
    whitespace folded)."""
    ws = open_workspace(settings, "crlf")
    tools = create_tools(ws)
    await tools["ls"].run({"path": "/"})
    ws.audit.flush()
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        async with http.stream("GET", "/events/w/crlf/audit", params={"after": ws.audit.top()}) as stream:
            lines = stream.aiter_lines()  # httpx splits at CR, LF and CRLF, as a browser does

            async def next_event() -> tuple[str, str]:
                event, data = "", []
                async for line in lines:
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                    elif not line and event:
                        return event, "\n".join(data)
                raise AssertionError("the stream ended")

            with audit_caller(agent="a\r\revent: forged\rdata: tail"):
                assert "error" not in await tools["write"].run({"path": "/workspace/f.txt", "content": "x"})
            event, row = await asyncio.wait_for(next_event(), 10)
    assert event == "record" and "tail" in row and row.rstrip().endswith("</tr>")
    await ws.close()


async def test_serve_dashboard_cuts_off_a_client_that_never_completes_its_request_head(
    settings: Settings,
) -> None:
    """As the share-link server: uvicorn arms no timer on a new connection, so a client that sent
    nothing, or trickled a head, held its socket for good (slowloris)."""
    from computer.dashboard import serve_dashboard

    from .conftest import free_port

    port = free_port()
    task = asyncio.create_task(
        serve_dashboard(
            DataDirSource(settings), "127.0.0.1", port, assets_url="http://127.0.0.1:1/", head_timeout=0.5
        )
    )
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    probe = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    assert not task.done(), "the dashboard did not start"
                    await asyncio.sleep(0.05)
        probe[1].close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        await writer.drain()
        async with asyncio.timeout(15):
            assert await reader.read() == b""  # closed by the server (it waited for good before)
        writer.close()
        async with httpx.AsyncClient(timeout=10) as http:  # a whole request is still answered
            assert (await http.get(f"http://127.0.0.1:{port}/")).status_code == 200
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_record_committed_while_the_page_is_read_is_streamed(
    settings: Settings, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace page read its 100 newest records, then the newest id apart, and streamed from
    that id: a record the owner (another connection) committed between the two reads was on neither
    the page nor the stream. The owner's commit is placed there by running it on the reader's first
    look past the query."""
    from audit_races import commit_after_the_first_query

    ws = open_workspace(settings, "gamma")
    tools = create_tools(ws)
    await tools["ls"].run({"path": "/"})
    ws.audit.flush()
    shown = ws.audit.top()
    after_query = commit_after_the_first_query(monkeypatch, ws)
    base = await serve(DataDirSource(settings))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        page = (await http.get("/w/gamma")).text
    late = ws.audit.top()
    assert after_query and late == shown + 1
    after = int(page.split("/audit?after=", 1)[1].split('"', 1)[0])
    assert after == shown < late  # not on the page (read before it): the stream must bring it
    await ws.close()


async def test_a_workspace_its_program_closed_is_no_longer_shown_awake_here(
    settings: Settings, serve: Serve
) -> None:
    """A ``Workspace`` given to the source stayed "awake in this process" after its program closed
    it (its file asleep, nothing holding it), and its closed runtime was asked for live runs."""
    ws = open_workspace(settings, "delta")
    await create_tools(ws)["ls"].run({"path": "/"})
    source = DataDirSource(settings, workspaces={"delta": ws})
    base = await serve(source)
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        assert "awake in this process" in (await http.get("/fragments/workspaces")).text
        await ws.close()
        await asyncio.sleep(0.6)  # past the listing's reuse (LIST_TTL, 0.5 s)
        rows = (await http.get("/fragments/workspaces")).text
        listed = (await http.get("/api/workspaces")).json()
    assert "delta" in rows and "awake in this process" not in rows
    (row,) = [r for r in listed if r["name"] == "delta"]
    assert row["state"] != "awake" and row["live_runs"] == 0
    assert await source.live_runtime("delta") is None


async def test_a_pool_worker_restarted_in_place_shows_no_negative_rate(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster view's runs/s of a worker is the change of its run count between two views; a
    worker Ray restarted in place (same name) counts from 0 again, and its rate was negative. A
    worker gone stayed in the samples for good (one entry per worker an elastic pool ever had)."""
    import computer.actors as actors
    from computer.dashboard import ClusterSource

    counts = {"computer:pool:shell-1": 40, "computer:pool:shell-2": 5}

    class _Stats:
        def __init__(self, name: str) -> None:
            self.name = name

        async def remote(self) -> dict[str, object]:
            return {"runs": counts[self.name], "node_id": "n1", "running": []}

    class _Handle:
        def __init__(self, name: str) -> None:
            self.stats = _Stats(name)

    def named_actor(name: str, namespace: str) -> _Handle:
        if name not in counts:
            raise ValueError(name)  # the scaler: not there
        return _Handle(name)

    monkeypatch.setattr(actors, "listed_nodes", lambda: [])
    monkeypatch.setattr(actors, "named_actors", lambda: [{"name": n} for n in counts])
    monkeypatch.setattr(actors, "named_actor", named_actor)
    source = ClusterSource(settings)
    first = {p["worker"]: p for p in (await source.cluster())["pools"]}
    assert first["shell-1"]["runs_per_s"] is None  # seen once: no rate yet
    counts["computer:pool:shell-1"] = 3  # restarted in place: counts from 0 again
    del counts["computer:pool:shell-2"]  # gone
    await asyncio.sleep(0.01)
    second = {p["worker"]: p for p in (await source.cluster())["pools"]}
    assert second["shell-1"]["runs"] == 3 and second["shell-1"]["runs_per_s"] is None
    assert list(source._pool_samples) == ["computer:pool:shell-1"]
    counts["computer:pool:shell-1"] = 5
    await asyncio.sleep(0.01)
    third = {p["worker"]: p for p in (await source.cluster())["pools"]}
    assert third["shell-1"]["runs_per_s"] is not None and third["shell-1"]["runs_per_s"] > 0
