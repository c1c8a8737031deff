"""The stdio MCP server's answer to a line it cannot read: a JSON-RPC error, never silence.

The SDK's stdio reader validates each line (``jsonrpc_message_adapter.validate_json``); a line that
fails goes to the server as an exception, which it logs at debug level and drops. The client was
never answered: a request whose strings hold a lone UTF-16 surrogate (``"\\ud800"``, legal JSON
syntax, which a model's text cut inside a surrogate pair produces and JSON encoders write as is; the
SDK's JSON parser refuses it) left its caller waiting for good, and a line that was not JSON at all
was dropped without the parse error JSON-RPC 2.0 asks for.

Decision: such a line is answered on the write stream. A request (an object with a method and an
``id``, as Python's ``json`` reads it) gets a ``-32700`` error with its own ``id``, saying what is
wrong (a lone surrogate named as such; a request nested past Python's recursion limit has its
``id`` read by a scan of the top level alone, ``_top_members``); a notification gets nothing (none is due); anything else gets
the ``-32700`` (not JSON) or ``-32600`` (JSON, not a message) error with a null ``id``; an empty line
nothing. The server goes on with the next line.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ._mcp_eof import ReadStreamWrapper

__all__ = ["answer_unreadable", "refusal"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def refusal(exc: Exception) -> types.JSONRPCError | None:
    """The error that answers a line the SDK could not read (``exc``: its validation error); None when
    no answer is due (a notification)."""
    errors = exc.errors(include_url=False) if isinstance(exc, ValidationError) else []
    first: dict[str, Any] = dict(errors[0]) if errors else {}
    line = first.get("input")
    if first.get("type") != "json_invalid" or not isinstance(line, str):
        # Valid JSON but not a JSON-RPC message (an array, a number, a request without a method…).
        return _error(None, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")
    if not line.strip():
        return None  # an empty line (a client's keep-alive newline) is no message: nothing to answer
    reason = str((first.get("ctx") or {}).get("error") or first.get("msg") or exc)
    try:
        message = json.loads(line)
    except RecursionError:
        # Too deep for Python's parser too (past ~1000 levels): the id, a member of the top object, is
        # read by a scan of that level alone. Answered with a null id, its caller waited for good.
        message = _top_members(line)
        reason = f"the request is nested too deeply to read ({reason}); send a flatter JSON object"
    except ValueError:
        return _error(None, types.PARSE_ERROR, f"Parse error: the line is not JSON ({reason})")
    if not isinstance(message, dict):
        return _error(None, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")
    request_id = message.get("id")
    if "id" not in message or not _valid_id(request_id):
        return (
            None
            if "method" in message and "id" not in message
            else _error(None, types.PARSE_ERROR, f"Parse error: {reason}")
        )
    surrogate = _lone_surrogate(message)
    if surrogate is not None:
        text = (
            f"Parse error: a string of the request holds a lone UTF-16 surrogate "
            f"(\\u{ord(surrogate):04x}), which is not Unicode text (a string cut inside a "
            "surrogate pair?); send every string as valid Unicode"
        )
    else:
        text = f"Parse error: {reason}"
    return _error(request_id, types.PARSE_ERROR, text)


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def _top_members(line: str) -> dict[str, Any]:
    """The members of the top-level object of ``line`` whose values are strings, numbers, booleans or
    null (a nested value is skipped, bracket by bracket, never parsed): one pass, any depth."""
    members: dict[str, Any] = {}
    depth, key, value_next = 0, None, False
    for match in _TOKEN.finditer(line):
        token = match.group()
        if token in ("{", "["):
            if depth == 1 and value_next and isinstance(key, str):
                members[key] = ...  # there, but nested: not a valid id
            depth, value_next = depth + 1, False
        elif token in ("}", "]"):
            depth -= 1
        elif depth != 1:
            continue
        elif token == ":":
            value_next = True
        elif token == ",":
            key, value_next = None, False
        else:
            try:
                decoded = json.loads(token)
            except ValueError:
                decoded = ...
            if value_next and isinstance(key, str):
                members[key], value_next = decoded, False
            else:
                key = decoded if isinstance(decoded, str) else None
    return members


def _lone_surrogate(message: Any) -> str | None:
    """The first lone surrogate in any string (key or value) of ``message``, or None."""
    stack = [message]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                return found.group()
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


class _Answering(ReadStreamWrapper):
    """The read stream, answering (on ``write``) and skipping the lines the SDK could not read
    (``last_context`` too is the inner stream's)."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner, self._write = inner, write

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            answer = refusal(item)
            if answer is not None:
                await self._write.send(SessionMessage(answer))


def answer_unreadable(read_stream: Any, write_stream: Any) -> tuple[Any, Any]:
    """``(read, write)`` streams for ``Server.run`` whose unreadable lines are answered (see above)."""
    return _Answering(read_stream, write_stream), write_stream
