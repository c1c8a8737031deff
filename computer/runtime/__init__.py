"""Exec runtime: backends, handles, snapshots, output tails and the execution journal."""

from __future__ import annotations

from ._backend import (
    Backend,
    ExecContext,
    ExecEvent,
    ExecRequest,
    ExitEvent,
    MirrorDir,
    MirrorFile,
    MirrorSymlink,
    OutputChunk,
    SyncLimits,
    SyncPull,
    SyncPush,
)
from ._runtime import Runtime
from .types import BackendInfo, ExecResult, ExecSnapshot, ExecStatus, OutputTruncation, status_for_exit

__all__ = [
    "Backend",
    "BackendInfo",
    "ExecContext",
    "ExecEvent",
    "ExecRequest",
    "ExecResult",
    "ExecSnapshot",
    "ExecStatus",
    "ExitEvent",
    "MirrorDir",
    "MirrorFile",
    "MirrorSymlink",
    "OutputChunk",
    "OutputTruncation",
    "Runtime",
    "SyncLimits",
    "SyncPull",
    "SyncPush",
    "status_for_exit",
]
