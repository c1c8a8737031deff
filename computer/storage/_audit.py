"""The audit log of one workspace: every tool call, exec run and share link, in the workspace's own file.

Records live in the ``audit`` table of the workspace's SQLite file (schema version 4; see
``_schema.py``), so they move, hibernate and wake with the workspace and need no side file.

Writing: :meth:`AuditLog.record` scrubs the record (secret-looking values redacted, long values cut)
and appends it to a small in-memory batch; the batch is committed in one transaction of its own
``FLUSH_DELAY`` seconds later (or at once when no event loop runs, when it reaches ``FLUSH_BATCH``
records, before a query and at close). A tool call therefore never waits for an audit commit, and a
burst of calls costs one commit. A batch whose statement fails is written again row by row
(``_audit_rows``): a bad record costs only itself, logged and counted in ``dropped``. The price of
batching: a process killed outright loses at most the records of its last ``FLUSH_DELAY`` seconds. A zombie owner (fenced out by a newer one) writes nothing.

Retention is bounded by count and bytes (``max_records``, ``max_bytes``): past either, the oldest
records go, down to 90% of the limit, so trims are rare and whole.

Reading: :meth:`AuditLog.query` and :meth:`AuditLog.follow` (SPEC section 10). ``follow`` wakes on
this process's own flushes and polls the file for other writers (a read-only reader: the dashboard,
``computer log``).

Who called: :func:`audit_caller` sets fields of the caller (``client``, ``agent``, ``adapter``) for
the calls made inside it; nested uses merge. :data:`current_tool_call` lets a transport say that the
current tool call is recorded elsewhere (a client forwarding it whole to the owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from typing import Any

from ._audit_record import (
    COLUMNS,
    AuditKind,
    AuditRecord,
    AuditStatus,
    ToolCall,
    audit_caller,
    current_caller,
    current_tool_call,
    exec_args,
    exec_error,
    record_from_row,
    record_time,
    since_clause,
    sql_int,
)
from ._audit_rows import INSERT, NO_RESULT, encode, insert_one_by_one
from ._db import Database
from ._redact import redact, scrub

__all__ = [
    "DEFAULT_MAX_AUDIT_BYTES",
    "DEFAULT_MAX_AUDIT_RECORDS",
    "AuditLog",
    "AuditRecord",
    "ToolCall",
    "audit_caller",
    "current_caller",
    "current_tool_call",
    "redact",
    "scrub",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_AUDIT_RECORDS = 10_000
DEFAULT_MAX_AUDIT_BYTES = 16 * 1024 * 1024
FLUSH_DELAY = 0.05  # seconds between a record and the commit that holds it
FLUSH_BATCH = 256  # records held at most before a commit
POLL_INTERVAL = 0.5  # seconds between looks at the file while following other writers


class AuditLog:
    """The audit log of one store (see the module docstring).

    ``writable`` is False for a read-only store (records are then refused); ``is_owner`` says whether
    this process still owns the file (a fenced-out owner writes nothing).
    """

    def __init__(
        self,
        db: Database,
        *,
        writable: bool = True,
        is_owner: Callable[[], bool] = lambda: True,
        max_records: int = DEFAULT_MAX_AUDIT_RECORDS,
        max_bytes: int = DEFAULT_MAX_AUDIT_BYTES,
        client: str = "local",
    ) -> None:
        self._db = db
        self.writable = writable
        self._is_owner = is_owner
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.client = client  # the caller's ``client`` when no audit_caller block names one
        self._pending: list[tuple[Any, ...]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._waiters: set[asyncio.Event] = set()
        self._count: int | None = None  # records and bytes stored, loaded on the first flush
        self._bytes = 0
        self.closed = False
        # Records not written (fenced out, refused by ``encode``, or a row SQLite refused), each logged;
        # the owner's ``stats()`` shows it as ``audit_dropped``.
        self.dropped = 0

    def configure(self, *, max_records: int | None = None, max_bytes: int | None = None) -> None:
        """Change the retention limits (``None`` keeps one); applied at the next commit."""
        if max_records is not None:
            if max_records < 1:
                raise ValueError("max_records must be at least 1")
            self.max_records = max_records
        if max_bytes is not None:
            if max_bytes < 1024:
                raise ValueError("max_bytes must be at least 1024")
            self.max_bytes = max_bytes

    # -- writing --------------------------------------------------------------------------------

    def record(
        self,
        kind: AuditKind,
        *,
        tool: str | None,
        status: AuditStatus,
        error: str | None = None,
        duration_ms: float | None = None,
        caller: Mapping[str, str] | None = None,
        args: Mapping[str, Any] | None = None,
        detail: Mapping[str, Any] | None = None,
        at: float | None = None,
    ) -> None:
        """Append one record (committed shortly after; see the module docstring). Never raises.
        ``at``: when it happened, by the recorder's clock (:func:`record_time`)."""
        self._append(kind, tool, status, error, duration_ms, caller, args, detail, record_time(at), NO_RESULT)

    def record_tool(
        self, name: str, args: Any, result: Any, duration_s: float, *, caller: Mapping[str, str] | None = None
    ) -> None:
        """Record one tool call from its arguments and its result dict (``{"error": ...}`` = failed).

        Only references are kept here: scrubbing, sizes (``bytes_in``/``bytes_out``) and encoding
        happen in the batch's commit, off the call's path.
        """
        error = result.get("error") if type(result) is dict else None
        status: AuditStatus = "ok" if error is None else "error"
        arguments = args if type(args) is dict else {"arguments": args}
        self._append("tool", name, status, error, duration_s * 1000.0, caller, arguments, None, None, result)

    def _append(
        self,
        kind: AuditKind,
        tool: str | None,
        status: AuditStatus,
        error: Any,
        duration_ms: float | None,
        caller: Mapping[str, str] | None,
        args: Mapping[str, Any] | None,
        detail: Mapping[str, Any] | None,
        at: float | None,
        result: Any,
    ) -> None:
        if self.closed or not self.writable:
            return
        who = caller if caller is not None else current_caller(client=self.client)
        moment = time.time() if at is None else at
        self._pending.append((moment, kind, tool, status, error, duration_ms, who, args, detail, result))
        self._schedule()

    def record_exec(
        self,
        result: Any,
        *,
        command: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        duration_s: float | None = None,
    ) -> None:
        """Record one finished run from its ``ExecResult`` (read by attribute). Never raises."""
        try:
            self._record_exec(
                result, command=command, cwd=cwd, env=env, timeout=timeout, duration_s=duration_s
            )
        except Exception:
            log.exception("audit: could not record a run")

    def _record_exec(
        self,
        result: Any,
        *,
        command: str,
        cwd: str | None,
        env: Mapping[str, str] | None,
        timeout: float | None,
        duration_s: float | None,
    ) -> None:
        logs = {
            stream: cut.path
            for stream, cut in (getattr(result, "truncated", None) or {}).items()
            if getattr(cut, "path", None)
        }
        status = str(getattr(result, "status", "failed"))
        exit_code = getattr(result, "exit_code", None)
        error = getattr(result, "error", None)
        self.record(
            "exec",
            tool=str(getattr(result, "backend", "")) or None,
            status="ok" if status == "completed" else "error",
            error=exec_error(status, exit_code, error, timeout),
            duration_ms=None if duration_s is None else duration_s * 1000.0,
            args=exec_args(command, cwd, env, timeout),
            detail={
                "id": getattr(result, "id", None),
                "backend": getattr(result, "backend", None),
                "status": status,
                "exit_code": exit_code,
                "pushed": getattr(result, "pushed", 0),
                "pulled": len(getattr(result, "pulled", ()) or ()),
                "skipped": len(getattr(result, "skipped", ()) or ()),
                "logs": logs,
            },
        )

    def record_share(
        self, path: str, url: str, *, options: Mapping[str, Any], detail: Mapping[str, Any]
    ) -> None:
        """Record one share link created for ``path``."""
        self.record(
            "share",
            tool="share",
            status="ok",
            args={"path": path, **{k: v for k, v in options.items() if v is not None}},
            detail={"url": url, **detail},
        )

    def _schedule(self) -> None:
        if len(self._pending) >= FLUSH_BATCH:
            self.flush()
            return
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(FLUSH_DELAY, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Commit the records waiting in memory, in one transaction. Never raises."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        db = self._db
        if db.in_transaction:  # a transaction is open (across an await): try again shortly, or with the
            try:  # next record, query or close when no loop runs
                self._timer = asyncio.get_running_loop().call_later(FLUSH_DELAY, self._flush_later)
            except RuntimeError:
                pass
            return
        pending, self._pending = self._pending, []
        rows = []
        for entry in pending:
            try:
                rows.append(encode(*entry))
            except Exception as exc:  # a record the log cannot keep must never fail a commit of the others
                self.dropped += 1
                log.warning("audit: a %s record was not written: %r", str(entry[1])[:16], exc)
        if not rows:
            return
        if not self._owns():
            self.dropped += len(rows)
            return
        try:
            with db.transaction():
                self._load_totals()
                db.executemany(INSERT, rows)
                self._written(rows)
        except Exception as exc:
            self._count = None
            if len(rows) == 1 or not self._owns():
                self.dropped += len(rows)
                log.warning("audit: %d record(s) could not be written: %r", len(rows), exc)
                return
            # One bad row fails the statement: each row alone, so only the bad ones are lost.
            written, failed = insert_one_by_one(db, rows)
            self.dropped += failed
            try:
                with db.transaction():
                    self._load_totals()  # reloaded: the rows went in without counting them
            except Exception as again:
                self._count = None
                log.warning("audit: the log's totals could not be read: %r", again)
            if not written:
                return
        for waiter in self._waiters:
            waiter.set()

    def _owns(self) -> bool:
        try:
            return self._is_owner()
        except Exception as exc:  # the file closed or failed: nothing can be written
            log.warning("audit: could not tell whether this process owns the log: %r", exc)
            return False

    def _load_totals(self) -> None:
        """Read the records and bytes stored (once; kept up to date by ``_written``), trim if over."""
        if self._count is None:
            count, size = self._db.one("SELECT count(*), coalesce(sum(size), 0) FROM audit")
            self._count, self._bytes = int(count), int(size)
            self._trim_over()

    def _written(self, rows: list[tuple[Any, ...]]) -> None:
        self._count = (self._count or 0) + len(rows)
        self._bytes += sum(row[-1] for row in rows)
        self._trim_over()

    def _trim_over(self) -> None:
        if (self._count or 0) > self.max_records or self._bytes > self.max_bytes:
            self._trim()

    def _trim(self) -> None:
        """Delete the oldest records until both totals are at most 90% of their limits."""
        db = self._db
        keep_records = max(1, self.max_records * 9 // 10)
        keep_bytes = self.max_bytes * 9 // 10
        row = db.one(
            "SELECT id FROM (SELECT id, sum(size) OVER (ORDER BY id DESC) AS acc,"
            " row_number() OVER (ORDER BY id DESC) AS n FROM audit)"
            " WHERE acc > ? OR n > ? ORDER BY id DESC LIMIT 1",
            (keep_bytes, keep_records),
        )
        if row is None:
            return
        db.execute("DELETE FROM audit WHERE id <= ?", (int(row[0]),))
        count, size = db.one("SELECT count(*), coalesce(sum(size), 0) FROM audit")
        self._count, self._bytes = int(count), int(size)

    def close(self) -> None:
        """Commit what waits and stop accepting records; wakes every follower."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        for waiter in self._waiters:
            waiter.set()

    # -- reading --------------------------------------------------------------------------------

    def _select(
        self,
        *,
        since: datetime | int | float | None,
        tool: str | None,
        status: str | None,
        kind: str | None,
        limit: int,
        newest: bool,
    ) -> list[AuditRecord]:
        if status is not None and status not in ("ok", "error"):
            raise ValueError(f"status must be 'ok' or 'error', not {status!r}")
        if kind is not None and kind not in ("tool", "exec", "share"):
            raise ValueError(f"kind must be 'tool', 'exec' or 'share', not {kind!r}")
        if limit < 0:
            raise ValueError("limit must not be negative")
        where, params = since_clause(since)
        clauses = [where] if where else []
        for column, value in (("tool", tool), ("status", status), ("kind", kind)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {COLUMNS} FROM audit"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += f" ORDER BY id {'DESC' if newest else 'ASC'} LIMIT ?"
        params.append(sql_int(limit))
        rows = self._db.execute(sql, params).fetchall()
        records = [record_from_row(row) for row in rows]
        if newest:
            records.reverse()
        return records

    def read(
        self,
        *,
        since: datetime | int | float | None = None,
        tool: str | None = None,
        status: str | None = None,
        limit: int = 100,
        kind: str | None = None,
    ) -> list[AuditRecord]:
        """:meth:`query` without the coroutine (for callers that are not async)."""
        self.flush()
        return self._select(
            since=since, tool=tool, status=status, kind=kind, limit=limit, newest=since is None
        )

    def top(self) -> int:
        """The id of the newest record (0 when there is none)."""
        self.flush()
        return int(self._db.one("SELECT coalesce(max(id), 0) FROM audit")[0])

    def page(
        self,
        *,
        since: datetime | int | float | None,
        tool: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        limit: int = 500,
    ) -> tuple[list[AuditRecord], int]:
        """The first ``limit`` matching records after ``since`` and the newest id, read together."""
        self.flush()
        # One read snapshot: the records and the newest id agree, even with another writer.
        with self._db.snapshot():
            batch = self._select(since=since, tool=tool, status=status, kind=kind, limit=limit, newest=False)
            top = int(self._db.one("SELECT coalesce(max(id), 0) FROM audit")[0])
        if batch and len(batch) == limit:
            top = batch[-1].id  # more may follow: resume after the last one given
        return batch, top

    async def query(
        self,
        *,
        since: datetime | int | float | None = None,
        tool: str | None = None,
        status: str | None = None,
        limit: int = 100,
        kind: str | None = None,
    ) -> list[AuditRecord]:
        """Records in the order they were written (oldest first).

        Without ``since``: the newest ``limit`` matching records. With ``since`` (a datetime, epoch
        seconds as a float, or a record id as an int): the first ``limit`` matching records from
        then on, so ``since=records[-1].id`` pages forward. ``status`` is "ok" or "error";
        ``kind`` "tool", "exec" or "share".
        """
        return self.read(since=since, tool=tool, status=status, limit=limit, kind=kind)

    async def follow(
        self,
        *,
        since: datetime | int | float | None = None,
        tool: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        poll: float = POLL_INTERVAL,
    ) -> AsyncIterator[AuditRecord]:
        """Every new matching record as it is written, until the log closes or the caller stops.

        Starts after the newest record now (``since`` starts earlier: every record after it first).
        Ends when the log closes (its store closes the file with it: the records of that close's own
        commit that the follower had not read yet are not given).
        Records written by this process arrive as their batch commits (≤ ``FLUSH_DELAY`` s); those of
        another process (an owner seen through a read-only store) within ``poll`` seconds.
        """
        if self.closed:
            return
        if since is None:
            since = self.top()
        event = asyncio.Event()
        self._waiters.add(event)
        try:
            while True:
                if self.closed:
                    # Its store closed the file with the log (the waiters run after that close):
                    # reading now raised ProgrammingError from the follower's ``async for``.
                    return
                batch, top = self.page(since=since, tool=tool, status=status, kind=kind, limit=500)
                for record in batch:
                    yield record
                # The next look starts after the newest record seen, whether it matched or not.
                since = top
                if len(batch) == 500:
                    continue
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), poll)
        finally:
            self._waiters.discard(event)
