"""Exec runtime: backends, handles, snapshots, output tails and the execution journal."""

from __future__ import annotations

from ._backend import (
    Backend,
    DeferringContext,
    ExecContext,
    ExecEvent,
    ExecRequest,
    ExitEvent,
    LiveBackend,
    MirrorDir,
    MirrorFile,
    MirrorSymlink,
    OutputChunk,
    PendingPull,
    PullResult,
    SyncLimits,
    SyncPull,
    SyncPush,
)
from ._codec import decode_sync, encode_sync
from ._context import LocalExecContext
from ._handle import ExecHandle
from ._mirror_pool import MirrorPool
from ._options import OutputOptions
from ._runtime import Runtime
from ._scratch import release_process
from .python import PythonBackend
from .shell import ShellBackend
from .types import (
    BackendInfo,
    ExecResult,
    ExecSnapshot,
    ExecStatus,
    OutputTruncation,
    ProcessInfo,
    status_for_exit,
)

__all__ = [
    "Backend",
    "BackendInfo",
    "DeferringContext",
    "ExecContext",
    "ExecEvent",
    "ExecHandle",
    "ExecRequest",
    "ExecResult",
    "ExecSnapshot",
    "ExecStatus",
    "ExitEvent",
    "LiveBackend",
    "LocalExecContext",
    "MirrorDir",
    "MirrorFile",
    "MirrorPool",
    "MirrorSymlink",
    "OutputChunk",
    "OutputOptions",
    "OutputTruncation",
    "PendingPull",
    "ProcessInfo",
    "PullResult",
    "PythonBackend",
    "Runtime",
    "ShellBackend",
    "SyncLimits",
    "SyncPull",
    "SyncPush",
    "decode_sync",
    "encode_sync",
    "release_process",
    "status_for_exit",
]
