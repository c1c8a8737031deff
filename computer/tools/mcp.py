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
result with ``isError: true``; an unknown tool name is a JSON-RPC error ``-32602`` (invalid params), as is
a ``tools/list`` cursor (every tool is on one page and no ``nextCursor`` is sent, so no cursor is valid). While exec runs, a client that sent a progress token receives each
snapshot as a progress notification (the message is the snapshot as JSON); ``notifications/cancelled``
of a call kills its run. Cancelling ``serve_http`` stops the HTTP server through its normal shutdown.
Conformance-tested with the SDK's own client on stdio and streamable HTTP, in both protocol eras
(``tests/adapters/test_mcp_conformance.py``).

Importing this module loads the SDK's server side only, with its per-version wire models built at
their first use (``_server_side_only``, ``_defer_surface_models``): ``computer mcp`` answered
``initialize`` ~0.4 s sooner; the rest of the SDK loads when something asks for it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
from importlib import metadata
from types import ModuleType
from typing import Any
from urllib.parse import quote


def _defer_surface_models() -> None:
    """Build the SDK's wire-shape models at their first use, not when ``mcp_types`` is imported.

    ``mcp_types.methods`` imports the surface models of both protocol eras (``_v2025_11_25``,
    ``_v2026_07_28``: ~300 pydantic models, ~0.15 s of CPU) to check each request against the
    negotiated version's shape, one model per method: a session uses a handful of them. pydantic has
    no process-wide ``defer_build`` switch, only the per-model ``ConfigDict`` key, which subclasses
    inherit from their base's ``model_config``: every surface model derives from
    ``mcp_types._wire_base.WireModel``, so setting it there before the eras are defined defers them
    all (pydantic then builds one at its first validation: the same schema, the same errors). Not for
    the version-free models of ``mcp_types._types`` the server code receives: that module builds
    ``TypeAdapter``s of its big request/result unions when imported, which build them anyway.

    Decision: an SDK without ``WireModel``, or whose eras are already imported, is left as it is (the
    models are built at import, as before); a change only in time, never in behaviour."""
    if "mcp_types._v2025_11_25" in sys.modules or "mcp_types._v2026_07_28" in sys.modules:
        return
    try:
        from mcp_types._wire_base import WireModel
    except ImportError:
        return
    config = getattr(WireModel, "model_config", None)
    if isinstance(config, dict):
        config.setdefault("defer_build", True)


def _server_side_only() -> None:
    """Import the SDK's server side without running ``mcp/__init__`` and ``mcp/server/__init__``.

    ``mcp/__init__`` imports the whole client side (``mcp.client``: its session, transports,
    ``httpx``), ``mcp/server/__init__`` the high-level ``MCPServer`` (resources, prompts, templates):
    ~0.5 s of CPU before ``computer mcp`` could answer ``initialize``, for code a low-level stdio
    server never runs. The SDK offers no server-only entry point, so each package is put in
    ``sys.modules`` as its real module object (made from its own spec: ``__path__``, ``__file__``,
    ``__spec__``), with its ``__init__`` not yet run: its submodules import as usual
    (``mcp.server.lowlevel.server`` and the others this module uses). The first access to a name
    the package does not have yet (``from mcp import Client`` in ``computer.agent``, ``mcp.Client``,
    ``from mcp import *``) runs the real ``__init__`` into that same module (PEP 562 module
    ``__getattr__``), once, and answers from it: from then on the package is what ``import mcp``
    makes. Another thread asking meanwhile waits for it; the ``__init__`` itself asking for a name
    not defined yet gets ``AttributeError``, as in any import in progress.

    Decision: only while neither package was imported (a process that imported ``mcp`` first keeps
    it as it is) and only for a package found as a regular package on disk; otherwise nothing is
    changed and the import below runs the ``__init__`` files as before."""
    for name in ("mcp", "mcp.server"):
        if name in sys.modules:
            return
        spec = importlib.util.find_spec(name)  # of mcp.server: below the package put in place just before
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return
        module = importlib.util.module_from_spec(spec)
        module.__getattr__ = _completing(module)  # type: ignore[method-assign]
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


def _completing(module: ModuleType) -> Any:
    """``module.__getattr__``: run the package's own ``__init__`` into ``module`` once, then answer."""
    lock = threading.RLock()
    state = {"done": False, "running": False}

    def __getattr__(attr: str) -> Any:
        with lock:
            if not state["done"] and not state["running"]:
                state["running"] = True
                try:
                    spec = module.__spec__
                    assert spec is not None and spec.loader is not None
                    spec.loader.exec_module(module)
                    state["done"] = True
                finally:
                    state["running"] = False
                if state["done"] and module.__dict__.get("__getattr__") is __getattr__:
                    del module.__dict__["__getattr__"]
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}") from None

    return __getattr__


_defer_surface_models()
_server_side_only()

import mcp_types as types  # noqa: E402
from mcp.server.context import ServerRequestContext  # noqa: E402
from mcp.server.lowlevel.server import Server  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from ..storage import audit_caller  # noqa: E402
from ..surface import WorkspaceSurface  # noqa: E402
from ._adapter_tools import build_tools, record_refused, unknown_tool  # noqa: E402
from ._arguments import ArgumentError, parse_arguments  # noqa: E402
from ._tool import ContentPart, Tool  # noqa: E402

__all__ = ["create_mcp_server", "mcp_tool", "package_version", "run_stdio", "serve_http"]

SHUTDOWN_GRACE = 5  # seconds serve_http lets requests in flight finish when it is stopped
# Keyed by the core names; names="think" offers ls as `list` and the shell part of exec as `bash`.
_IDEMPOTENT = frozenset({"read", "ls", "find", "grep", "write", "edit", "delete", "processes"})
_OPEN_WORLD = frozenset({"exec", "publish"})
_CORE_NAMES = {"list": "ls", "bash": "exec"}


def create_mcp_server(
    workspace: WorkspaceSurface, *, name: str = "computer", instructions: str | None = None, **options: Any
) -> Server[Any]:
    """A low-level MCP ``Server`` listing and calling ``create_tools(workspace, **options)``."""
    tools = build_tools(workspace, options)
    listing = types.ListToolsResult(tools=[mcp_tool(tool) for tool in tools.values()])

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if params is not None and params.cursor is not None:
            # One page holds every tool and no nextCursor is ever sent, so any cursor is one this server
            # never gave: the spec's answer to an invalid cursor is -32602 (it listed page one again).
            raise MCPError(
                types.INVALID_PARAMS,
                f"Invalid cursor {params.cursor!r}: this server lists every tool on one page "
                "(it never sends nextCursor); list without a cursor",
            )
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
    core = _CORE_NAMES.get(tool.name, tool.name)
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.parameters,
        output_schema=schema if schema is not None and schema.get("type") == "object" else None,
        annotations=types.ToolAnnotations(
            read_only_hint=not tool.mutating,
            destructive_hint=tool.destructive if tool.mutating else False,
            idempotent_hint=core in _IDEMPOTENT,
            open_world_hint=core in _OPEN_WORLD,
        ),
    )


async def run_stdio(workspace: WorkspaceSurface, **options: Any) -> None:
    """Serve the tools of ``workspace`` on stdin/stdout until the client closes stdin; the requests
    read before that are answered first (``_mcp_eof``), a line that cannot be read with an error
    (``_mcp_unreadable``: the SDK dropped it, and a request's caller waited for good), as is a request
    whose id is not a string or an integer (``_mcp_request_ids``: the SDK took it for a notification)."""
    from mcp.server.stdio import stdio_server

    from ._mcp_eof import answer_before_eof
    from ._mcp_request_ids import stdin_lines
    from ._mcp_unreadable import answer_unreadable

    server = create_mcp_server(workspace, **options)
    with stdin_lines() as lines:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.attach(write_stream)
            read_stream, write_stream = answer_before_eof(*answer_unreadable(read_stream, write_stream))
            await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(
    workspace: WorkspaceSurface,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    path: str = "/mcp",
    token: str | None = None,
    head_timeout: float | None = None,
    max_body: int | None = None,
    body_timeout: float | None = None,
    **options: Any,
) -> None:
    """Serve the tools over streamable HTTP at ``http://host:port/mcp`` until cancelled.

    Bound to any loopback address, requests must name a loopback host (``Host``) and come from no
    page or a loopback one (``Origin``): a web page cannot reach the tools through DNS rebinding. The
    SDK turns this on for ``127.0.0.1``, ``localhost`` and ``::1`` only, so ``127.0.0.2``, ``[::1]``
    or ``LOCALHOST`` served exec to a request with ``Host: evil.example``.

    Any other bind needs ``token`` (``ValueError`` before anything is bound, else): every request must
    carry ``Authorization: Bearer <token>`` (401 otherwise). Before, such a bind served every tool,
    exec included, to anyone who reached the address. A loopback bind given a token checks it too.
    As the dashboard and the share-link server, a connection whose request head is not whole
    ``head_timeout`` seconds (default ``computer.assets.HEAD_TIMEOUT``, 15) after the server began
    waiting for it is closed (a client trickling a head held its socket for good).

    Cancelling the caller stops the server cleanly: it stops accepting, lets requests in flight finish
    (up to ``SHUTDOWN_GRACE`` seconds), runs the app's shutdown, then re-raises the cancellation; no
    error is logged.
    """
    import uvicorn

    from ..assets import HEAD_TIMEOUT, head_deadline
    from ._mcp_body import BODY_TIMEOUT, MAX_BODY, BodyLimit
    from ._mcp_request_ids import RequestIdGate

    security = _loopback_security(host)
    if security is None and not token:
        raise ValueError(
            f"serve_http on {host!r} (not a loopback address) needs a token: anyone who reaches it could "
            "run every tool, exec included; give token=... and send 'Authorization: Bearer <token>'"
        )
    server = create_mcp_server(workspace, **options)
    max_body = MAX_BODY if max_body is None else max_body
    sdk_app = server.streamable_http_app(
        streamable_http_path=path, host=host, transport_security=security, max_request_body_size=max_body
    )
    app = BodyLimit(
        RequestIdGate(sdk_app),
        max_body=max_body,
        body_timeout=BODY_TIMEOUT if body_timeout is None else body_timeout,
    )
    config = uvicorn.Config(
        app if not token else _BearerGate(app, token),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
        http=head_deadline(HEAD_TIMEOUT if head_timeout is None else head_timeout),
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


class _BearerGate:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` is a 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8", "surrogateescape")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._allows(scope):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": b"401: this MCP server needs its token\n"})
            return
        await self.app(scope, receive, send)

    def _allows(self, scope: Any) -> bool:
        import hmac

        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization" and value[:7].lower() == b"bearer ":
                return hmac.compare_digest(value[7:].strip(), self._token)
        return False


def _loopback_security(host: str) -> Any:
    """Host and Origin checks for a loopback bind (``None``, the SDK's choice, for any other)."""
    import ipaddress

    from mcp.server.transport_security import TransportSecuritySettings

    name = host.strip().strip("[]").lower()
    try:
        loopback = (
            name == "localhost" or name.endswith(".localhost") or ipaddress.ip_address(name).is_loopback
        )
    except ValueError:
        loopback = False
    if not loopback:
        return None
    bound = f"[{name}]" if ":" in name else name
    hosts = list(dict.fromkeys(["127.0.0.1:*", "localhost:*", "[::1]:*", f"{bound}:*"]))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{allowed}" for allowed in hosts],
    )


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
    # Percent-encoded, so `#`, `?`, `%` and spaces stay part of the name (as publish encodes its URLs).
    uri = "file:///" + quote(filename.lstrip("/"), safe="/", errors="surrogatepass")
    return types.EmbeddedResource(
        resource=types.BlobResourceContents(uri=uri, mime_type=part["media_type"], blob=part["data"])
    )
