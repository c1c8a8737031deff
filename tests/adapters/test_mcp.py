"""MCP adapter: an MCP client session against the server (in-process, stdio and streamable HTTP)."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client

import computer
from computer.tools import Tool
from computer.tools.mcp import create_mcp_server

from .conftest import PNG


async def test_listing_keeps_names_descriptions_schemas_and_annotations(
    sample_tools: dict[str, Tool],
) -> None:
    async with Client(create_mcp_server(sample_tools)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert list(listed) == list(sample_tools)
    for name, tool in sample_tools.items():
        assert listed[name].description == tool.description
        assert listed[name].input_schema == tool.parameters
    assert listed["get"].annotations is not None and listed["get"].annotations.read_only_hint is True
    run = listed["run"].annotations
    assert run is not None and run.read_only_hint is False and run.destructive_hint is True


async def test_core_tool_annotations() -> None:
    async with Client(create_mcp_server(computer.Workspace())) as client:
        notes = {t.name: t.annotations for t in (await client.list_tools()).tools}
    assert {n for n, a in notes.items() if a and a.read_only_hint} == {"read", "ls", "find", "grep"}
    assert all(a and a.destructive_hint for n, a in notes.items() if n in ("write", "edit", "delete"))
    assert all(a and a.idempotent_hint for a in notes.values())


async def test_fixed_shape_tools_declare_an_output_schema_their_results_meet(tmp_path: Path) -> None:
    """The SDK's client validates each non-error result against the declared schema (and raises)."""

    class Assets:  # publish is offered with an asset store
        async def share(self, path: str, **options: Any) -> str:
            return "http://127.0.0.1:1/x/a.txt"

    async with computer.Workspace(assets=Assets()) as ws, Client(create_mcp_server(ws)) as client:
        listed = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        assert {n for n, schema in listed.items() if schema} == {"write", "edit", "delete", "publish"}
        assert all(schema["type"] == "object" for schema in listed.values() if schema)
        results = [
            await client.call_tool("write", {"path": "/workspace/a.txt", "content": "one\n"}),
            await client.call_tool(
                "edit", {"path": "/workspace/a.txt", "edits": [{"oldText": "one", "newText": "two"}]}
            ),
            await client.call_tool("publish", {"path": "/workspace/a.txt"}),
            await client.call_tool("delete", {"path": "/workspace/a.txt"}),
        ]
    for result in results:
        assert result.is_error is False and result.structured_content


async def test_a_call_returns_text_and_structured_content(sample_tools: dict[str, Tool]) -> None:
    async with Client(create_mcp_server(sample_tools)) as client:
        result = await client.call_tool("put", {"path": "/a", "content": "xy"})
    assert result.is_error is False
    assert result.structured_content == {"path": "/a", "bytesWritten": 2}
    assert isinstance(result.content[0], types.TextContent)
    assert json.loads(result.content[0].text) == {"path": "/a", "bytesWritten": 2}


async def test_failures_are_error_results(sample_tools: dict[str, Tool]) -> None:
    async with Client(create_mcp_server(sample_tools)) as client:
        missing = await client.call_tool("get", {"path": "/missing"})
        invalid = await client.call_tool("get", {"path": "/a", "limit": 0})
    for result, needle in ((missing, "No such file"), (invalid, "limit")):
        assert result.is_error is True
        assert isinstance(result.content[0], types.TextContent) and needle in result.content[0].text


async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(sample_tools: dict[str, Tool]) -> None:
    from mcp.shared.exceptions import MCPError

    async with Client(create_mcp_server(sample_tools)) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("nope", {})
        after = await client.call_tool("put", {"path": "/a", "content": "x"})
    assert caught.value.code == -32602 == types.INVALID_PARAMS
    assert "Unknown tool 'nope'" in caught.value.message and "put" in caught.value.message
    assert after.is_error is False


async def test_images_are_image_content_and_pdfs_embedded_blobs(sample_tools: dict[str, Tool]) -> None:
    async with Client(create_mcp_server(sample_tools)) as client:
        shown = await client.call_tool("show", {"kind": "image"})
        image = shown.content[1]
        pdf = (await client.call_tool("show", {"kind": "pdf"})).content[1]
    assert isinstance(image, types.ImageContent)
    assert shown.structured_content == {"path": "/p.png", "kind": "image", "mediaType": "image/png"}
    assert image.mime_type == "image/png" and base64.b64decode(image.data) == PNG
    assert isinstance(pdf, types.EmbeddedResource)
    assert (
        isinstance(pdf.resource, types.BlobResourceContents) and pdf.resource.mime_type == "application/pdf"
    )


async def test_progress_notifications_carry_updates(sample_tools: dict[str, Tool]) -> None:
    seen: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message))

    async with Client(create_mcp_server(sample_tools)) as client:
        await client.call_tool("run", {"command": "go"}, progress_callback=progress)
    assert seen == [(1.0, json.dumps({"status": "running", "stdout": "tick\n"}))]


async def test_stdio_server_subprocess_serves_a_workspace(tmp_path: Path) -> None:
    from mcp.client.stdio import StdioServerParameters

    db = tmp_path / "ws.sqlite"
    script = tmp_path / "serve.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, computer
            from computer.tools.mcp import run_stdio

            async def main():
                async with computer.Workspace({str(db)!r}) as ws:
                    await run_stdio(ws)

            asyncio.run(main())
            """
        )
    )
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    async with Client(params) as client:
        wrote = await client.call_tool("write", {"path": "/workspace/s.txt", "content": "over stdio"})
        read = await client.call_tool("read", {"path": "/workspace/s.txt"})
    assert wrote.is_error is False
    assert isinstance(read.content[0], types.TextContent) and read.content[0].text == "over stdio"


async def test_streamable_http_server_serves_a_workspace() -> None:
    from computer.tools.mcp import serve_http

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with computer.Workspace() as ws:
        server = asyncio.create_task(serve_http(ws, "127.0.0.1", port))
        try:
            result = await _call_when_up(f"http://127.0.0.1:{port}/mcp", "ls", {"path": "/"})
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    assert result.is_error is False
    assert result.structured_content is not None and result.structured_content["path"] == "/"


async def _call_when_up(url: str, name: str, args: dict[str, Any]) -> types.CallToolResult:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            async with Client(url) as client:
                return await client.call_tool(name, args)
        except Exception:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)  # the server is still binding its port; nothing to await on


async def test_cancelling_a_call_kills_a_running_exec() -> None:
    from computer.runtime.types import ExecSnapshot
    from computer.tools.exec import create_exec_tool

    from ._fake_runtime import SHELL, ScriptedRuntime, ScriptedWorkspace

    rt = ScriptedRuntime(
        [SHELL], hang=True, snapshots=[ExecSnapshot("exec-1", "shell", "running", None, "", "")]
    )
    async with Client(create_mcp_server({"exec": create_exec_tool(ScriptedWorkspace(rt))})) as client:
        call = asyncio.create_task(client.call_tool("exec", {"command": "sleep 100"}))
        await asyncio.wait_for(rt.waiting.wait(), 10)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        # The server learns of the cancellation through the transport, a step after the client.
        await asyncio.wait_for(rt.handles[0].killed_event.wait(), 10)
