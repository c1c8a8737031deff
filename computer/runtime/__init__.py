"""Exec runtime: backends, handles, snapshots, output tails and the execution journal."""

from __future__ import annotations

from .types import BackendInfo, ExecResult, ExecSnapshot, ExecStatus, OutputTruncation, status_for_exit

__all__ = [
    "BackendInfo",
    "ExecResult",
    "ExecSnapshot",
    "ExecStatus",
    "OutputTruncation",
    "status_for_exit",
]
