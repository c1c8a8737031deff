"""The audit log's record type, the caller context (who is calling), the current tool call and an exec
record's error and arguments."""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "COLUMNS",
    "AuditKind",
    "AuditRecord",
    "AuditStatus",
    "ToolCall",
    "audit_caller",
    "current_caller",
    "current_tool_call",
    "exec_args",
    "exec_error",
    "exit_signal",
    "record_from_row",
    "record_time",
    "since_clause",
    "sql_int",
]

AuditKind = Literal["tool", "exec", "share"]
AuditStatus = Literal["ok", "error"]

# -- who is calling --------------------------------------------------------------------------------

_caller: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("audit_caller", default=None)


@contextlib.contextmanager
def audit_caller(**fields: str | None) -> Iterator[dict[str, str]]:
    """Mark the calls made inside the block as coming from this caller (``client``, ``agent``,
    ``adapter``, or any other field); nested blocks merge, ``None`` values are ignored."""
    merged = {**(_caller.get() or {}), **{k: str(v) for k, v in fields.items() if v is not None}}
    token = _caller.set(merged)
    try:
        yield merged
    finally:
        _caller.reset(token)


def current_caller(**defaults: str) -> dict[str, str]:
    """The caller of the code running now: ``defaults`` overridden by :func:`audit_caller` blocks."""
    given = _caller.get()
    return {**defaults, **given} if given else dict(defaults)


@dataclass
class ToolCall:
    """The tool call running now; a transport that hands it whole to another process (which records
    it there) sets ``recorded_elsewhere``."""

    name: str
    recorded_elsewhere: bool = False


current_tool_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "current_tool_call", default=None
)


# -- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One entry of the audit log (SPEC section 10).

    ``kind`` "tool": ``tool`` is the tool's name, ``args`` its arguments, ``detail`` ``bytes_in``,
    ``bytes_out``. "exec": ``tool`` is the backend id, ``args`` the command (``command``, ``cwd``, env
    names, ``timeout``), ``detail`` the run (``id``, ``backend``, ``status``, ``exit_code``,
    ``pushed``, ``pulled``, ``skipped``, ``logs``). "share": ``tool`` is "share", ``args`` the path
    and options, ``detail`` ``url``, ``key``, ``expires_at``, ``content_type``.
    ``caller`` holds ``client``, ``agent`` and ``adapter`` when known. ``time`` is UTC.
    """

    id: int
    time: datetime
    kind: AuditKind
    tool: str | None
    status: AuditStatus
    error: str | None
    duration_ms: float | None
    caller: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``time`` as ISO 8601 with ``+00:00``)."""
        return {
            "id": self.id,
            "time": self.time.isoformat(),
            "kind": self.kind,
            "tool": self.tool,
            "status": self.status,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "caller": self.caller,
            "args": self.args,
            "detail": self.detail,
        }

    def summary(self) -> str:
        """One line saying what the record is about (the CLI's and the dashboard's description)."""
        a, d = self.args, self.detail
        if self.kind == "exec":
            text = f"{d.get('id', '')} $ {a.get('command', '')}"
            if d.get("exit_code") is not None:
                text += f"  → exit {d['exit_code']}"
            if d.get("pulled") or d.get("skipped"):
                text += f", pulled {d.get('pulled', 0)}, skipped {d.get('skipped', 0)}"
        elif self.kind == "share":
            text = f"{a.get('path', '')} → {d.get('url', '')}"
        else:
            main = next((a[k] for k in _MAIN_ARGS if isinstance(a.get(k), str)), None)
            text = main if main is not None else ", ".join(f"{k}={v}" for k, v in list(a.items())[:3])
        if self.error:
            text = f"{text}  ✗ {self.error}" if text else f"✗ {self.error}"
        return " ".join(text.split())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuditRecord:
        return cls(
            id=int(data["id"]),
            time=datetime.fromisoformat(str(data["time"])),
            kind=data["kind"],
            tool=data.get("tool"),
            status=data["status"],
            error=data.get("error"),
            duration_ms=data.get("duration_ms"),
            caller=dict(data.get("caller") or {}),
            args=dict(data.get("args") or {}),
            detail=dict(data.get("detail") or {}),
        )


# The argument that says most about a tool call, by preference.
_MAIN_ARGS = ("command", "path", "pattern", "query", "directory")

COLUMNS = "id, time, kind, tool, status, error, duration_ms, caller, args, detail"


def record_from_row(row: tuple[Any, ...]) -> AuditRecord:
    rid, micros, kind, tool, status, error, duration, caller, args, detail = row
    return AuditRecord(
        id=int(rid),
        time=datetime.fromtimestamp(micros / 1e6, tz=UTC),
        kind=kind,
        tool=tool,
        status=status,
        error=error,
        duration_ms=duration,
        caller=_loads(caller) if caller else {},
        args=_loads(args) if args else {},
        detail=_loads(detail) if detail else {},
    )


# A record written before non-finite floats were scrubbed holds ``NaN`` in its JSON: read as the
# string ``"NaN"``, as one written now (a float no JSON reader takes refused the dashboard's answer).
_loads = json.JSONDecoder(parse_constant=str).decode


SQL_MAX = 2**63 - 1


def sql_int(value: float) -> int:
    """``value`` as an integer SQLite can hold (clamped to its 64-bit range; infinities included)."""
    if value >= SQL_MAX:
        return SQL_MAX
    if value <= -SQL_MAX - 1:
        return -SQL_MAX - 1
    return int(value)


def since_clause(since: datetime | int | float | None) -> tuple[str, list[Any]]:
    """SQL condition and parameters for ``since``: a record id (int: records after it) or a time
    (datetime, naive taken as UTC, or seconds since the epoch as a float: records at or after it)."""
    if since is None:
        return "", []
    if isinstance(since, bool):
        raise TypeError("since must be a datetime, a record id or epoch seconds")
    # Bounded to SQLite's 64-bit integers (a larger one raised OverflowError: ``computer log
    # --limit 1e23`` was a traceback); past them every record is before or after, as asked.
    if isinstance(since, int):
        return "id > ?", [sql_int(since)]
    if isinstance(since, float):
        if math.isnan(since):
            raise ValueError("since must be a number of seconds, not NaN")
        return "time >= ?", [sql_int(since * 1e6)]
    if isinstance(since, datetime):
        moment = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
        return "time >= ?", [int(moment.timestamp() * 1e6)]
    raise TypeError(f"since must be a datetime, a record id or epoch seconds, not {type(since).__name__}")


def record_time(at: Any) -> float:
    """When a record happened: ``at`` (epoch seconds, by the recorder's clock: a client's call, sent to
    the owner after it answered), or now when ``at`` is omitted, no finite number, before 1970 or later
    than now (a client's clock running ahead never puts its record after the owner's own). A NaN, or a
    time whose microseconds pass SQLite's 64-bit integers (``-1e30``), lost its whole batch of records."""
    now = time.time()
    return float(at) if isinstance(at, int | float) and math.isfinite(at) and 0 <= at < now else now


# -- an exec record's fields -------------------------------------------------------------------------

# The exit code of a run its timeout stopped (the runtime's ``TIMEOUT_EXIT_CODE``, as timeout(1)).
TIMEOUT_EXIT_CODE = 124


def exec_error(status: str, exit_code: int | None, error: str | None, timeout: float | None) -> str | None:
    """The error an exec record shows: the run's own, else what ended it (a timeout as the exec tool
    says it, not as any cancelled run)."""
    if error:
        return error
    if status == "cancelled" and exit_code == TIMEOUT_EXIT_CODE and timeout is not None:
        return f"timed out after {timeout:g} s"
    if status == "completed":
        return None
    name = exit_signal(exit_code)
    return (
        f"{status} (exit code {exit_code})" if name is None else f"killed by {name} (exit code {exit_code})"
    )


def exit_signal(exit_code: int | None) -> str | None:
    """The signal a shell-style exit code ``128 + N`` names (``SIGKILL`` for 137, ``SIGSEGV`` for 139),
    else None: how a run killed by a signal says so.

    SPEC 6 makes 129, 130, 137 and 143 ``cancelled`` whoever sent the signal, so a program that killed
    itself (``kill -9 $$``, ``os.kill(os.getpid(), 9)``) read "cancelled (exit code 137)" in the audit,
    as if a caller or a timeout had ended it (and a SIGSEGV "failed (exit code 139)"); a kill of ours
    says ``killed``, a timeout ``timed out``, any other death by a signal names it (the exec tool's
    ``signal``, the audit's ``killed by SIGKILL (exit code 137)``). A program's own ``exit 137`` reads
    the same: the code is all the backends report, and 128 + N is the shell's spelling of signal N.
    """
    if exit_code is None or not 128 < exit_code <= 128 + 64:
        return None
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return None


def exec_args(
    command: str, cwd: str | None, env: Mapping[str, str] | None, timeout: float | None
) -> dict[str, Any]:
    """An exec record's arguments: ``env`` as its names only (values are where secrets live)."""
    args: dict[str, Any] = {"command": command}
    if cwd is not None:
        args["cwd"] = cwd
    if env:
        args["env"] = sorted(env)
    if timeout is not None:
        args["timeout"] = timeout
    return args
