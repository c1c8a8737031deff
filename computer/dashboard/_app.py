"""The dashboard's HTTP app (Starlette): read-only pages, fragments and server-sent event streams.

Routes (all ``GET``; nothing here writes to a workspace):

- ``/`` workspaces; ``/fragments/workspaces`` their rows (the page's script swaps them every second)
- ``/w/{name}`` a workspace: timeline, runs, published links; ``/events/w/{name}/audit?after=ID``
  streams new timeline rows (``event: record``, ``data``: the row's HTML)
- ``/w/{name}/files?path=`` a directory; ``/w/{name}/file?path=`` a file (text, or an image);
  ``/w/{name}/raw?path=`` an image's bytes (raster types only)
- ``/w/{name}/runs/{id}`` a run; ``/events/w/{name}/runs/{id}`` streams its output
  (``event: snapshot``, ``data``: JSON ``{status, stdout, stderr, exit_code, live, note}``)
- ``/w/{name}/transcript`` the agent transcript the workspace keeps (``_transcript.py``), refreshed
- ``/cluster`` nodes, exec pools, awake owners; ``/fragments/cluster``
- ``/api/workspaces``, ``/api/w/{name}/records?limit=&tool=&status=&kind=`` JSON, for scripts
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import mimetypes
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..storage.paths import canonical
from . import _pages as pages
from ._access import AccessPolicy, TokenGate
from ._source import DataDirSource
from ._transcript import read_transcript

__all__ = ["create_app"]

STATIC = Path(__file__).with_name("static")
TEXT_PREVIEW = 256 * 1024  # bytes of a text file shown
IMAGE_MAX = 20 * 1024 * 1024
HEARTBEAT = 15.0  # seconds between keep-alive comments on an idle event stream
# Raster images only: an SVG can carry script, so it is shown as text.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/x-icon"})
# Records one request returns at most (a larger ``limit`` is this one).
_MAX_RECORDS = 10_000
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what ends a line of an event stream (HTML spec)
# Event streams served at once, every client together; past it a new one is a 503 (its EventSource
# retries). Each held its socket and an audit stream a store of its own (its SQLite file, WAL and
# shared memory): ~4 descriptors, so ~5,000 streams of one client took every descriptor of the
# process (``ulimit -n`` 20,000 here), and no page, store or share link of the dashboard opened.
MAX_STREAMS = 256
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def _not_found(what: str) -> HTMLResponse:
    return _html(pages.layout("not found", f"<h1>Not found</h1><p>{pages._e(what)}</p>"), 404)


def create_app(source: DataDirSource, policy: AccessPolicy | None = None) -> Starlette:
    """The dashboard over ``source``, behind ``policy`` (default: loopback, no token)."""
    policy = policy or AccessPolicy("127.0.0.1", None)
    streams = _Streams()

    async def index(request: Request) -> Response:
        return _html(pages.index_page(await source.workspaces(), source.mode))

    async def workspace_rows(request: Request) -> Response:
        return _html(pages.workspace_rows(await source.workspaces()))

    async def workspaces_json(request: Request) -> Response:
        return JSONResponse(await source.workspaces(), headers=_HEADERS)

    async def workspace(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            store = source.store(name)
        except OSError as exc:
            return _not_found(_unreadable(name, exc))
        records = await store.audit.query(limit=100)
        # The live stream starts after the newest record shown, read in the same query: a record the
        # owner committed between this query and a second read of the newest id was in neither.
        top = records[-1].id if records else 0
        return _html(
            pages.workspace_page(name, records, await source.runs(name), await source.links(name), top)
        )

    async def records_json(request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        try:
            records = await source.records(
                name,
                limit=max(0, min(int(q.get("limit", "100")), _MAX_RECORDS)),  # 10**20 was a 500
                tool=q.get("tool"),
                status=q.get("status"),
                kind=q.get("kind"),
            )
        except OSError as exc:
            return JSONResponse({"error": _unreadable(name, exc)}, status_code=404)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        # ASCII JSON: a lone surrogate a record keeps (a model's broken escape) is then its valid JSON
        # escape; encoded as UTF-8 (JSONResponse), it raised, a 500 for every page holding one.
        body = json.dumps([r.to_json() for r in records], ensure_ascii=True, allow_nan=False)
        return Response(body, media_type="application/json", headers=_HEADERS)

    async def audit_events(request: Request) -> Response:
        name = request.path_params["name"]
        if streams.full():
            return streams.refusal()
        try:
            # A reconnecting EventSource says the last record it got: nothing is shown twice.
            after = int(request.headers.get("last-event-id") or request.query_params.get("after", "0"))
            records = source.follow(name, after)
        except (OSError, ValueError):
            return PlainTextResponse("no such workspace\n", status_code=404)

        async def rows() -> AsyncIterator[tuple[str, str, int | None]]:
            async for record in records:
                yield "record", pages.record_row(record, name), record.id

        return streams.counted(_event_stream(request, rows()))

    async def directory(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            path = canonical(request.query_params.get("path", "/"))
            entries = await source.store(name).readdir(path)
        except (OSError, ValueError) as exc:
            return _not_found(str(exc))
        entries.sort(key=lambda e: (not e.is_directory, e.name))
        return _html(pages.directory_page(name, path, entries))

    async def file(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            path = canonical(request.query_params.get("path", "/"))
            fs = source.store(name)
            stat = await fs.stat(path)
            if stat.is_directory:
                return _html(pages.directory_page(name, path, await fs.readdir(path)))
            if _image_type(path) is not None:
                return _html(pages.file_page(name, path, size=stat.size, text=None, image=True, cut=False))
            head = await fs.read_file(path, length=TEXT_PREVIEW)
        except (OSError, ValueError) as exc:
            return _not_found(str(exc))
        text = None if b"\0" in head[:8192] else head.decode("utf-8", "replace")
        cut = stat.size > len(head)
        return _html(pages.file_page(name, path, size=stat.size, text=text, image=False, cut=cut))

    async def raw(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            path = canonical(request.query_params.get("path", "/"))
            media = _image_type(path)
            fs = source.store(name)
            if media is None or (await fs.stat(path)).size > IMAGE_MAX:
                return PlainTextResponse("only images up to 20 MiB are served raw\n", status_code=404)
            data = await fs.read_file(path)
        except (OSError, ValueError):
            return PlainTextResponse("not found\n", status_code=404)
        return Response(data, media_type=media, headers=_HEADERS)

    async def run(request: Request) -> Response:
        name, exec_id = request.path_params["name"], request.path_params["exec_id"]
        try:
            record = await source.run(name, exec_id)
        except OSError as exc:
            return _not_found(_unreadable(name, exc))
        if record is None:  # every run has its journal record from its start (or it was pruned)
            return _not_found(f"no run {exec_id} in workspace {name}")
        return _html(pages.run_page(name, exec_id, record))

    async def run_events(request: Request) -> Response:
        name, exec_id = request.path_params["name"], request.path_params["exec_id"]
        if streams.full():
            return streams.refusal()

        async def snapshots() -> AsyncIterator[tuple[str, str, int | None]]:
            async for snapshot in source.run_output(name, exec_id):
                yield "snapshot", json.dumps(snapshot, ensure_ascii=False), None

        return streams.counted(_event_stream(request, snapshots(), end="done"))

    async def transcript(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            messages = await read_transcript(source.store(name))
        except OSError as exc:
            return _not_found(_unreadable(name, exc))
        return _html(pages.transcript_page(name, messages))

    async def transcript_fragment(request: Request) -> Response:
        try:
            messages = await read_transcript(source.store(request.path_params["name"]))
        except OSError:
            messages = None
        return _html(pages.transcript_fragment(messages))

    async def cluster(request: Request) -> Response:
        return _html(pages.cluster_page(await source.cluster()))

    async def cluster_fragment(request: Request) -> Response:
        return _html(pages.cluster_fragment(await source.cluster()))

    routes = [
        Route("/", index),
        Route("/fragments/workspaces", workspace_rows),
        Route("/api/workspaces", workspaces_json),
        Route("/w/{name}", workspace),
        Route("/api/w/{name}/records", records_json),
        Route("/events/w/{name}/audit", audit_events),
        Route("/w/{name}/files", directory),
        Route("/w/{name}/file", file),
        Route("/w/{name}/raw", raw),
        Route("/w/{name}/runs/{exec_id}", run),
        Route("/events/w/{name}/runs/{exec_id}", run_events),
        Route("/w/{name}/transcript", transcript),
        Route("/fragments/w/{name}/transcript", transcript_fragment),
        Route("/cluster", cluster),
        Route("/fragments/cluster", cluster_fragment),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            source.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(TokenGate, policy=policy)
    return app


class _Streams:
    """The event streams served now (at most :data:`MAX_STREAMS`)."""

    def __init__(self) -> None:
        self.served = 0

    def full(self) -> bool:
        return self.served >= MAX_STREAMS

    def refusal(self) -> Response:
        return PlainTextResponse(
            f"503: {MAX_STREAMS} event streams are open here already; retry later\n",
            status_code=503,
            headers={**_HEADERS, "Retry-After": "5"},
        )

    def counted(self, response: StreamingResponse) -> Response:
        """``response``, counted from now until it is over (sent, failed or its client gone)."""
        self.served += 1
        served = response.__call__

        async def call(scope: Any, receive: Any, send: Any) -> None:
            try:
                await served(scope, receive, send)
            finally:
                self.served -= 1

        return _Counted(call)


class _Counted(Response):
    """A response that is an ASGI callable of its own (:meth:`_Streams.counted`)."""

    def __init__(self, call: Any) -> None:
        self._call = call

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._call(scope, receive, send)


def _unreadable(name: str, exc: OSError) -> str:
    """Why workspace ``name`` cannot be shown: not here, or its file cannot be read (say, an older schema)."""
    if isinstance(exc, FileNotFoundError):
        return f"no workspace {name!r} in this data directory"
    return f"workspace {name!r} cannot be read: {exc.strerror or exc}"


def _image_type(path: str) -> str | None:
    media = mimetypes.guess_type(path)[0]
    return media if media in IMAGE_TYPES else None


def _event_stream(
    request: Request, events: AsyncIterator[tuple[str, str, int | None]], *, end: str | None = None
) -> StreamingResponse:
    """Server-sent events from ``(event, data, id)`` triples, with keep-alive comments; ``end`` is sent
    last. An ``id`` comes back as ``Last-Event-ID`` when the browser reconnects."""

    async def body() -> AsyncIterator[str]:
        queue: asyncio.Queue[tuple[str, str, int | None] | None] = asyncio.Queue(maxsize=64)

        async def pump() -> None:
            try:
                async for item in events:
                    await queue.put(item)
            finally:
                await queue.put(None)

        task = asyncio.create_task(pump())
        try:
            yield "retry: 1000\n\n"
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), HEARTBEAT)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    yield ": keep-alive\n\n"
                    continue
                if item is None:
                    if end is not None:
                        yield f"event: {end}\ndata: {{}}\n\n"
                    return
                event, data, event_id = item
                # Every line break the browser's parser knows (CR too): a "\r" kept in a line ended it
                # there, so a file named "a\r\revent: x\rdata: y" cut its timeline row in two and
                # forged an event of its own.
                payload = "".join(f"data: {line}\n" for line in _LINE_BREAK.split(data))
                head = f"id: {event_id}\n" if event_id is not None else ""
                yield f"{head}event: {event}\n{payload}\n"
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    headers = {**_HEADERS, "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
