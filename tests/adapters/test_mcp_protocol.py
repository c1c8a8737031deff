"""MCP protocol details checked with the SDK's own client: serverInfo, protocol errors, output
schemas, and a clean stop of the HTTP server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError

from computer import Workspace
from computer.tools import create_tools
from computer.tools.mcp import create_mcp_server, package_version, serve_http

from ._every_tool import GOOD, EverySurface
from ._loopback import free_port, wait_until_listening


async def test_server_info_carries_the_package_version(surface: EverySurface) -> None:
    assert package_version() == metadata.version("ray-computer") != ""
    async with Client(create_mcp_server(surface)) as client:
        info = client.server_info
    assert info is not None and info.name == "computer"
    assert info.version == metadata.version("ray-computer")


async def test_an_unknown_tool_is_invalid_params_naming_the_tools(surface: EverySurface) -> None:
    async with Client(create_mcp_server(surface, processes=True)) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("lss", {"path": "/"})
    assert raised.value.error.code == types.INVALID_PARAMS == -32602
    assert "Unknown tool 'lss'" in raised.value.error.message and "processes" in raised.value.error.message


async def test_every_result_meets_its_declared_output_schema(surface: EverySurface) -> None:
    """The SDK client validates structuredContent against outputSchema and raises if it does not fit."""
    async with Client(create_mcp_server(surface, processes=True)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert {n for n, t in listed.items() if t.output_schema} == {
            "write",
            "edit",
            "delete",
            "publish",
            "processes",
            "kill",
        }
        for name, args in GOOD.items():
            result = await client.call_tool(name, args)
            assert result.is_error is False, (name, result.content)
        # A failure of a fixed-shape tool is an error result, which clients do not check.
        gone = await client.call_tool("kill", {"pid": 42})
        assert gone.is_error is True and "no process 42" in gone.content[0].text  # type: ignore[union-attr]


# A bare ``initialize`` request over HTTP, as a browser page or a client that is not the SDK sends it.
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
async def http_server(
    surface: EverySurface, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[tuple[int, asyncio.Task[None]]]:
    """``serve_http`` running on a free loopback port (stopped by the test, or here if it did not)."""
    caplog.set_level(logging.INFO)
    port = free_port()
    server = asyncio.create_task(serve_http(surface, "127.0.0.1", port))
    await wait_until_listening(port)
    yield port, server
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_cancelling_serve_http_stops_cleanly_and_frees_the_port(
    http_server: tuple[int, asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    port, server = http_server
    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
        result = await client.call_tool("ls", {"path": "/workspace"})
    assert result.is_error is False
    server.cancel()
    with pytest.raises(asyncio.CancelledError):
        await server
    assert _errors(caplog) == []
    with socket.socket() as again:  # the listening socket is closed
        again.bind(("127.0.0.1", port))


async def test_serve_http_stops_while_a_client_session_is_still_open(
    http_server: tuple[int, asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    port, server = http_server
    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
        await client.list_tools()
        server.cancel()
        async with asyncio.timeout(30):  # bounded by the shutdown grace, not by the open session
            with pytest.raises(asyncio.CancelledError):
                await server
    assert _errors(caplog) == []


def test_tool_set_options_reach_the_mcp_server(surface: EverySurface) -> None:
    tools = create_tools(surface, names="think", processes=True)
    server = create_mcp_server(tools)
    assert server.version == package_version()


@pytest.mark.parametrize("bind", ["127.0.0.2", "LOCALHOST"])
async def test_serve_http_on_any_loopback_bind_checks_host_and_origin(bind: str) -> None:
    """The SDK checks ``Host``/``Origin`` (DNS rebinding) for ``127.0.0.1``, ``localhost`` and ``::1``
    spelled so; bound to ``127.0.0.2`` (or ``LOCALHOST``) it served exec to ``Host: evil.example``."""
    import httpx

    target = "127.0.0.2" if bind == "127.0.0.2" else "127.0.0.1"
    port = free_port(target)
    ws = Workspace()
    server = asyncio.create_task(serve_http(ws, bind, port))
    try:
        await wait_until_listening(port, host=target)
        async with httpx.AsyncClient(timeout=30) as http:
            url = f"http://{target}:{port}/mcp"
            rebound = await http.post(
                url, json=_INITIALIZE, headers={**_HEADERS, "host": f"evil.example:{port}"}
            )
            foreign = await http.post(
                url, json=_INITIALIZE, headers={**_HEADERS, "origin": "http://evil.example"}
            )
            own = await http.post(url, json=_INITIALIZE, headers=_HEADERS)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        await ws.close()
    assert (rebound.status_code, foreign.status_code, own.status_code) == (421, 403, 200)


async def test_serve_http_beyond_loopback_needs_a_token_before_anything_is_bound() -> None:
    """Bound to an address that is not loopback, ``serve_http`` served every tool, exec included, to
    anyone who reached it (the SDK checks nothing there). Without a token it now refuses to start: the
    error comes before any socket is bound (nothing beyond loopback is touched here)."""
    ws = Workspace()
    try:
        with pytest.raises(ValueError, match="needs a token"):
            await asyncio.wait_for(serve_http(ws, "0.0.0.0", free_port()), 30)
    finally:
        await ws.close()


async def test_serve_http_with_a_token_answers_only_requests_that_carry_it() -> None:
    """Given a token (what a bind beyond loopback needs), every request must carry ``Authorization:
    Bearer <token>``: none, or another, is a 401 and reaches no tool."""
    import httpx

    port = free_port()
    ws = Workspace()
    server = asyncio.create_task(serve_http(ws, "127.0.0.1", port, token="s3cret-é"))
    try:
        await wait_until_listening(port)
        async with httpx.AsyncClient(timeout=30) as http:
            url = f"http://127.0.0.1:{port}/mcp"
            codes = []
            for auth in (None, "Bearer nope", "Basic czNjcmV0", "Bearer s3cret-é".encode()):
                extra = {} if auth is None else {"authorization": auth}
                codes.append(
                    (await http.post(url, json=_INITIALIZE, headers={**_HEADERS, **extra})).status_code
                )
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        await ws.close()
    assert codes == [401, 401, 401, 200]


async def test_serve_http_cuts_off_a_client_that_never_completes_its_request_head() -> None:
    """As the dashboard and the share-link server: uvicorn arms no timer on a new connection, so a
    client that trickled a head without its end held its socket for good (slowloris)."""
    port = free_port()
    ws = Workspace()
    server = asyncio.create_task(serve_http(ws, "127.0.0.1", port, head_timeout=0.5))
    try:
        await wait_until_listening(port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        await writer.drain()
        async with asyncio.timeout(15):
            assert await reader.read() == b""  # closed by the server (it waited for good before)
        writer.close()
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        await ws.close()


# Requests whose id is not a string or an integer (MCP: never null). The SDK's reader took each for a
# notification (its notification model ignores unknown members): no answer on stdio, a bodiless 202
# over HTTP, and the caller waited for good. JSON-RPC 2.0 answers -32600 with a null id.
_BAD_IDS: list[object] = [{"a": 1}, [1], 2.0, 1.5, True, None]


def _request(request_id: object, method: str = "tools/list") -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method}


def _serve_stdio(tmp_path: Path, lines: list[Any], tail: str = "") -> list[dict[str, Any]]:
    """The replies of ``run_stdio`` (serving ``fd0``, a tool reading fd 0) to ``lines`` and then ``tail``."""
    script = tmp_path / "serve.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, os
            from pydantic import BaseModel
            from computer.tools import Tool
            from computer.tools.mcp import run_stdio

            class Args(BaseModel):
                pass

            async def fd0(_args, _update):
                return {"read": os.read(0, 100).decode()}

            asyncio.run(run_stdio({"fd0": Tool("fd0", "Read fd 0.", Args, fd0)}))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        input="".join(json.dumps(line) + "\n" for line in lines) + tail,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_stdio_request_whose_id_is_no_string_or_integer_is_an_invalid_request(tmp_path: Path) -> None:
    """Each bad id gets -32600 (null id), the good requests around them their answers, and fd 0 still
    reads the null device while serving (the stdin claim the SDK made is now ``run_stdio``'s)."""
    lines = [
        _INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(_request(bad) for bad in _BAD_IDS),
        {**_request({"x": 1}, "tools/call"), "params": {"name": "fd0", "arguments": {}}},
        _request(2),
        {**_request(3, "tools/call"), "params": {"name": "fd0", "arguments": {}}},
    ]
    replies = _serve_stdio(tmp_path, lines, "still the client's\n")
    refused = [r for r in replies if r["id"] is None and r["error"]["code"] == types.INVALID_REQUEST]
    assert len(refused) == len(_BAD_IDS) + 1, replies
    assert "the id must be a string or an integer, not an object" in refused[0]["error"]["message"]
    answered = {r["id"]: r for r in replies if r["id"] is not None}
    assert sorted(answered) == [1, 2, 3]
    assert "tools" in answered[2]["result"]
    assert answered[3]["result"]["structuredContent"] == {"read": ""}  # fd 0 is not the wire


async def test_an_http_request_whose_id_is_no_string_or_integer_is_an_invalid_request(
    http_server: tuple[int, asyncio.Task[None]],
) -> None:
    """Over the handshake-era streamable HTTP (a session), as over the 2026-07-28 entry: a 400 carrying
    -32600, never a 202. A JSON body that is no message is -32600 too (the SDK said -32602)."""
    import httpx

    port, _ = http_server
    url = f"http://127.0.0.1:{port}/mcp"
    async with httpx.AsyncClient(timeout=30) as http:
        opened = await http.post(url, json=_INITIALIZE, headers=_HEADERS)
        session = {
            **_HEADERS,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-03-26",
        }
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        bad = [await http.post(url, json=_request(value), headers=session) for value in _BAD_IDS]
        wrong_method = await http.post(url, json={**_request(7), "method": 5}, headers=session)
        batch = await http.post(url, json=[_request(8, "ping")], headers=session)
        good = await http.post(url, json=_request(9, "ping"), headers=session)
        notified = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/x"}, headers=session)
    for response in bad:
        assert response.status_code == 400, response.text
        assert response.json()["id"] is None and response.json()["error"]["code"] == -32600
    assert "not an array" in bad[1].json()["error"]["message"]
    assert (wrong_method.status_code, wrong_method.json()["id"], wrong_method.json()["error"]["code"]) == (
        400,
        7,
        -32600,
    )
    assert (batch.status_code, batch.json()["error"]["code"]) == (400, -32600)
    assert good.status_code == 200 and '"id":9,"result":{}' in good.text
    assert notified.status_code == 202


async def test_a_tools_list_cursor_is_invalid_params(surface: EverySurface) -> None:
    """Every tool is on one page and no ``nextCursor`` is sent, so a cursor is one the server never gave:
    the spec answers it ``-32602``. It listed the first page again, so a client paging by a cursor it
    kept from elsewhere looped or got duplicates."""
    async with Client(create_mcp_server(surface)) as client:
        first = await client.list_tools()
        with pytest.raises(MCPError) as raised:
            await client.list_tools(cursor="page-2")
        again = await client.list_tools()
    assert first.next_cursor is None and [t.name for t in again.tools] == [t.name for t in first.tools]
    assert raised.value.error.code == types.INVALID_PARAMS
    assert "Invalid cursor 'page-2'" in raised.value.error.message


def test_a_stdio_request_with_a_good_id_on_a_bad_envelope_is_answered_with_its_id(tmp_path: Path) -> None:
    """No ``"jsonrpc": "2.0"`` (a client that leaves it out), a ``method`` that is no string, ``params``
    that are no object: the SDK answered -32600 with a null id, which its caller (waiting on id 4, 5,
    6) could not match: it waited for good."""
    replies = _serve_stdio(
        tmp_path,
        [
            _INITIALIZE,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"id": 4, "method": "ping"},
            {**_request("five", "ping"), "jsonrpc": "1.0"},
            {**_request(6), "method": 6},
            {**_request(7, "ping"), "params": [1]},
            _request(8, "ping"),
        ],
    )
    by_id = {reply["id"]: reply for reply in replies}
    assert sorted(by_id, key=str) == sorted([1, 4, "five", 6, 7, 8], key=str), replies
    for request_id, needle in (
        (4, '"jsonrpc" must be "2.0"'),
        ("five", "jsonrpc"),
        (6, '"method"'),
        (7, '"params"'),
    ):
        error = by_id[request_id]["error"]
        assert isinstance(error, dict) and error["code"] == -32600 and needle in error["message"]
    assert by_id[8]["result"] == {}


@pytest.mark.parametrize("second_id", ["1", 1])
async def test_an_http_request_reusing_the_id_of_one_in_flight_is_refused_and_the_first_answered(
    second_id: object,
) -> None:
    """The SDK keys a session's response streams by ``str(id)``: a second request with id ``"1"`` (or
    ``1`` again) while call ``1`` ran took over its stream, and call ``1``'s answer never came (its
    caller waited for good). The second is refused now (-32600, its own id) and the first answered."""
    import httpx
    from pydantic import BaseModel

    from computer.tools import Tool

    started, release = asyncio.Event(), asyncio.Event()

    class Args(BaseModel):
        pass

    async def hold(_args: Args, _update: object) -> dict[str, object]:
        started.set()
        await asyncio.wait_for(release.wait(), 30)
        return {"held": True}

    port = free_port()
    server = asyncio.create_task(serve_http({"hold": Tool("hold", "Hold.", Args, hold)}, "127.0.0.1", port))
    try:
        await wait_until_listening(port)
        async with httpx.AsyncClient(timeout=30) as http:
            url = f"http://127.0.0.1:{port}/mcp"
            opened = await http.post(url, json=_INITIALIZE, headers=_HEADERS)
            session = {
                **_HEADERS,
                "mcp-session-id": opened.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-03-26",
            }
            await http.post(
                url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
            )
            call = {"method": "tools/call", "params": {"name": "hold", "arguments": {}}}
            first = asyncio.create_task(http.post(url, json={**_request(1), **call}, headers=session))
            await asyncio.wait_for(started.wait(), 30)
            second = await http.post(url, json={**_request(second_id), **call}, headers=session)
            release.set()
            answered = await asyncio.wait_for(first, 30)
            third = await http.post(url, json={**_request(1), **call}, headers=session)  # 1 is free again
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    assert second.status_code == 400 and second.json()["id"] == second_id
    assert second.json()["error"]["code"] == -32600 and "still in flight" in second.json()["error"]["message"]
    assert answered.status_code == 200 and '"id":1,' in answered.text and '"held":true' in answered.text
    assert third.status_code == 200 and '"held":true' in third.text


def test_a_stdio_request_nested_past_pythons_recursion_limit_is_answered_with_its_id(tmp_path: Path) -> None:
    """The SDK's parser refuses ~255 levels, and Python's ``json`` (which found the id to answer with)
    raised ``RecursionError`` past ~1000: the parse error went out with a null id and the caller of
    that request waited for good. The id is now read from the top level alone, wherever it stands;
    a notification that deep still gets nothing, and the next request its answer."""
    deep = "[" * 5000 + "]" * 5000
    tail = "".join(
        line.replace("DEEP", deep) + "\n"
        for line in (
            '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "fd0", "arguments": DEEP}}',
            '{"jsonrpc": "2.0", "method": "tools/call", "params": DEEP, "id": "late"}',
            '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": DEEP}}',
            '{"jsonrpc": "2.0", "id": {"a": DEEP}, "method": "tools/list"}',
            json.dumps(_request(8)),
        )
    )
    lines = [_INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    replies = _serve_stdio(tmp_path, lines, tail)[1:]
    assert [r["id"] for r in replies] == [7, "late", None, 8], replies
    for reply in replies[:2]:
        assert reply["error"]["code"] == types.PARSE_ERROR
        assert "nested too deeply to read" in reply["error"]["message"]
    assert "tools" in replies[3]["result"]
