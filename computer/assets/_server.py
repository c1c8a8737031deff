"""The HTTP server of share links: ``GET``/``HEAD <base_path>/<key>`` over an :class:`AssetStore`.

Unknown, expired and malformed keys all get the same 404, so a response never hints whether a link
ever existed; there are no listings (a prefix is not a key). Bodies are streamed from the store.
Active content types (HTML, SVG, XML…) are served with ``Content-Security-Policy: sandbox``
(``_active_types``); a ``Range`` header of any shape gets a 206, a 416 or the whole body, never an error.
A background task sweeps expired links while the app runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..config import settings
from ._active_types import SANDBOX_POLICY, is_active_type
from ._disposition import content_disposition
from ._open import base_path_of, default_store
from ._record import AssetRecord
from ._slow_clients import HEAD_TIMEOUT, head_deadline
from ._store import AssetNotFoundError, AssetStore

__all__ = ["create_app", "create_server", "serve"]

log = logging.getLogger(__name__)

_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)", re.ASCII)
# Any position with more significant digits than this is past the end of every stored file; such a
# number is never converted (Python refuses int() of over 4,300 digits, which used to give a 500).
_MAX_DIGITS = 18
_HUGE = 10**_MAX_DIGITS
_COMMON = {"X-Content-Type-Options": "nosniff"}
_NOT_FOUND_HEADERS = {**_COMMON, "Cache-Control": "no-store"}


def _not_found(method: str) -> Response:
    body = b"" if method == "HEAD" else b"Not Found\n"
    headers = {**_NOT_FOUND_HEADERS, "Content-Length": "10"}
    return Response(body, status_code=404, media_type="text/plain; charset=utf-8", headers=headers)


def _position(digits: str) -> int:
    """A byte position from ASCII digits of any length (leading zeros allowed), capped at ``_HUGE``."""
    significant = digits.lstrip("0")
    if not significant:
        return 0
    return int(significant) if len(significant) <= _MAX_DIGITS else _HUGE


def _parse_range(header: str, size: int) -> tuple[int, int] | bool | None:
    """``(start, end_exclusive)`` for one satisfiable range; ``None`` to ignore the header (serve it
    all: malformed, inverted or multi-range, as RFC 9110 section 14.2 allows); ``False`` when
    unsatisfiable (416). Positions of any length are handled without converting huge numbers."""
    match = _RANGE.fullmatch(header.strip().replace(" ", "").replace("\t", ""))
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # suffix: the last N bytes
        suffix = _position(last)
        if suffix == 0 or size == 0:
            return False
        return max(0, size - suffix), size
    start = _position(first)
    if last and _position(last) < start:
        return None
    if start >= size:
        return False
    end = size if not last else min(size, _position(last) + 1)
    return start, end


def _headers(record: AssetRecord, now: float) -> dict[str, str]:
    active = {"Content-Security-Policy": SANDBOX_POLICY} if is_active_type(record.content_type) else {}
    return {
        **_COMMON,
        **active,
        "Content-Type": record.content_type,
        "Content-Disposition": content_disposition(record.disposition, record.filename),
        "ETag": f'"{record.etag}"',
        "Cache-Control": f"private, max-age={record.remaining(now)}",
        "Accept-Ranges": "bytes",
    }


def _etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or f'"{etag}"' in tags


async def _primed(body: AsyncIterator[bytes]) -> AsyncIterator[bytes] | None:
    """Start ``body`` so a link that vanished between lookup and read is still a clean 404."""
    try:
        first = await anext(body)
    except StopAsyncIteration:
        first = b""
    except AssetNotFoundError:
        return None

    async def chained() -> AsyncIterator[bytes]:
        if first:
            yield first
        async for piece in body:
            yield piece

    return chained()


def create_app(
    store: AssetStore | None = None, *, base_path: str | None = None, sweep_interval: float = 60.0
) -> Starlette:
    """The ASGI app. ``store`` defaults to the configured one; ``base_path`` defaults to the path of
    ``settings().assets_url`` (so the app can sit behind a proxy that keeps the prefix); pass ``""``
    when the proxy strips it."""
    the_store = store if store is not None else default_store()
    prefix = base_path_of(settings().assets_url) if base_path is None else base_path.rstrip("/")
    if prefix and not prefix.startswith("/"):
        prefix = "/" + prefix

    async def serve_asset(request: Request) -> Response:
        method = request.method
        path: str = request.scope["path"]
        if prefix:
            if not path.startswith(prefix + "/"):
                return _not_found(method)
            path = path[len(prefix) :]
        key = path[1:]
        if not key or key.endswith("/") or "//" in key:
            return _not_found(method)
        record = await the_store.get(key)
        if record is None:
            return _not_found(method)
        now = time.time()
        headers = _headers(record, now)
        if_none_match = request.headers.get("if-none-match")
        if if_none_match is not None and _etag_matches(if_none_match, record.etag):
            return Response(status_code=304, headers=headers)
        size = record.size
        status = 200
        start, end = 0, size
        range_header = request.headers.get("range")
        if_range = request.headers.get("if-range")
        if range_header is not None and (if_range is None or if_range.strip() == f'"{record.etag}"'):
            wanted = _parse_range(range_header, size)
            if wanted is False:
                headers["Content-Range"] = f"bytes */{size}"
                headers["Content-Length"] = "0"
                return Response(b"", status_code=416, headers=headers)
            if isinstance(wanted, tuple):
                start, end = wanted
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        headers["Content-Length"] = str(end - start)
        if method == "HEAD":
            return Response(status_code=status, headers=headers)
        body = await _primed(the_store.read(key, offset=start, length=end - start))
        if body is None:
            return _not_found(method)
        return StreamingResponse(body, status_code=status, headers=headers)

    async def not_allowed(request: Request) -> Response:
        return Response(
            b"Method Not Allowed\n",
            status_code=405,
            media_type="text/plain; charset=utf-8",
            headers={**_COMMON, "Allow": "GET, HEAD"},
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(_sweep_forever(the_store, sweep_interval))
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    routes = [
        Route("/{anything:path}", serve_asset, methods=["GET", "HEAD"]),
        Route("/{anything:path}", not_allowed, methods=["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.store = the_store
    app.state.base_path = prefix
    return app


async def _sweep_forever(store: AssetStore, interval: float) -> None:
    while True:
        try:
            await store.sweep()
        except Exception:
            log.exception("sweeping expired share links failed")
        await asyncio.sleep(interval)


def create_server(
    host: str = "127.0.0.1",
    port: int = 8787,
    *,
    store: AssetStore | None = None,
    base_path: str | None = None,
    head_timeout: float = HEAD_TIMEOUT,
) -> uvicorn.Server:
    """A uvicorn server for :func:`create_app` (``await server.serve()`` runs it in the current loop).

    A connection whose request head is not whole ``head_timeout`` seconds after the server began
    waiting for it is closed (``_slow_clients``: slowloris)."""
    config = uvicorn.Config(
        create_app(store, base_path=base_path),
        host=host,
        port=port,
        log_level="warning",
        server_header=False,
        proxy_headers=True,
        http=head_deadline(head_timeout),
    )
    return uvicorn.Server(config)


def serve(
    host: str = "127.0.0.1",
    port: int = 8787,
    *,
    store: AssetStore | None = None,
    base_path: str | None = None,
) -> None:
    """Serve share links until interrupted (``computer serve --port N``)."""
    create_server(host, port, store=store, base_path=base_path).run()
