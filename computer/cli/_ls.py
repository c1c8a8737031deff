"""``computer ls``: the workspaces of the data directory, each awake or asleep, with size, last
activity and live runs, from facts that hold whether or not a cluster runs (Ray is never imported).

- **awake on <where>**: an owner holds the workspace's lease (it renews it every few seconds); where is
  a Ray node (its id and machine) or a command's own process; for a hosted workspace
  (``owners="hosted"``) also which owner host of that node and its process (``host 3 (pid 812)``). An owner that died without giving the
  lease up counts as awake until its lease runs out (``lock_lease``, 30 s by default), except an
  owner process of this machine that is gone (a command's process, an owner actor or owner host, by
  the pid its lease names): asleep at once.
- **asleep**: nobody holds the lease: the workspace is only its file; the next call wakes it.
- **size**: the SQLite file and every file beside it (its write-ahead log, shared memory, space
  reserve...) on this machine, as ``computer rm`` counts what it deletes (none when the file is elsewhere).
- **live runs**: executions an awake workspace's journal records as running (asleep: 0).

A workspace file with no directory record (the directory was lost) is listed too, asleep. A record
that a deletion's tombstone covers (Redis restored from a dump taken before the deletion: the record
names a file the deletion removed) is left out, no file of it being here: opening the name makes a
new, empty workspace (``computer/actors/README.md``, "Deleted or lost"), so the listing agrees with
it, and ``computer rm`` says there is no such workspace. Read where the tombstones' file is on this
machine (the head node's data directory, or a shared one); elsewhere such a record is listed.

Read-only: a data directory that does not exist is listed as empty and is not created (nor its
directory file); ``computer ls`` reports a missing data directory that was named (``--data-dir``,
``COMPUTER_DATA_DIR``), since that is most likely a typo (:func:`check_data_dir`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

from rich.console import Console
from rich.table import Table

from ._context import CliError, GlobalOptions, data_dir_error, local_settings
from .display import ago_text, plain_text, size_text

if TYPE_CHECKING:
    from pathlib import Path

    from ..actors.directory import WorkspaceRecord
    from ..config import Settings

__all__ = ["WorkspaceRow", "check_data_dir", "list_workspaces", "print_workspaces"]


@dataclass(frozen=True)
class WorkspaceRow:
    name: str
    state: str  # "awake" or "asleep"
    where: str | None  # awake: the owner's node or process, in words
    size: int | None  # bytes of the SQLite file and its WAL on this machine; None when not here
    last_active: float | None  # wall-clock seconds; None when no owner ever recorded it
    live_runs: int
    node: str | None  # the directory's node of the last owner (a Ray node id, or process:<pid>@<hostname>)
    # awake in an owner host (``owners="hosted"``): which one of its node, and its process
    owner_host: str | None = None


def list_workspaces(options: GlobalOptions, *, prefix: str = "") -> list[WorkspaceRow]:
    """Every workspace of the data directory (directory records and files), sorted by name."""
    from ..actors import awake, awake_where
    from ..actors.directory import open_directory
    from ..actors.naming import workspace_file

    config = local_settings(options)
    if not config.redis_url and not (config.data_dir / "directory.sqlite").exists():
        if config.data_dir.exists() and not config.data_dir.is_dir():
            raise CliError(f"the data directory {config.data_dir} is not a directory", code=2)
        directory: _Listing = _NoDirectory()  # read-only: nothing to create for a listing
    else:
        import sqlite3

        try:
            directory = open_directory(config)
        except (OSError, sqlite3.Error) as exc:
            raise data_dir_error(config.data_dir, exc) from None
    tombstones = _tombstones(config)
    try:
        names = set(directory.names())
        found = _file_sizes(config.workspaces_dir)
        names.update(found)
        rows = []
        now = time.time()
        for name in sorted((n for n in names if n.startswith(prefix)), key=lambda n: n.encode()):
            record = directory.get(name)
            path = workspace_file(config, name)
            size = found.get(name)
            if size is None and record is not None and tombstones is not None and tombstones(record):
                continue  # deleted after this record was written: the name is new again
            is_awake = awake(record, now)
            rows.append(
                WorkspaceRow(
                    name=name,
                    state="awake" if is_awake else "asleep",
                    where=awake_where(record) if is_awake and record is not None else None,
                    size=size,
                    last_active=_last_active(record, path),
                    live_runs=_live_runs(path) if is_awake and size is not None else 0,
                    node=None if record is None else record.node,
                    owner_host=_owner_host(record) if is_awake else None,
                )
            )
        return rows
    finally:
        directory.close()
        if tombstones is not None:
            tombstones.close()


class _Tombstones:
    """The deletions' tombstones of a directory in Redis (``actors/directory/_registry.py``), read
    from their file when it is on this machine: ``self(record)`` says whether a deletion came after
    ``record`` was written."""

    def __init__(self, path: Path) -> None:
        from ..actors.directory import SqliteDirectory

        self._registry = SqliteDirectory(path)

    def __call__(self, record: WorkspaceRecord) -> bool:
        from ..actors.directory import DELETING, covered

        return (
            record.node != DELETING and covered(self._registry.deletion_of(record.name), record) is not None
        )

    def close(self) -> None:
        self._registry.close()


def _tombstones(config: Settings) -> _Tombstones | None:
    """The tombstones when the directory keeps some and their file is here (never created by a listing)."""
    from ..actors.directory import REGISTRY_FILE, tombstones_kept

    path = config.data_dir / REGISTRY_FILE
    if not tombstones_kept(config) or not path.is_file():
        return None
    return _Tombstones(path)


# A workspace's file and its companions, as ``actors._delete.workspace_files`` finds them for ``rm``.
# DOTALL: a name may hold a newline (only "/" and NUL are refused); without it such a workspace's file
# was not found and ``ls`` (and the dashboard) showed its size as "elsewhere".
_WORKSPACE_FILE = re.compile(r"(.+)\.sqlite(-[a-z]+)?", re.DOTALL)


def _file_sizes(workspaces_dir: Path) -> dict[str, int]:
    """Bytes per workspace name of the files in ``workspaces_dir`` (one scan): ``NAME.sqlite`` and
    the ``NAME.sqlite-<letters>`` beside it. A name whose main file is gone is left out."""
    sizes: dict[str, int] = {}
    companions: dict[str, int] = {}
    try:
        entries = list(os.scandir(workspaces_dir))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    for entry in entries:
        match = _WORKSPACE_FILE.fullmatch(entry.name)
        if match is None:
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:
            continue  # removed meanwhile
        name, suffix = match.groups()
        if suffix:
            companions[name] = companions.get(name, 0) + size
        else:
            sizes[name] = sizes.get(name, 0) + size
    return {name: size + companions.get(name, 0) for name, size in sizes.items()}


class _Listing(Protocol):
    def names(self) -> list[str]: ...
    def get(self, name: str) -> WorkspaceRecord | None: ...
    def close(self) -> None: ...


class _NoDirectory:
    """The directory of a data directory that has none yet: no records."""

    def names(self) -> list[str]:
        return []

    def get(self, name: str) -> WorkspaceRecord | None:
        return None

    def close(self) -> None:
        pass


def check_data_dir(options: GlobalOptions) -> None:
    """``CliError`` when the data directory named by ``--data-dir`` or ``COMPUTER_DATA_DIR`` does
    not exist (the default one may not exist yet: nothing was made). Decision: ``ls`` says so rather
    than listing a typo'd path as an empty store (or creating it, as it did)."""
    from ..config import Settings

    config = local_settings(options)
    default = Settings.model_fields["data_dir"].get_default(call_default_factory=True)
    if config.data_dir != default and not config.data_dir.exists():
        raise CliError(f"no data directory at {config.data_dir} (nothing was ever stored there)")


def _owner_host(record: WorkspaceRecord | None) -> str | None:
    """``host 3 (pid 812)`` when an owner host holds the lease: its owner id is
    ``computer:host:<data dir>:<node>:<i>#<pid>~<place>/<uuid>`` (a dedicated owner's is
    ``<actor id>#<pid>~<place>/<uuid>``; ids older than places have no ``~<place>``)."""
    from ..actors.naming import HOST_PREFIX

    owner = (record.owner if record is not None else None) or ""
    if not owner.startswith(HOST_PREFIX) or "#" not in owner:
        return None
    host, _, rest = owner.partition("#")
    return f"host {host.rsplit(':', 1)[-1]} (pid {rest.partition('/')[0].partition('~')[0]})"


def _last_active(record: WorkspaceRecord | None, path: Path) -> float | None:
    if record is not None:
        return record.last_active
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _live_runs(path: Path) -> int:
    """Runs the workspace's exec journal records as running (read beside its owner, never written)."""
    from ..runtime import JOURNAL_DIR
    from ..storage import FileSystem

    async def count() -> int:
        fs = FileSystem.open(str(path), readonly=True, garbage_timer=False)
        try:
            matches = await fs.grep('"status": "running"', JOURNAL_DIR, include="*.json")
        except FileNotFoundError:
            return 0  # no run yet
        finally:
            fs.close()
        return len(matches)

    try:
        return asyncio.run(count())
    except OSError:
        return 0  # unreadable right now (being deleted, say): nothing to report


def print_workspaces(rows: list[WorkspaceRow], *, as_json: bool, console: Console, prefix: str = "") -> None:
    if as_json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return
    if not rows and prefix:
        console.print(f"no workspace starts with {prefix!r}", markup=False, highlight=False)
        return
    if not rows:
        console.print("no workspaces yet (`computer tool NAME write ...` or `computer demo` creates some)")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("name", "state", "size", "last activity", "live runs"):
        table.add_column(column, justify="right" if column in ("size", "live runs") else "left")
    now = time.time()
    for row in rows:
        size = "elsewhere" if row.size is None else size_text(row.size)
        state = f"awake {row.where}" if row.where else row.state
        if row.owner_host:
            state += f", {row.owner_host}"
        ago = "-" if row.last_active is None else ago_text(now - row.last_active)
        table.add_row(plain_text(row.name), state, size, ago, str(row.live_runs))
    console.print(table)
