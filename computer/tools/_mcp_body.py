"""A bound on each HTTP request body of ``serve_http``: its size and the time it may take to arrive.

The SDK's streamable HTTP app refuses a body over its ``max_request_body_size`` (4 MiB) with a
``413``, but :class:`~computer.tools._mcp_request_ids.RequestIdGate`, in front of it, read the whole
body into memory first (twice over: its messages and their join). A client sending a huge or an
endless body (``Transfer-Encoding: chunked`` has no length to refuse up front) grew the server's
memory without end before that ``413``: a 256 MiB body peaked the server at 856 MB. A client
trickling its body (a byte every few seconds, or a ``Content-Length`` it never sends) held its socket
and the request for good: the head deadline (``head_timeout``) ends when the head is whole.

Decision (:class:`BodyLimit`, the outermost gate after the token check):

- a body over ``max_body`` bytes (default :data:`MAX_BODY`, 16 MiB) is answered ``413`` with a
  JSON-RPC error naming the cap, at once when ``Content-Length`` says so, else as soon as the bytes
  received pass it; nothing more of it is kept. ``serve_http`` gives the SDK the same cap: its 4 MiB
  refused a write under the write tool's own 2 MiB cap (2 MiB of emoji are 6 MiB of JSON as
  ``ensure_ascii`` encoders send it, 2 MiB of control characters 12 MiB). Held at once: about three
  copies of one body (this gate's, ``RequestIdGate``'s, the SDK's) per request in flight;
- a body not whole ``body_timeout`` seconds (default :data:`BODY_TIMEOUT`, 60) after its head was
  read is answered ``408``. The deadline is not moved by the bytes that arrive meanwhile.

Both answers close the connection (``Connection: close``): the rest of the body is never read.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ._sizes import human_bytes

__all__ = ["BODY_TIMEOUT", "MAX_BODY", "BodyLimit"]

MAX_BODY = 16 * 1024 * 1024  # bytes of one request body
BODY_TIMEOUT = 60.0  # seconds a request body may take to arrive whole


class BodyLimit:
    """ASGI middleware: a request body over ``max_body`` bytes is a ``413``, one not whole within
    ``body_timeout`` seconds a ``408`` (see the module docstring); others reach ``app`` as received."""

    def __init__(self, app: Any, *, max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT) -> None:
        self.app = app
        self.max_body = int(max_body)
        self.body_timeout = float(body_timeout)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await _refuse(send, 413, self._too_large(f"{declared} bytes"))
            return
        messages: list[Any] = []
        received = 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    messages.append(message)
                    if message["type"] != "http.request":
                        break
                    received += len(message.get("body", b""))
                    if received > self.max_body:
                        await _refuse(send, 413, self._too_large(f"more than {received} bytes"))
                        return
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _refuse(
                send,
                408,
                f"the request body was not whole {self.body_timeout:g} seconds after its head "
                f"({received} bytes had arrived); send it at once",
            )
            return
        replay = iter(messages)

        async def replayed() -> Any:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    def _too_large(self, size: str) -> str:
        return (
            f"the request body is {size}, over this server's {human_bytes(self.max_body)} "
            f"({self.max_body}-byte) cap; send smaller arguments (write large files in parts)"
        )


def _content_length(scope: Any) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Any, status: int, message: str) -> None:
    """A JSON-RPC error (null id: the body was never read) with ``status``, closing the connection."""
    payload = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send(
        {"type": "http.response.start", "status": status, "headers": [*headers, (b"connection", b"close")]}
    )
    await send({"type": "http.response.body", "body": body})
