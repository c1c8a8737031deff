"""The client's audit log: ``query`` and ``follow`` on the owner, and the records of calls run here.

``follow`` through a client polls (one ``audit_query`` call every ``poll`` seconds, 0.5 by default,
and at once again while a page comes back full) rather than holding a stream open: an open stream
would keep the owner from hibernating for as long as someone watches, and a poll costs one small
round trip. Reading the log never counts as activity on the owner, so a watched idle workspace
still hibernates (the next poll wakes it again).

Tool calls a client runs itself (``exec``, ``publish``, and calls answered here without touching a
file, such as invalid arguments) are recorded on the owner with one call that nobody waits for, so
they cost the tool call no round trip; calls forwarded whole are recorded by the owner as they run.
Each record's time is when the call ended by this client's clock (``at``; the owner's arrival time
was later by the round trip, or by a failover when the owner moved), never later than the owner's
clock when it arrives (``AuditLog.record``), so a forwarded call and a call answered here are timed
alike: at their end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from ..storage import AuditRecord, current_caller, payload_size, scrub_args
from ._connection import Connection

__all__ = ["ClientAudit", "default_client_id"]

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5
_PAGE = 500


def default_client_id(unique: str) -> str:
    """``<host>:<pid>:<8 hex>``: which machine and process a client's calls came from."""
    return f"{socket.gethostname()}:{os.getpid()}:{unique[:8]}"


class ClientAudit:
    """``workspace.audit`` of a :func:`computer.get_workspace` client (same API as the owner's).

    ``client`` is this client's identity in the records of its calls (``caller["client"]``); an
    :func:`~computer.storage.audit_caller` block naming ``client`` overrides it.
    """

    def __init__(self, connection: Connection, client: str) -> None:
        self._conn = connection
        self.client = client
        self._sent: set[asyncio.Task[Any]] = set()

    def caller(self) -> dict[str, str]:
        """The caller of a call made now through this client."""
        return current_caller(client=self.client)

    async def query(
        self,
        *,
        since: datetime | int | float | None = None,
        tool: str | None = None,
        status: str | None = None,
        limit: int = 100,
        kind: str | None = None,
    ) -> list[AuditRecord]:
        """As ``Workspace.audit.query``: records oldest first; the newest ``limit`` without ``since``.

        It reads this client's own records too: it waits first for those still on their way (a call
        answered here is recorded without waiting, and an async owner may run a later query first).
        """
        await self.drain()
        filters = {"since": since, "tool": tool, "status": status, "limit": limit, "kind": kind}
        rows: list[dict[str, Any]] = await self._conn.request("audit_query", filters, retry_safe=True)
        return [AuditRecord.from_json(row) for row in rows]

    async def follow(
        self,
        *,
        since: datetime | int | float | None = None,
        tool: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        poll: float = POLL_INTERVAL,
    ) -> AsyncIterator[AuditRecord]:
        """Every new matching record, polled every ``poll`` seconds (see the module docstring)."""
        filters = {"since": since, "tool": tool, "status": status, "kind": kind}
        cursor: Any = since
        await self.drain()  # as query: this client's own records first
        if cursor is None:
            cursor = await self._conn.request("audit_top", retry_safe=True)
        while True:
            page: dict[str, Any] = await self._conn.request(
                "audit_page", {**filters, "since": cursor, "limit": _PAGE}, retry_safe=True
            )
            for row in page["records"]:
                yield AuditRecord.from_json(row)
            cursor = page["top"]
            if len(page["records"]) < _PAGE:
                await asyncio.sleep(poll)

    def record_tool(self, name: str, args: Any, result: Any, duration_s: float) -> None:
        """Record a tool call run here on the owner, without waiting (``Tool.audit``)."""
        error = result.get("error") if isinstance(result, dict) else None
        entry = {
            "kind": "tool",
            "tool": name,
            "status": "error" if error is not None else "ok",
            "error": None if error is None else str(error),
            "duration_ms": duration_s * 1000.0,
            "caller": self.caller(),
            # Scrubbed here: an oversized write rejected locally must not travel whole to be recorded.
            "args": scrub_args(args if isinstance(args, dict) else {"arguments": args}),
            "detail": {"bytes_in": payload_size(args), "bytes_out": payload_size(result)},
            # When the call ended, by this clock: the owner's arrival time was later by the round trip,
            # and by a failover's seconds when the owner moved first (``_confirm`` sends it again).
            "at": time.time(),
        }
        try:
            loop = asyncio.get_running_loop()
            # Submitted now, not from a task started later. Ray does not keep an async actor's calls
            # in order, so a query of this client waits for it (``drain``) before it is sent.
            ref = self._conn.handle.audit_record.remote(entry)
        except Exception as exc:  # no loop or no owner handle: the call has answered; never surface this
            log.warning("audit: a %s call could not be recorded on its owner: %r", name, exc)
            return
        task = loop.create_task(self._confirm(ref, entry))
        self._sent.add(task)
        task.add_done_callback(self._sent.discard)

    async def _confirm(self, ref: Any, entry: dict[str, Any]) -> None:
        """Check the record's reply; one the owner did not take (it moved, or died) is sent again."""
        try:
            reply = await ref
        except Exception:  # the owner died or went away: the retrying path below re-resolves it
            reply = None
        if reply is not None and reply[0] == "ok":
            return
        try:
            await self._conn.request("audit_record", entry)
        except Exception as exc:  # the call it records has already answered: never surface this
            log.warning("audit: a %s call could not be recorded on its owner: %r", entry["tool"], exc)

    async def drain(self) -> None:
        """Wait until the records sent so far reached the owner (``close`` does)."""
        if self._sent:
            await asyncio.gather(*list(self._sent), return_exceptions=True)
