"""What crosses between an owner and its callers (no Ray import: clients load it cheaply).

The reply of every owner RPC: a value, an fs error as ``(errno, message, path)``, or a retry signal.

Owners never let an exception escape an RPC: Ray would wrap it and lose ``errno``/``filename``. The
client rebuilds fs errors with :func:`computer.storage.errors.error_from_wire` (same class, errno, path).
"""

from __future__ import annotations

from typing import Any

from ..storage.errors import error_from_wire, error_to_wire

__all__ = ["STREAM_CHUNK", "Reply", "fail", "moved", "ok", "unwrap"]

STREAM_CHUNK = 512 * 1024  # largest piece of a streamed read or upload

# ("ok", value) | ("os", (errno, message, path)) | ("exc", exception) | ("moved", {name, managed})
Reply = tuple[str, Any]


def moved(name: str, managed: bool) -> Reply:
    """The owner is closing (hibernation, takeover) and did NOT run the call: re-resolve and retry."""
    return ("moved", {"name": name, "managed": managed})


def ok(value: Any = None) -> Reply:
    return ("ok", value)


def fail(exc: BaseException) -> Reply:
    """Encode a failure; fs errors keep their class, errno and path, others travel as the exception."""
    if isinstance(exc, OSError):
        return ("os", error_to_wire(exc))
    return ("exc", exc)


def unwrap(reply: Reply) -> Any:
    """The value of a reply, or raise its error. ``MOVED`` must be handled by the caller first."""
    kind, value = reply
    if kind == "ok":
        return value
    if kind == "os":
        raise error_from_wire(tuple(value))
    if kind == "exc":
        raise value
    raise RuntimeError(f"unexpected reply kind {kind!r}")
