"""A deadline on each request's head for the share-link server: slow clients cannot hold its sockets.

uvicorn (h11) arms no timer on a new connection, and any byte received cancels its keep-alive timer, so
a client that connects and sends nothing, or trickles a request head a byte at a time, holds its
socket for good: 55 such connections were all still open after 12 s, and a few thousand use up the
server's file descriptors, after which no share link is answered (slowloris). The share-link server is
the one HTTP surface meant to face the internet (``computer serve --host 0.0.0.0``).

:class:`HeadDeadline` closes a connection whose request head is not complete ``head_timeout`` seconds
after the server began waiting for it (the connection opened, or the previous response ended and a
byte of the next request arrived; uvicorn's own keep-alive timeout covers a connection idle after a
response). The deadline is not moved by the bytes that arrive meanwhile. Bodies are not covered: the
server takes none (``GET``/``HEAD`` only).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAD_TIMEOUT", "HeadDeadline", "head_deadline"]

HEAD_TIMEOUT = 15.0  # seconds a request head may take to arrive whole


class HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head (see the module docstring)."""

    head_timeout = HEAD_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._waiting_for_head():
            if self._head_timer is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout, self._late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _late(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()


def head_deadline(seconds: float) -> type[HeadDeadline]:
    """:class:`HeadDeadline` with ``seconds`` as its deadline."""
    return type("HeadDeadline", (HeadDeadline,), {"head_timeout": float(seconds)})
