"""MCP adapter: serve the workspace tools over the Model Context Protocol (official ``mcp`` SDK, v2).

::

    server = create_mcp_server(workspace)        # a low-level mcp.server.Server
    await run_stdio(workspace)                   # serve on stdin/stdout
    await serve_http(workspace, "127.0.0.1", 8765)   # streamable HTTP at http://127.0.0.1:8765/mcp

``serverInfo`` names the server (``computer`` by default) with this package's version.
Tools keep their names, descriptions and JSON schemas (passed through as ``inputSchema``). Each carries
annotations: ``readOnlyHint`` for the tools that do not change the workspace (read, ls, find,
grep, processes), ``destructiveHint`` from the core tool's own flag, ``idempotentHint`` (everything but
exec, publish and kill) and ``openWorldHint`` (exec, publish); the fixed-shape ones (write, edit, delete,
publish, processes, kill) declare their ``outputSchema``. Results are text content plus ``structuredContent`` (the result dict); images from ``read`` are ``ImageContent`` and PDFs an embedded blob resource. A failed call (bad arguments included) is a
result with ``isError: true``; an unknown tool name is a JSON-RPC error ``-32602`` (invalid params). While exec runs, a client that sent a progress token receives each
snapshot as a progress notification (the message is the snapshot as JSON). Cancelling ``serve_http``
stops the HTTP server through its normal shutdown.
"""

from __future__ import annotations

import asyncio
import json
from importlib import metadata
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from ..storage import audit_caller
from ..surface import WorkspaceSurface
from ._adapter_tools import build_tools, record_refused, unknown_tool
from ._arguments import ArgumentError, parse_arguments
from ._tool import ContentPart, Tool

__all__ = ["create_mcp_server", "mcp_tool", "package_version", "run_stdio", "serve_http"]

SHUTDOWN_GRACE = 5  # seconds serve_http lets requests in flight finish when it is stopped
_IDEMPOTENT = frozenset({"read", "ls", "find", "grep", "write", "edit", "delete", "processes"})
_OPEN_WORLD = frozenset({"exec", "publish"})


def create_mcp_server(
    workspace: WorkspaceSurface, *, name: str = "computer", instructions: str | None = None, **options: Any
) -> Server[Any]:
    """A low-level MCP ``Server`` listing and calling ``create_tools(workspace, **options)``."""
    tools = build_tools(workspace, options)
    listing = types.ListToolsResult(tools=[mcp_tool(tool) for tool in tools.values()])

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = tools.get(params.name)
        with audit_caller(adapter="mcp"):
            if tool is None:
                # SPEC section 10: an unknown tool is a protocol error (invalid params), not a tool result.
                message = unknown_tool(tools, params.name)
                record_refused(tools, params.name, params.arguments, message)
                raise MCPError(types.INVALID_PARAMS, message)
            try:
                arguments = parse_arguments(params.arguments, params.name)
            except ArgumentError as exc:
                tool.record_refused(params.arguments, str(exc))
                return _error(str(exc))
            result = await tool.run(arguments, on_update=_progress_forwarder(ctx))
        if "error" in result and len(result) == 1:
            return _error(str(result["error"]))
        content: list[types.ContentBlock] = [_content_block(part) for part in tool.to_model_output(result)]
        # Media bytes travel once, in the image/resource block, not again in the structured copy.
        structured = {k: v for k, v in result.items() if k != "data"} if "kind" in result else result
        return types.CallToolResult(
            content=content, structured_content=structured, is_error="error" in result
        )

    return Server(
        name,
        version=package_version(),
        instructions=instructions
        or "Tools over one durable workspace filesystem. Paths are absolute; the user root is /workspace.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def package_version() -> str:
    """This package's version from its installed metadata (``serverInfo.version``); ``"0"`` when unknown."""
    try:
        return metadata.version("ray-computer")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


def mcp_tool(tool: Tool) -> types.Tool:
    """The MCP declaration of one core tool, with behaviour annotations.

    A tool with a fixed result shape (write, edit, delete, publish, processes, kill) declares it as ``outputSchema``:
    the spec makes its ``structuredContent`` conform, and clients check it (the SDK's ``Client``
    validates every result that is not an error). The others' results vary with what they return
    (text, listings, media, exec snapshots) and declare none.
    """
    schema = tool.output_schema
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.parameters,
        output_schema=schema if schema is not None and schema.get("type") == "object" else None,
        annotations=types.ToolAnnotations(
            read_only_hint=not tool.mutating,
            destructive_hint=tool.destructive if tool.mutating else False,
            idempotent_hint=tool.name in _IDEMPOTENT,
            open_world_hint=tool.name in _OPEN_WORLD,
        ),
    )


async def run_stdio(workspace: WorkspaceSurface, **options: Any) -> None:
    """Serve the tools of ``workspace`` on stdin/stdout until the client disconnects."""
    from mcp.server.stdio import stdio_server

    server = create_mcp_server(workspace, **options)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(
    workspace: WorkspaceSurface,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    path: str = "/mcp",
    **options: Any,
) -> None:
    """Serve the tools over streamable HTTP at ``http://host:port/mcp`` until cancelled.

    Cancelling the caller stops the server cleanly: it stops accepting, lets requests in flight finish
    (up to ``SHUTDOWN_GRACE`` seconds), runs the app's shutdown, then re-raises the cancellation; no
    error is logged.
    """
    import uvicorn

    server = create_mcp_server(workspace, **options)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
    )
    http = uvicorn.Server(config)
    serving = asyncio.create_task(http.serve())
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        # Cancelling uvicorn's serve() mid-flight leaves its lifespan task to log a traceback; asking
        # it to exit runs the normal shutdown instead.
        http.should_exit = True
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            http.force_exit = True  # cancelled again: skip the grace period
            await serving
        raise


def _progress_forwarder(ctx: ServerRequestContext[Any]) -> Any:
    """Forward updates as progress notifications (the SDK drops them when the caller sent no token)."""
    step = 0

    async def forward(snapshot: dict[str, Any]) -> None:
        nonlocal step
        step += 1
        await ctx.session.report_progress(float(step), message=json.dumps(snapshot, ensure_ascii=False))

    return forward


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"Error: {message}")], is_error=True)


def _content_block(part: ContentPart) -> types.TextContent | types.ImageContent | types.EmbeddedResource:
    if part["type"] == "text":
        return types.TextContent(text=part["text"])
    if part["type"] == "image":
        return types.ImageContent(data=part["data"], mime_type=part["media_type"])
    filename = part.get("filename") or "file"
    return types.EmbeddedResource(
        resource=types.BlobResourceContents(
            uri=f"file:///{filename.lstrip('/')}", mime_type=part["media_type"], blob=part["data"]
        )
    )
