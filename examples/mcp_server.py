"""Serve a workspace over MCP, and talk to it with an MCP client, offline.

    python examples/mcp_server.py            # in-process client session against the server
    python examples/mcp_server.py --stdio    # serve on stdin/stdout (for an MCP host's config)
    python examples/mcp_server.py --http 8765  # streamable HTTP at http://127.0.0.1:8765/mcp

The workspace is a SQLite file next to this script's working directory (``example.sqlite``), so what a
host writes survives restarts.
"""

from __future__ import annotations

import asyncio
import sys

import mcp_types as types
from mcp import Client

import computer
from computer.runtime import ShellBackend
from computer.tools.mcp import create_mcp_server, run_stdio, serve_http


async def demo() -> None:
    async with computer.Workspace(backends=[ShellBackend()]) as workspace:
        await workspace.fs.mkdir("/workspace", recursive=True)
        async with Client(create_mcp_server(workspace)) as client:
            for tool in (await client.list_tools()).tools:
                hints = tool.annotations
                flags = [
                    f
                    for f, on in (
                        ("read-only", hints and hints.read_only_hint),
                        ("destructive", hints and hints.destructive_hint),
                    )
                    if on
                ]
                print(f"{tool.name}: {', '.join(flags) or '-'}")
            await client.call_tool("write", {"path": "/workspace/readme.md", "content": "# Hello\n"})
            result = await client.call_tool("exec", {"command": "wc -c readme.md"})
            print("exec:", result.structured_content)
            listing = await client.call_tool("find", {"pattern": "*.md"})
            first = listing.content[0]
            print("find:", first.text if isinstance(first, types.TextContent) else first)


async def serve(mode: str, port: int) -> None:
    async with computer.Workspace("example.sqlite", backends=[ShellBackend()]) as workspace:
        if mode == "--stdio":
            await run_stdio(workspace)
        else:
            await serve_http(workspace, "127.0.0.1", port)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8765))
    else:
        asyncio.run(demo())
