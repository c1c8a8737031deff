"""A request whose ``id`` is not a string or an integer gets a JSON-RPC error, on stdio and over HTTP.

MCP requests carry a string or integer id (never null); JSON-RPC 2.0 answers an invalid request with
``-32600`` and a null id. The SDK (``mcp`` 2.3) reads each message with one pydantic union whose
notification model ignores unknown members, so ``{"jsonrpc": "2.0", "id": {"a": 1}, "method":
"tools/list"}`` (an object, an array, a float such as ``2.0``, a boolean or null as the id) became a
*notification* ``tools/list``: dropped on stdio, acknowledged ``202`` with no body over streamable
HTTP (the handshake-era transport; the SDK's 2026-07-28 entry already refuses it). Its caller waited
for an answer that never came. The SDK offers no setting for this.

A request with a good id on a bad envelope (no ``"jsonrpc": "2.0"``, a ``method`` that is not a
string, ``params`` that are not an object) was answered on stdio, but with a null id (the SDK's
error carries none): its caller, matching answers by id, waited for good as well.

Decision: a JSON object with ``method`` and an ``id`` member whose value is not a string or a
(non-boolean) integer is answered ``-32600`` with a null id, one with a good id on a bad envelope
``-32600`` with that id; neither reaches the server:
- stdio: ``run_stdio`` reads stdin itself (:func:`stdin_lines`: fd 0 claimed as the SDK claims it,
  pointed at the null device while serving and restored after) and hands the SDK every other line;
- HTTP: :class:`RequestIdGate` answers such a POST ``400`` with the error. It also answers ``-32600``
  (not the SDK's ``-32602`` "Validation error") a JSON body that is no JSON-RPC message (a batch, a
  request whose ``method`` is not a string): invalid params is for a method's parameters.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import anyio
import mcp_types as types
import pydantic_core
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["RequestIdGate", "invalid_request", "stdin_lines"]


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def invalid_request(message: Any) -> types.JSONRPCError | None:
    """The ``-32600`` error for a decoded request (an object with ``method`` and ``id``) the SDK would not
    take for one: a bad id (answered with a null id), or a good id on a bad envelope (``jsonrpc`` not
    ``"2.0"``, ``method`` not a string, ``params`` not an object: answered with that id, so its caller's
    wait ends; the SDK's error carried a null id, which no caller can match). None otherwise."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    value = message["id"]
    if not _valid_id(value):
        kinds = {dict: "an object", list: "an array", float: "a float", bool: "a boolean"}
        kind = "null" if value is None else kinds.get(type(value), type(value).__name__)
        return _invalid(None, f"the id must be a string or an integer, not {kind}")
    if message.get("jsonrpc") != "2.0":
        return _invalid(value, 'the member "jsonrpc" must be "2.0"')
    if not isinstance(message["method"], str):
        return _invalid(value, 'the member "method" must be a string')
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return _invalid(value, 'the member "params" must be an object')
    return None


def _invalid(request_id: Any, why: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(code=types.INVALID_REQUEST, message=f"Invalid request: {why}"),
    )


def _decoded(line: str | bytes) -> Any:
    try:
        return pydantic_core.from_json(line)
    except ValueError:
        return None  # not JSON (or a lone surrogate): the SDK's reader refuses it, _mcp_unreadable answers


class _UnownedText(io.TextIOWrapper):
    """Text over the claimed stdin whose close never closes the descriptor (a reader thread may block on it)."""

    def close(self) -> None:
        try:
            self.detach()
        except ValueError:
            pass


@contextmanager
def _claimed_stdin() -> Iterator[BinaryIO]:
    """fd 0 for the protocol alone, as the SDK's ``stdio_server`` claims it: the wire moves to a private
    descriptor and fd 0 reads the null device while serving (a child or handler reading stdin gets EOF,
    not protocol bytes), restored on exit. A ``sys.stdin`` not backed by fd 0 is read in place."""
    try:
        backed = sys.stdin is not None and sys.stdin.buffer.fileno() == 0
    except (AttributeError, OSError, ValueError):
        backed = False
    if not backed or sys.platform == "win32":
        yield sys.stdin.buffer
        return
    import fcntl

    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        # closefd=False: a worker thread may still block reading it after the server ended.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


class _Lines:
    """The stdin lines for the SDK's reader, less the invalid requests (:func:`invalid_request`), answered
    on the write stream."""

    def __init__(self, binary: BinaryIO) -> None:
        self._file = anyio.wrap_file(_UnownedText(binary, encoding="utf-8", errors="replace"))
        self._write: Any = None
        self._ready = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self._write = write_stream
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for line in self._file:
            # Only a line that can name an id is decoded twice (here, then by the SDK).
            named = '"id"' in line or "\\u" in line
            answer = invalid_request(_decoded(line)) if named else None
            if answer is None:
                yield line
                continue
            await self._ready.wait()
            await self._write.send(SessionMessage(answer))


@contextmanager
def stdin_lines() -> Iterator[_Lines]:
    """stdin as the SDK's ``stdio_server(stdin=...)`` reads it; ``attach`` the write stream once open."""
    with _claimed_stdin() as binary:
        yield _Lines(binary)


class RequestIdGate:
    """ASGI middleware before the streamable HTTP app: a POST whose JSON body is a request with a bad id,
    or no JSON-RPC message at all, is a ``400`` carrying the ``-32600`` error; so is a request of a
    session whose id, as text, is that of a request of the session still in flight (the SDK keys a
    session's response streams by ``str(id)``: a call ``1`` and a call ``"1"`` at once, or an id used
    twice, lost the first call's answer, and its caller waited for good). The rest pass unchanged."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._in_flight: set[tuple[bytes, str]] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Any] = []
        body = bytearray()
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        decoded: Any = _decoded(bytes(body)) if messages[-1]["type"] == "http.request" else None
        error = self._refusal(decoded)
        key = self._key(scope, decoded) if error is None else None
        if key is not None and key in self._in_flight:
            error = _invalid(
                decoded["id"],
                f"a request of this session with id {key[1]!r} is still in flight; give each request "
                'an id of its own (ids are told apart by their text here: 1 and "1" are one id)',
            )
        if error is not None:
            payload = error.model_dump_json(by_alias=True, exclude_unset=True).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        replay = iter(messages)

        async def replayed() -> Any:
            return next(replay, None) or await receive()

        if key is None:
            await self.app(scope, replayed, send)
            return
        self._in_flight.add(key)
        try:
            await self.app(scope, replayed, send)  # returns once the request's response stream ended
        finally:
            self._in_flight.discard(key)

    @staticmethod
    def _key(scope: Any, decoded: Any) -> tuple[bytes, str] | None:
        """(session id, the request id as text) of a request of a session; None for anything else."""
        if not isinstance(decoded, dict) or "method" not in decoded or "id" not in decoded:
            return None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"mcp-session-id":
                return value, str(decoded["id"])
        return None  # no session (initialize, or the 2026-07-28 entry): one request per exchange

    @staticmethod
    def _refusal(decoded: Any) -> types.JSONRPCError | None:
        if decoded is None:
            return None  # not JSON: the SDK answers -32700
        answer = invalid_request(decoded)
        if answer is not None:
            return answer
        try:
            types.jsonrpc_message_adapter.validate_python(decoded, by_name=False)
        except ValidationError:
            request_id = decoded.get("id") if isinstance(decoded, dict) else None
            return _invalid(request_id if _valid_id(request_id) else None, "not a JSON-RPC 2.0 message")
        return None
