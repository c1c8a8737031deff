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
    PullResult,
    SyncLimits,
    SyncPull,
    SyncPush,
)
from ._context import LocalExecContext
from ._handle import ExecHandle
from ._options import OutputOptions
from ._runtime import Runtime
from .python import PythonBackend
from .shell import ShellBackend
from .types import BackendInfo, ExecResult, ExecSnapshot, ExecStatus, OutputTruncation, status_for_exit

__all__ = [
    "Backend",
    "BackendInfo",
    "ExecContext",
    "ExecEvent",
    "ExecHandle",
    "ExecRequest",
    "ExecResult",
    "ExecSnapshot",
    "ExecStatus",
    "ExitEvent",
    "LocalExecContext",
    "MirrorDir",
    "MirrorFile",
    "MirrorSymlink",
    "OutputChunk",
    "OutputOptions",
    "OutputTruncation",
    "PullResult",
    "PythonBackend",
    "Runtime",
    "ShellBackend",
    "SyncLimits",
    "SyncPull",
    "SyncPush",
    "status_for_exit",
]
