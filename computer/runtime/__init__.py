"""Exec runtime: backends, handles, snapshots, output tails and the execution journal.

Names load on first use (as in ``computer/actors/__init__.py``): a process that only needs the result
types or the journal's location (the command line writing a file in process, the dashboard) does not
pay for the backends, the sandbox layers and the mirror machinery they import (issue 22).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..lazy import lazy_attribute

if TYPE_CHECKING:
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
    from ._bwrap import bwrap_works
    from ._codec import decode_sync, encode_sync
    from ._context import LocalExecContext
    from ._handle import ExecHandle
    from ._journal import JOURNAL_DIR
    from ._limits import raise_descriptor_limit
    from ._mirror_pool import MirrorPool
    from ._options import OutputOptions
    from ._process import TIMEOUT_EXIT_CODE
    from ._protected import SYSTEM_DIR, reaches_protected, refuse_protected_change, system_refused
    from ._runtime import Runtime
    from ._scratch import host_mark, reap_settled, release_process
    from ._tasks import after_lane, offload
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
    "JOURNAL_DIR",
    "SYSTEM_DIR",
    "TIMEOUT_EXIT_CODE",
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
    "after_lane",
    "bwrap_works",
    "decode_sync",
    "encode_sync",
    "host_mark",
    "offload",
    "raise_descriptor_limit",
    "reaches_protected",
    "reap_settled",
    "refuse_protected_change",
    "release_process",
    "status_for_exit",
    "system_refused",
]

_LAZY = {
    **dict.fromkeys(
        (
            "Backend",
            "DeferringContext",
            "ExecContext",
            "ExecEvent",
            "ExecRequest",
            "ExitEvent",
            "LiveBackend",
            "MirrorDir",
            "MirrorFile",
            "MirrorSymlink",
            "OutputChunk",
            "PendingPull",
            "PullResult",
            "SyncLimits",
            "SyncPull",
            "SyncPush",
        ),
        "._backend",
    ),
    "bwrap_works": "._bwrap",
    "decode_sync": "._codec",
    "encode_sync": "._codec",
    "LocalExecContext": "._context",
    "ExecHandle": "._handle",
    "JOURNAL_DIR": "._journal",
    "MirrorPool": "._mirror_pool",
    "OutputOptions": "._options",
    "TIMEOUT_EXIT_CODE": "._process",
    "reaches_protected": "._protected",
    "refuse_protected_change": "._protected",
    "SYSTEM_DIR": "._protected",
    "system_refused": "._protected",
    "Runtime": "._runtime",
    "raise_descriptor_limit": "._limits",
    "host_mark": "._scratch",
    "reap_settled": "._scratch",
    "release_process": "._scratch",
    "after_lane": "._tasks",
    "offload": "._tasks",
    "PythonBackend": ".python",
    "ShellBackend": ".shell",
    **dict.fromkeys(
        (
            "BackendInfo",
            "ExecResult",
            "ExecSnapshot",
            "ExecStatus",
            "OutputTruncation",
            "ProcessInfo",
            "status_for_exit",
        ),
        ".types",
    ),
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
