"""The audit log's table rows: a pending record encoded (checked, scrubbed, sized) and a batch inserted.

A batch is inserted with one statement in one transaction; when that fails, each row is inserted in a
transaction of its own, so one row SQLite cannot store (or one a bug lets through) costs only itself:
every good row is kept and each bad one is logged and counted (``AuditLog.dropped``, the owner's
``stats()["audit_dropped"]``). Before, one such row lost every record of its batch (up to 256).

What :func:`encode` refuses, with an error naming the field (the record is dropped, logged and
counted): a ``kind`` other than "tool", "exec", "share", a ``status`` other than "ok", "error", a
``tool`` that is not a string (a list or a dict passed the old checks and failed the insert of its
whole batch; ``None`` stays allowed), a ``duration_ms`` that is no number. What it mends: a
``tool`` name is cut at ``MAX_VALUE_CHARS`` as any value (a model naming an unknown tool with a
megabyte of text made a megabyte record), a ``duration_ms`` that is not finite is ``None``, and a
float that is not finite inside the JSON fields is its name as a string (``scrub``: ``NaN`` is not
JSON, and the dashboard's JSON answer refused a page holding one).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._db import Database
from ._redact import (
    MAX_ERROR_CHARS,
    MAX_VALUE_CHARS,
    cut,
    payload_size,
    redact,
    scrub,
    scrub_args,
    sound_text,
)

__all__ = ["INSERT", "KINDS", "NO_RESULT", "STATUSES", "encode", "insert_one_by_one"]

log = logging.getLogger("computer.storage._audit")

KINDS = ("tool", "exec", "share")
STATUSES = ("ok", "error")
INSERT = (
    "INSERT INTO audit (time, kind, tool, status, error, duration_ms, caller, args, detail, size)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
NO_RESULT = object()  # a record that is not a tool call's (its detail is given, not two sizes)
_LOGGED_ROWS = 8  # bad rows of one batch logged one by one; the rest in one line

_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder for every record


@functools.lru_cache(maxsize=256)
def _caller_json(fields: tuple[tuple[str, str], ...]) -> str:
    """A caller's JSON (a few distinct callers write most records)."""
    return _json(scrub(dict(fields)))  # a record that is not a tool call's: no sizes to add


def encode(
    at: float,
    kind: Any,
    tool: Any,
    status: Any,
    error: Any,
    duration_ms: Any,
    caller: Mapping[str, str],
    args: Mapping[str, Any] | None,
    detail: Mapping[str, Any] | None,
    result: Any,
) -> tuple[Any, ...]:
    """One pending record as its table row: checked, scrubbed, sized and encoded (at commit time).
    Raises ``ValueError``/``TypeError`` naming the field for a record the log cannot keep."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {cut(repr(kind), 64)}")
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {cut(repr(status), 64)}")
    if tool is not None and not isinstance(tool, str):
        raise TypeError(f"tool must be a string or None, not {type(tool).__name__}")
    if result is NO_RESULT:
        detail_json = _json(scrub(dict(detail or {}), limit=1024))
    else:  # a tool call's detail is its two sizes
        detail_json = f'{{"bytes_in":{payload_size(args)},"bytes_out":{payload_size(result)}}}'
    caller_json = _caller_json(tuple(caller.items()))
    args_json = _json(scrub_args(args))
    text = None if error is None else cut(redact(str(error)[: MAX_ERROR_CHARS + 64]), MAX_ERROR_CHARS)
    name = None if tool is None else cut(tool, MAX_VALUE_CHARS)
    size = 64 + len(caller_json) + len(args_json) + len(detail_json) + len(text or "") + len(name or "")
    duration = None if duration_ms is None else float(duration_ms)
    duration = round(duration, 3) if duration is not None and math.isfinite(duration) else None
    row = (int(at * 1e6), kind, name, status, text, duration, caller_json, args_json, detail_json, size)
    return tuple(sound_text(v) if isinstance(v, str) else v for v in row)


def insert_one_by_one(db: Database, rows: Sequence[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], int]:
    """Each row in a transaction of its own (after the batch failed): the rows written and how many
    failed, each failure logged (the first ``_LOGGED_ROWS`` one by one, the rest in one line)."""
    written: list[tuple[Any, ...]] = []
    failed = 0
    first: BaseException | None = None
    for row in rows:
        try:
            with db.transaction():
                db.execute(INSERT, row)
        except Exception as exc:
            failed += 1
            first = first or exc
            if failed <= _LOGGED_ROWS:
                log.warning(
                    "audit: a %s record (tool %s) could not be written, the rest of its batch was: %r",
                    row[1],
                    cut(repr(row[2]), 64),
                    exc,
                )
        else:
            written.append(row)
    if failed > _LOGGED_ROWS:
        log.warning(
            "audit: %d more record(s) of a batch could not be written (the first: %r)",
            failed - _LOGGED_ROWS,
            first,
        )
    return written, failed
