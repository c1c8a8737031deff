"""``ExecJournal``: one JSON record per execution, kept in the workspace under ``/.computer/exec``.

A record is written when a run starts (status ``running``) and when it ends (the full result), so
``get_exec`` finds a finished run after its owner restarted. Records still ``running`` that belong to
an earlier owner are reconciled to ``failed`` ("owner restarted") on the first use. Only the newest
:data:`MAX_RECORDS` are kept (pruned every 20 finished runs).

Decided: a run cut by its owner's death may have had part of its changes pulled (a pull commits page
by page, a live sandbox's ticks during the run), and its record, written at the start and the end
only, cannot list them. Its start record keeps the workspace's revision then (``rev``); the
reconciled record's ``pulled`` stays empty, and its ``error`` says which it is: ``owner restarted``
alone when nothing in the workspace (outside ``/.computer``, the runtime's own: ``SYSTEM_DIR``; a
directory's new time alone is no change) changed since the run started (nothing of it landed:
``pulled=[]`` is the truth), else ``owner restarted: part of what the run changed may have
been pulled before its owner died (pulled lists none of it); N path(s) changed since it started
(by it or by others): /a, /b...`` (at most :data:`CUT_EXAMPLES` named), also when the log no longer
reaches back that far or the record is older than ``rev``. Listing the pulled names exactly would
cost a record write per committed page of every run.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import time
from collections.abc import Callable, Collection
from typing import Any

from ..storage import TOUCH
from ..storage.paths import is_within
from ._protected import SYSTEM_DIR
from .types import ExecResult, OutputTruncation

__all__ = ["JOURNAL_DIR", "MAX_RECORDS", "ExecJournal", "journal_refused", "result_from_record"]

JOURNAL_DIR = "/.computer/exec"
CUT = "owner restarted"  # a run its owner's death cut: the error of its reconciled record (``_cut``)
CUT_EXAMPLES = 5  # paths a cut run's error names at most
MAX_RECORDS = 200
_PRUNE_EVERY = 20
# A record's fields and their types (None allowed), checked as it is read back.
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "status": str,
    "exit_code": int,
    "stdout": str,
    "stderr": str,
    "truncated": dict,
    "pushed": int,
    "pulled": list,
    "skipped": list,
    "skipped_reasons": dict,
    "id": str,
    "backend": str,
    "error": str,
}


def journal_refused(path: str) -> PermissionError:
    """What a program's change of the journal gets (see ``_protected``)."""
    return PermissionError(
        errno.EACCES, f"Permission denied: the runs' journal ({JOURNAL_DIR}) is the runtime's", path
    )


class ExecJournal:
    """Reads and writes execution records through the workspace filesystem."""

    def __init__(
        self,
        fs: Any,
        owner: str,
        directory: str = JOURNAL_DIR,
        running: Callable[[], Collection[str]] = tuple,
    ) -> None:
        self.fs = fs
        self.owner = owner  # this runtime instance: records of other owners that say running are stale
        self.directory = directory
        self.running = running  # ids of the runs in progress: their records are never pruned
        self._ready = False
        self._writes = 0

    def _path(self, exec_id: str) -> str:
        return f"{self.directory}/{exec_id}.json"

    async def ensure_ready(self) -> None:
        """Create the directory and reconcile records left running by an earlier owner (once)."""
        if self._ready:
            return
        self._ready = True
        await self.fs.mkdir(self.directory, recursive=True)
        for entry in await self.fs.readdir(self.directory):
            if not entry.is_file or not entry.name.endswith(".json"):
                continue
            record = await self._read(f"{self.directory}/{entry.name}")
            if record is None or record.get("status") != "running" or record.get("owner") == self.owner:
                continue
            record.update(status="failed", error=self._cut(record), finished=time.time())
            await self._write(record)

    def _cut(self, record: dict[str, Any]) -> str:
        """The error of a run its owner's death cut (see the module's docstring)."""
        rev = record.get("rev")
        changed: list[str] | None = None
        if isinstance(rev, int) and not isinstance(rev, bool):
            try:
                since = self.fs.changes_since(rev, "/")
            except (OSError, AttributeError):
                since = None
            if since is not None and since.complete:
                outside = (
                    c.path for c in since.changes if c.op != TOUCH and not is_within(c.path, SYSTEM_DIR)
                )
                changed = sorted(set(outside))
        if changed == []:
            return CUT
        if changed is None:
            told = "the workspace's log does not reach back to its start"
        else:
            names = ", ".join(changed[:CUT_EXAMPLES]) + (", ..." if len(changed) > CUT_EXAMPLES else "")
            told = f"{len(changed)} path(s) changed since it started (by it or by others): {names}"
        return f"{CUT}: part of what the run changed may have been pulled before its owner died (pulled lists none of it); {told}"

    async def _read(self, path: str) -> dict[str, Any] | None:
        try:
            raw = await self.fs.read_file(path)
            record = json.loads(raw)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    async def _write(self, record: dict[str, Any]) -> None:
        data = json.dumps(record, ensure_ascii=False, default=repr).encode()
        await self.fs.write_file(self._path(str(record["id"])), data)

    async def started(self, exec_id: str, backend: str, source: str) -> None:
        await self.ensure_ready()
        record: dict[str, Any] = {
            "id": exec_id,
            "backend": backend,
            "status": "running",
            "owner": self.owner,
            "source": source[:4096],
            "started": time.time(),
        }
        rev = getattr(self.fs, "rev", None)  # what a reconciliation compares with (``_cut``)
        if isinstance(rev, int):
            record["rev"] = rev
        await self._write(record)

    async def finished(self, result: ExecResult, source: str) -> None:
        record = {
            **_result_fields(result),
            "owner": self.owner,
            "source": source[:4096],
            "finished": time.time(),
        }
        await self._write(record)
        self._writes += 1
        if self._writes % _PRUNE_EVERY == 1:  # listing the directory every run would cost more than it saves
            await self._prune()

    async def get(self, exec_id: str) -> dict[str, Any] | None:
        await self.ensure_ready()
        return await self._read(self._path(exec_id))

    async def dispose(self, exec_id: str) -> bool:
        await self.ensure_ready()
        try:
            await self.fs.rm(self._path(exec_id))
        except FileNotFoundError:
            return False
        return True

    async def _prune(self) -> None:
        entries = [e for e in await self.fs.readdir(self.directory) if e.is_file]
        if len(entries) <= MAX_RECORDS:
            return
        # A run still going keeps its record, however old (it was pruned after 200 shorter runs, and
        # after a restart its id was unknown instead of "failed: owner restarted").
        going = {f"{exec_id}.json" for exec_id in self.running()}
        entries = [e for e in entries if e.name not in going]
        entries.sort(key=lambda e: (e.mtime, e.name))
        for entry in entries[: len(entries) - MAX_RECORDS]:
            try:
                await self.fs.rm(f"{self.directory}/{entry.name}")
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise


def _result_fields(result: ExecResult) -> dict[str, Any]:
    """The result's fields for a record that is encoded at once: no deep copy (``asdict`` copied
    each of a 1,000-file pull's paths: 0.74 ms, against 2 µs)."""
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    fields["truncated"] = {k: dataclasses.asdict(v) for k, v in result.truncated.items()}
    return fields


def result_from_record(record: dict[str, Any]) -> ExecResult:
    """Rebuild the retained result of a journal record (a reconciled or running one too); a field of
    the wrong type is a ``ValueError`` (a record of any shape was returned as it was: ``"stdout": 5``,
    or a TypeError out of ``get_exec``)."""
    for key, kind in _FIELD_TYPES.items():
        if record.get(key) is not None and not isinstance(record[key], kind):
            raise ValueError(f"its field {key!r} is not {getattr(kind, '__name__', kind)}")
    for key in ("pulled", "skipped"):
        if not all(isinstance(p, str) for p in record.get(key) or ()):
            raise ValueError(f"its field {key!r} holds something else than paths")
    truncated = {k: OutputTruncation(**v) for k, v in (record.get("truncated") or {}).items()}
    return ExecResult(
        status=record.get("status", "failed"),
        exit_code=record.get("exit_code"),
        stdout=record.get("stdout", ""),
        stderr=record.get("stderr", ""),
        value=record.get("value"),
        truncated=truncated,
        pushed=record.get("pushed", 0),
        pulled=list(record.get("pulled", [])),
        skipped=list(record.get("skipped", [])),
        skipped_reasons=dict(record.get("skipped_reasons") or {}),
        id=record.get("id", ""),
        backend=record.get("backend", ""),
        error=record.get("error"),
    )
