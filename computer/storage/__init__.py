"""The storage engine: one SQLite file per workspace (paths, chunks, walk/find/grep, change log, locks).

Imports nothing else of the project.
"""

from __future__ import annotations

from ._audit import AuditLog, AuditRecord, ToolCall, audit_caller, current_caller, current_tool_call
from ._audit_record import exit_signal
from ._chunks import CHUNK_SIZE
from ._content import check_write_data
from ._db import storage_failure, use_wal
from ._redact import payload_size, scrub, scrub_args
from ._state import BOOKKEEPING_BYTES, BOOKKEEPING_DIR, TOUCH
from .errors import FsInvalidError, QuotaError, error_from_wire, error_to_wire, fs_error
from .filesystem import FileSystem
from .locks import HeldLease, LockTable
from .types import (
    BatchResult,
    Change,
    ChangeSet,
    ChunkRef,
    DirEntry,
    FileStat,
    FindEntry,
    GrepContextLine,
    GrepMatch,
    ManifestEntry,
    ManifestRow,
)

__all__ = [
    "BOOKKEEPING_BYTES",
    "BOOKKEEPING_DIR",
    "CHUNK_SIZE",
    "TOUCH",
    "AuditLog",
    "AuditRecord",
    "BatchResult",
    "Change",
    "ChangeSet",
    "ChunkRef",
    "DirEntry",
    "FileStat",
    "FileSystem",
    "FindEntry",
    "FsInvalidError",
    "GrepContextLine",
    "GrepMatch",
    "HeldLease",
    "LockTable",
    "ManifestEntry",
    "ManifestRow",
    "QuotaError",
    "ToolCall",
    "audit_caller",
    "check_write_data",
    "current_caller",
    "current_tool_call",
    "error_from_wire",
    "error_to_wire",
    "exit_signal",
    "fs_error",
    "payload_size",
    "scrub",
    "scrub_args",
    "storage_failure",
    "use_wal",
]
