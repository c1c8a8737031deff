"""Result types of the exec runtime (SPEC section 6). Frozen and picklable so they cross Ray."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "BackendInfo",
    "ExecResult",
    "ExecSnapshot",
    "ExecStatus",
    "OutputTruncation",
    "ProcessInfo",
    "status_for_exit",
]

ExecStatus = Literal["running", "completed", "failed", "cancelled"]

# Exit codes that mean "ended by a timeout or a signal we sent": 124 timeout(1), 129 SIGHUP,
# 130 SIGINT, 137 SIGKILL, 143 SIGTERM.
CANCEL_EXIT_CODES = frozenset({124, 129, 130, 137, 143})


def status_for_exit(exit_code: int | None, *, killed: bool = False) -> ExecStatus:
    """Map an exit code to a status: 0 completed; killed/timeout codes cancelled; otherwise failed."""
    if killed or (exit_code is not None and exit_code in CANCEL_EXIT_CODES):
        return "cancelled"
    if exit_code == 0:
        return "completed"
    return "failed"


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What a backend says about itself; the exec tool shows ``description`` to the model."""

    id: str
    protocol: Literal["command", "module"]
    callable: bool
    description: str = ""
    language: str = ""
    network: bool = False
    startup_ms: float | None = None
    commands: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    isolation: str = ""


@dataclass(frozen=True, slots=True)
class OutputTruncation:
    """How one stream was cut; ``path`` is the saved full log when ``status == "saved"``."""

    status: Literal["saved", "not-saved"]
    path: str | None
    total_bytes: int
    total_lines: int
    first_line: int  # 1-based number of the first line shown
    partial_line: bool  # the shown tail starts inside a line
    reason: Literal["lines", "bytes"]


@dataclass(frozen=True, slots=True)
class ExecSnapshot:
    id: str
    backend: str
    status: ExecStatus
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: dict[str, OutputTruncation] = field(default_factory=dict)
    done: bool = False
    seq: int = 0


@dataclass(frozen=True, slots=True)
class ExecResult:
    status: ExecStatus
    exit_code: int | None
    stdout: str
    stderr: str
    value: Any = None
    truncated: dict[str, OutputTruncation] = field(default_factory=dict)
    pushed: int = 0  # files sent into the sandbox's mirror before the run
    pulled: list[str] = field(default_factory=list)  # workspace paths changed by the pull
    skipped: list[str] = field(default_factory=list)  # paths not mirrored, or left alone by the pull
    id: str = ""
    backend: str = ""
    error: str | None = None  # why a run failed outside the program (dead worker, sandbox error…)
    # Why each path of ``skipped`` was left out (path -> reason); every skipped path has one.
    skipped_reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process of a live sandbox (SPEC section 10), as ``ps`` inside the sandbox would show it.

    ``pid`` is the sandbox's own (what ``$!`` printed there, what ``kill_process`` takes); ``started``
    is UTC; ``exec_id`` is the run that started it (its log of output written after the run returned
    is ``log``, under ``/.computer/output/``), when known.
    """

    pid: int
    command: str
    started: datetime
    cpu_seconds: float
    rss_bytes: int
    ppid: int = 0
    exec_id: str | None = None
    log: str | None = None
