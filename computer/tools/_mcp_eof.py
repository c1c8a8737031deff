"""The stdio MCP server's end of input: every request read before it is answered, then the server ends.

The SDK's stdio loop ends at the end of stdin and cancels the requests still running: their answers
never reach stdout, though some of them (a ``write``) had already changed the workspace. A client
that writes its requests and closes stdin (``printf ... | computer mcp NAME``, and the MCP stdio
shutdown itself: close stdin, then wait for the server to exit) lost up to every answer after the
first few.

Decision: the end of input reaches the SDK only once each request read before it has its response or
error on stdout, or was cancelled by the client (``notifications/cancelled``: no answer is due), or
after ``EOF_GRACE`` seconds (the longest an ``exec`` may run, plus the tool's own grace), whichever
comes first. A client that wants the server gone sooner sends SIGTERM, as the MCP spec says.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio

from .exec import MAX_TIMEOUT, TIMEOUT_GRACE

__all__ = ["EOF_GRACE", "answer_before_eof"]

EOF_GRACE = MAX_TIMEOUT + TIMEOUT_GRACE


def _message(item: Any) -> Any:
    """The JSON-RPC message of a ``SessionMessage`` (the SDK's union, or a root model around it)."""
    message = getattr(item, "message", None)
    return getattr(message, "root", message)


class _Pending:
    """The ids of the requests read and not answered yet (counted: a client may reuse an id)."""

    def __init__(self) -> None:
        self.ids: Counter[Any] = Counter()
        self.answered = anyio.Event()
        self.answered.set()

    def read(self, item: Any) -> None:
        message = _message(item)
        method = getattr(message, "method", None)
        if method is None:
            return
        if hasattr(message, "id"):  # a request: an answer is due
            if not self.ids:
                self.answered = anyio.Event()
            self.ids[message.id] += 1
        elif method == "notifications/cancelled":
            params = getattr(message, "params", None) or {}
            request = params.get("requestId") if isinstance(params, dict) else None
            self._done(request)

    def wrote(self, item: Any) -> None:
        message = _message(item)
        if getattr(message, "method", None) is None and hasattr(message, "id"):  # a response or error
            self._done(message.id)

    def _done(self, request: Any) -> None:
        if self.ids[request] > 1:
            self.ids[request] -= 1
        else:
            self.ids.pop(request, None)
        if not self.ids:
            self.answered.set()


class ReadStreamWrapper:
    """A read stream of the SDK's around ``_inner`` that changes ``receive`` alone: iterating and
    closing it go through ``receive`` and the inner stream (``close``, ``aclose``, ``clone``...).
    Subclasses: :class:`_Reader` here, ``_mcp_unreadable._Answering``."""

    _inner: Any

    async def receive(self) -> Any:
        raise NotImplementedError

    def __aiter__(self) -> ReadStreamWrapper:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> ReadStreamWrapper:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:  # close, aclose, clone: the inner stream's
        return getattr(self._inner, name)


class _Reader(ReadStreamWrapper):
    """The read stream, whose end waits for the answers (:class:`_Pending`)."""

    def __init__(self, inner: Any, pending: _Pending, grace: float) -> None:
        self._inner, self._pending, self._grace = inner, pending, grace

    @property
    def last_context(self) -> Any:  # the sender's context, which the SDK reads after each receive
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except anyio.EndOfStream:
            with anyio.move_on_after(self._grace):
                await self._pending.answered.wait()
            raise
        self._pending.read(item)
        return item


class _Writer:
    """The write stream, which counts each answer sent (:class:`_Pending`)."""

    def __init__(self, inner: Any, pending: _Pending) -> None:
        self._inner, self._pending = inner, pending

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        self._pending.wrote(item)

    async def __aenter__(self) -> _Writer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def answer_before_eof(read_stream: Any, write_stream: Any, grace: float = EOF_GRACE) -> tuple[Any, Any]:
    """``(read, write)`` streams for ``Server.run`` whose end of input waits for the answers due."""
    pending = _Pending()
    return _Reader(read_stream, pending, grace), _Writer(write_stream, pending)
