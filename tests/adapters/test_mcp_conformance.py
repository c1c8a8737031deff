"""MCP conformance as a host meets it: the ``mcp`` SDK's own ``Client`` (mcp 2.3.0) drives a server
over a real ``Workspace`` with a shell backend, on stdio (``run_stdio`` in a subprocess) and on
streamable HTTP (``serve_http``), each in both protocol eras the SDK speaks: ``mode="legacy"`` (the
``initialize`` handshake, 2025-11-25) and ``mode="auto"`` (``server/discover``, 2026-07-28).

Covered, on each of the four connections: the handshake (version, ``serverInfo``, capabilities), one
``tools/list`` page (no ``nextCursor``; a cursor is ``-32602``), every listed schema valid JSON Schema
(Draft 2020-12, the ``jsonschema`` package) that accepts the calls made, ``tools/call`` of every tool
(a write of megabytes of non-ASCII text with every line break, byte for byte),
each tool's failure as an ``isError`` result (never a protocol error), ``ping`` (the handshake era:
2026-07-28 removed it), progress notifications of a running exec, and the cancellation of a long
exec: the program is gone from the machine's process table, not only the call from the client; a
program left running is listed by ``processes`` and ended by ``kill``.
Malformed requests are sent raw (the SDK's client cannot send them): see
``test_malformed_requests_get_json_rpc_errors_and_the_session_goes_on``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

import computer
from computer.runtime import ShellBackend
from computer.tools.mcp import package_version, serve_http

from ._loopback import free_port, wait_until_listening

ROOT = Path(__file__).parents[2]
SERVE = """
import asyncio, sys, computer
from computer.runtime import ShellBackend
from computer.tools.mcp import run_stdio

async def main():
    async with computer.Workspace(sys.argv[1], backends=[ShellBackend()], assets=True) as ws:
        await run_stdio(ws, processes=True)

asyncio.run(main())
"""
CONNECTIONS = ["stdio-legacy", "stdio-auto", "http-legacy", "http-auto"]
TOOLS = ["read", "ls", "find", "grep", "write", "edit", "delete", "exec", "publish", "processes", "kill"]

# A call that succeeds on the seeded workspace, per tool.
GOOD: dict[str, dict[str, Any]] = {
    "read": {"path": "/workspace/a.txt"},
    "ls": {"path": "/workspace"},
    "find": {"pattern": "**/*.py"},
    "grep": {"query": "alpha"},
    "write": {"path": "/workspace/new.txt", "content": "é\n"},
    "edit": {"path": "/workspace/a.txt", "edits": [{"oldText": "beta", "newText": "BETA"}]},
    "delete": {"path": "/workspace/new.txt"},
    "exec": {"command": "cat a.txt"},
    "publish": {"path": "/workspace/a.txt"},
    "processes": {},
}
# A call each tool fails, with a part of the message its error result carries.
FAILING: dict[str, tuple[dict[str, Any], str]] = {
    "read": ({"path": "/workspace/missing.txt"}, "No such file or directory"),
    "ls": ({"path": "/workspace/a.txt"}, "Not a directory"),
    "find": ({"pattern": "../x/*.py"}, ".."),
    "grep": ({"query": "a\nb"}, "newline"),
    "write": ({"path": "/.computer/x", "content": "x"}, "Permission denied"),
    "edit": (
        {"path": "/workspace/a.txt", "edits": [{"oldText": "zzz", "newText": "y"}]},
        "oldText was not found",
    ),
    "delete": ({"path": "/workspace/sub"}, "recursive: true"),
    "exec": ({"command": "true", "input": {"x": 1}}, "not callable"),
    "publish": ({"path": "/workspace/missing.txt"}, "No such file or directory"),
    "processes": ({"backend": 5}, "backend"),
    "kill": ({"pid": 999999}, "999999"),
}


async def _seed(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/sub", recursive=True)
    await ws.fs.write_file("/workspace/a.txt", "alpha\nbeta\n")
    await ws.fs.write_file("/workspace/sub/b.py", "print('hi')\n")


@asynccontextmanager
async def _stdio(tmp_path: Path, mode: str) -> AsyncIterator[Client]:
    db = tmp_path / "ws.sqlite"
    await _seeded(db)
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    params = StdioServerParameters(command=sys.executable, args=[str(script), str(db)], env=env)
    async with Client(params, mode=mode, read_timeout_seconds=120) as client:
        yield client


@asynccontextmanager
async def _http(tmp_path: Path, mode: str) -> AsyncIterator[Client]:
    async with computer.Workspace(backends=[ShellBackend()], assets=True) as ws:
        await _seed(ws)
        port = free_port()
        server = asyncio.create_task(serve_http(ws, "127.0.0.1", port, processes=True))
        try:
            await wait_until_listening(port)
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode, read_timeout_seconds=120) as client:
                yield client
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)


def connect(kind: str, tmp_path: Path) -> Any:
    """The SDK's client on ``kind`` (``transport-mode``), opened inside the test's own task (anyio's
    scopes must be left in the task that entered them, which an async fixture's teardown is not)."""
    transport, mode = kind.split("-")
    return (_stdio if transport == "stdio" else _http)(tmp_path, mode)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", CONNECTIONS)
async def test_handshake_listing_every_call_and_every_failure(kind: str, tmp_path: Path) -> None:
    async with connect(kind, tmp_path) as client:
        legacy = kind.endswith("legacy")
        assert client.protocol_version == ("2025-11-25" if legacy else "2026-07-28")
        assert client.server_info is not None
        assert (client.server_info.name, client.server_info.version) == ("computer", package_version())
        capabilities = client.server_capabilities
        assert capabilities.tools is not None and capabilities.tools.list_changed is False
        # Nothing is offered that is not served.
        assert (capabilities.resources, capabilities.prompts, capabilities.completions) == (None, None, None)

        listed = await client.list_tools()
        assert listed.next_cursor is None
        assert [t.name for t in listed.tools] == TOOLS
        with pytest.raises(MCPError) as cursor:
            await client.list_tools(cursor="page-2")
        assert cursor.value.error.code == types.INVALID_PARAMS

        schemas = {t.name: t.input_schema for t in listed.tools}
        for tool in listed.tools:
            # MCP: both schemas are JSON Schema objects whose root is of type "object".
            assert tool.input_schema["type"] == "object", tool.name
            jsonschema.Draft202012Validator.check_schema(tool.input_schema)
            if tool.output_schema is not None:
                assert tool.output_schema["type"] == "object", tool.name
                jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        for name, args in [*GOOD.items(), ("kill", {"pid": 999999})]:
            assert list(jsonschema.Draft202012Validator(schemas[name]).iter_errors(args)) == [], name

        for name, args in GOOD.items():
            result = await client.call_tool(name, args)
            assert result.is_error is False, (name, result.content)
            assert result.structured_content is not None, name
        exec_result = (await client.call_tool("exec", {"command": "cat a.txt"})).structured_content
        assert exec_result is not None and exec_result["stdout"] == "alpha\nBETA\n"

        for name, (args, says) in FAILING.items():
            failed = await client.call_tool(name, args)
            assert failed.is_error is True, (name, failed)
            text = failed.content[0]
            assert isinstance(text, types.TextContent) and says in text.text, (name, text)
            # The bare {"error"} reads "Error: ..."; publish answers its own shape, {"ok": false, "error"}.
            assert text.text.startswith('{"ok": false' if name == "publish" else "Error: "), name
            # Arguments the tool does not take are a failed call too, never a protocol error.
            unknown = await client.call_tool(name, {**args, "bogus": 1})
            assert unknown.is_error is True and "Unknown argument 'bogus'" in unknown.content[0].text  # type: ignore[union-attr]

        # A model's text: non-ASCII, every line break, megabytes; written byte for byte, and over the
        # write cap an error result, nothing written.
        unit = 'a\r\nb\rc\u2028d\u0085é 👩🏽‍💻 你好\t"\\\n'
        huge = unit * (int(1.9 * 2**20) // len(unit.encode()))  # 1.9 MiB of UTF-8, under the 2 MiB cap
        wrote = await client.call_tool("write", {"path": "/workspace/h ✓.txt", "content": huge})
        assert wrote.structured_content == {"path": "/workspace/h ✓.txt", "bytesWritten": len(huge.encode())}
        summed = (await client.call_tool("exec", {"command": "sha256sum 'h ✓.txt'"})).structured_content
        assert summed is not None and summed["stdout"].split()[0] == hashlib.sha256(huge.encode()).hexdigest()
        over = await client.call_tool("write", {"path": "/workspace/o.txt", "content": "x" * (2 * 2**20 + 1)})
        assert over.is_error is True and "write cap" in over.content[0].text  # type: ignore[union-attr]

        if legacy:
            with pytest.warns(MCPDeprecationWarning, match="ping is removed as of 2026-07-28"):
                assert isinstance(await client.send_ping(), types.EmptyResult)
        # The session is still good after every failure.
        assert (await client.call_tool("read", {"path": "/workspace/a.txt"})).is_error is False


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", CONNECTIONS)
async def test_cancelling_a_long_exec_stops_its_program(kind: str, tmp_path: Path) -> None:
    """``notifications/cancelled`` (the SDK's client sends it when the caller is cancelled) reaches the
    run: the program is gone from the machine, not only the call from the client; meanwhile its output
    arrived as progress notifications."""
    marker = f"3000.{uuid.uuid4().int % 10**9:09d}"  # a sleep whose command line nothing else has
    async with connect(kind, tmp_path) as client:
        messages: list[str] = []
        started = asyncio.Event()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            messages.append(message or "")
            if message and json.loads(message)["stdout"] == "started\n":
                started.set()

        call = asyncio.create_task(
            client.call_tool("exec", {"command": f"echo started; sleep {marker}"}, progress_callback=progress)
        )
        await asyncio.wait_for(started.wait(), 120)
        assert json.loads(messages[0])["status"] == "running"
        assert await _until(lambda: bool(_running(marker)))  # the program runs on this machine
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        assert call.cancelled()
        assert await _until(lambda: not _running(marker)), _running(marker)
        listed = (await client.call_tool("processes", {})).structured_content
        assert listed is not None and not any(marker in p["command"] for p in listed["processes"])
        # The session goes on: the next run works.
        again = await client.call_tool("exec", {"command": "echo after"})
        assert again.structured_content is not None and again.structured_content["stdout"] == "after\n"


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
# (a request line as sent, the error code it gets); each request has its own id, -32700 none.
_MALFORMED: list[tuple[str, int]] = [
    ("{not json", types.PARSE_ERROR),
    ('{"jsonrpc": "2.0", "id": 10, "method": "tools/frobnicate"}', types.METHOD_NOT_FOUND),
    ('{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {}}', types.INVALID_PARAMS),
    ('{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": 5}}', types.INVALID_PARAMS),
    (
        '{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "read", "arguments": "x"}}',
        types.INVALID_PARAMS,
    ),
    ('{"jsonrpc": "2.0", "id": 14, "method": "tools/list", "params": {"cursor": 5}}', types.INVALID_PARAMS),
]
_READ = {
    "jsonrpc": "2.0",
    "id": 15,
    "method": "tools/call",
    "params": {"name": "read", "arguments": {"path": "/workspace/a.txt"}},
}


def test_malformed_requests_get_json_rpc_errors_and_the_session_goes_on(tmp_path: Path) -> None:
    """On stdio, after the handshake: a line that is not JSON is ``-32700`` (null id), an unknown method
    ``-32601``, a ``tools/call`` without a string ``name`` or with arguments that are no object, and a
    cursor that is no string, ``-32602``, each with its own id; the next call and ``ping`` are answered."""
    db = tmp_path / "ws.sqlite"
    asyncio.run(_seeded(db))
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    sent = [json.dumps(_INITIALIZE), '{"jsonrpc": "2.0", "method": "notifications/initialized"}']
    sent += [line for line, _ in _MALFORMED]
    sent += [json.dumps(_READ), '{"jsonrpc": "2.0", "id": 16, "method": "ping"}']
    done = subprocess.run(
        [sys.executable, str(script), str(db)],
        input="".join(line + "\n" for line in sent),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, None, 10, 11, 12, 13, 14, 15, 16], replies
    codes = [r["error"]["code"] for r in replies[1:-2]]
    assert codes == [code for _, code in _MALFORMED]
    assert replies[-2]["result"]["structuredContent"]["content"] == "alpha\nbeta"
    assert replies[-1]["result"] == {}


async def test_malformed_http_requests_get_json_rpc_errors_in_both_eras() -> None:
    """Over streamable HTTP: a body that is not JSON is a ``400`` carrying ``-32700``, in the handshake
    era (a session) and the 2026-07-28 one (no session); an unknown method and bad ``tools/call``
    params are answered ``-32601``/``-32602`` with the request's id; the session goes on."""
    import httpx

    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with computer.Workspace() as ws:
        await _seed(ws)
        port = free_port()
        server = asyncio.create_task(serve_http(ws, "127.0.0.1", port))
        try:
            await wait_until_listening(port)
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx.AsyncClient(timeout=60) as http:
                opened = await http.post(url, json=_INITIALIZE, headers=headers)
                session = {
                    **headers,
                    "mcp-session-id": opened.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-11-25",
                }
                await http.post(
                    url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
                )
                answers = [await http.post(url, content=line, headers=session) for line, _ in _MALFORMED]
                read = await http.post(url, json=_READ, headers=session)
                modern = await http.post(
                    url, content="{not json", headers={**headers, "mcp-protocol-version": "2026-07-28"}
                )
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    assert answers[0].status_code == 400 and answers[0].json()["error"]["code"] == types.PARSE_ERROR
    for (line, code), answer in zip(_MALFORMED[1:], answers[1:], strict=True):
        reply = _sse_message(answer.text)
        assert (reply["id"], reply["error"]["code"]) == (json.loads(line)["id"], code), reply
    assert _sse_message(read.text)["result"]["structuredContent"]["content"] == "alpha\nbeta"
    assert modern.status_code == 400 and modern.json()["error"]["code"] == types.PARSE_ERROR


def _sse_message(body: str) -> dict[str, Any]:
    """The one JSON-RPC message of a server-sent event stream's body."""
    data = [line[len("data:") :] for line in body.splitlines() if line.startswith("data:")]
    assert len(data) == 1, body
    message: dict[str, Any] = json.loads(data[0])
    return message


async def _seeded(db: Path) -> None:
    async with computer.Workspace(str(db)) as ws:
        await _seed(ws)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", CONNECTIONS)
async def test_a_background_program_is_listed_and_killed(kind: str, tmp_path: Path) -> None:
    """The optional ``processes`` and ``kill`` (``processes=True``): a program an exec left running in
    the live sandbox is listed, and ``kill`` ends it: ``exited: true`` and gone from the machine."""
    marker = f"3001.{uuid.uuid4().int % 10**9:09d}"
    async with connect(kind, tmp_path) as client:
        started = await client.call_tool("exec", {"command": f"sleep {marker} > /dev/null 2>&1 &"})
        assert started.is_error is False, started.content
        listed = (await client.call_tool("processes", {})).structured_content
        assert listed is not None
        (running,) = [p for p in listed["processes"] if marker in p["command"]]
        assert _running(marker)
        killed = await client.call_tool("kill", {"pid": running["pid"]})
        assert killed.is_error is False and killed.structured_content is not None, killed.content
        assert killed.structured_content["exited"] is True
        assert await _until(lambda: not _running(marker)), _running(marker)


async def _until(condition: Any, seconds: float = 60) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)  # a process table has nothing to await on
    return True


def _running(marker: str) -> list[int]:
    """Pids on this machine whose command line holds ``marker`` (the sandbox's pid namespace is a
    child of ours, so its processes are in our /proc), the shell that started it aside."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if marker.encode() in cmdline and b"echo started" not in cmdline:
            found.append(int(entry.name))
    return found
