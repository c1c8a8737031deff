"""A dedicated owner that is slow, not stopped: the client's probe of a silent owner (see
``test_stopped_owner.py``) must not report it stopped.

The slowness is real: another process (the ``sqlite3`` shell, as an operator or a backup would run
it) holds the workspace file's write lock, so the owner's SQLite calls wait on it (``busy_timeout``)
inline on the owner's event loop, for longer than the probe's thresholds (shortened here).

- A running owner whose loop is held by one such call still answers the probe: Ray runs an actor's
  ``__ray_ready__`` on its task thread, beside the asyncio loop (this held before the fix too; it
  guards the probe's choice of method).
- An owner restarting in place (its process died; Ray runs its constructor again, which opens the
  file) answers no probe until its constructor ends, since Ray queues every call to an actor that is
  being created. Before, a write sent meanwhile failed with ``OutcomeUnknownError`` ("stopped or
  wedged") and a read with ``WorkspaceUnavailableError``, though the write was only queued (it was
  then cancelled unrun), and so did ``get_workspace`` of a new owner opening slowly; now the client
  asks Ray's actor table and keeps waiting for an owner being created or restarted.
- An owner whose every concurrency slot is held by a call that waits: Ray gives ``__ray_ready__`` a
  slot too, so it waited with the new call, which failed "stopped or wedged"; a managed owner now has
  a concurrency group for probes (``PROBE_GROUP``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from owner_models import kill_owner, owner_process, process_pid

import computer
import computer.actors._placement as placement
import computer.client._connection as connection
from computer.actors import OutcomeUnknownError, WorkspaceUnavailableError
from computer.actors._owner import PROBE_GROUP
from computer.actors.naming import workspace_file
from computer.actors.raycompat import actor_id, actor_process
from computer.actors.wire import STREAM_CHUNK
from computer.config import Settings

HELD = 3.0  # seconds the lock is held once the call is sent: longer than the probes below allow


@pytest.fixture
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Shorten the probe's thresholds (once the owner is up: its first start takes longer)."""

    def shorten() -> None:
        monkeypatch.setattr(connection, "PROBE_AFTER", 0.2)
        monkeypatch.setattr(connection, "PROBE_TIMEOUT", 0.8)

    return shorten


@contextlib.asynccontextmanager
async def write_locked(path: Path) -> AsyncIterator[None]:
    """The ``sqlite3`` shell holds ``path``'s write lock (``BEGIN IMMEDIATE``) until the block ends."""
    shell = await asyncio.create_subprocess_exec(
        "sqlite3",
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert shell.stdin is not None and shell.stdout is not None
    try:
        shell.stdin.write(b".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n")
        await shell.stdin.drain()
        assert await asyncio.wait_for(shell.stdout.readline(), 30) == b"locked\n"
        yield
        shell.stdin.write(b"ROLLBACK;\n.quit\n")
        await shell.stdin.drain()
        shell.stdin.close()
        await asyncio.wait_for(shell.wait(), 30)
    finally:
        if shell.returncode is None:
            shell.kill()
            await shell.wait()


async def restarting(handle: Any) -> None:
    """Wait (bounded) until Ray restarts the owner process behind ``handle`` (killed with restart)."""
    process = actor_id(owner_process(handle)).hex()
    for _ in range(600):
        found = await asyncio.to_thread(actor_process, process)
        if found is not None and found[0] == "RESTARTING":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the owner was not restarted")


async def test_a_call_held_by_a_long_storage_call_on_the_owners_loop_is_answered(
    ray_session: Any, tmp_path: Path, name: str, quick_probes: Callable[[], None]
) -> None:
    config = computer.init(data_dir=tmp_path / "data", owners="dedicated")
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            quick_probes()
            async with write_locked(workspace_file(config, name)):
                write = asyncio.ensure_future(ws.fs.write_file("/during", b"during"))
                await asyncio.sleep(HELD)  # the owner's loop waits in SQLite meanwhile
            async with asyncio.timeout(60):
                await write
            assert await ws.fs.read_file("/during") == b"during"
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_calls_to_an_owner_restarting_slowly_wait_for_it_and_apply_once(
    ray_session: Any, tmp_path: Path, name: str, quick_probes: Callable[[], None]
) -> None:
    config: Settings = computer.init(data_dir=tmp_path / "data", owners="dedicated")
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            quick_probes()
            epoch = ws._conn.epoch
            async with write_locked(workspace_file(config, name)):
                await kill_owner(ws._conn.handle, restart=True)
                await restarting(ws._conn.handle)  # its constructor now waits for the file's lock
                write = asyncio.ensure_future(ws.fs.write_file("/during", b"during"))
                read = asyncio.ensure_future(ws.fs.read_file("/kept"))
                await asyncio.sleep(HELD)
            async with asyncio.timeout(60):
                # Before: OutcomeUnknownError and WorkspaceUnavailableError, "stopped or wedged".
                assert await asyncio.gather(write, read, return_exceptions=True) == [None, b"kept"]
            assert await ws.fs.read_file("/during") == b"during"
            assert (await ws._conn.handle.stats.remote())["epoch"] > epoch  # a new activation
        async with computer.get_workspace(name) as again:
            assert await again.fs.read_file("/during") == b"during"
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_opening_a_workspace_whose_new_owner_opens_slowly_waits_for_it(
    ray_session: Any, tmp_path: Path, name: str, quick_probes: Callable[[], None]
) -> None:
    config: Settings = computer.init(data_dir=tmp_path / "data", owners="dedicated")
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            quick_probes()
            await kill_owner(ws._conn.handle)  # for good: the next get_workspace creates an owner
        async with write_locked(workspace_file(config, name)):
            opening = asyncio.ensure_future(computer.get_workspace(name))
            await asyncio.sleep(HELD)  # the new owner's constructor waits for the file's lock
        async with asyncio.timeout(60):
            again = await opening  # before: WorkspaceUnavailableError, "stopped or wedged"
        async with again:
            assert await again.fs.read_file("/kept") == b"kept"
            await again.fs.write_file("/after", b"after")
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_a_call_queued_behind_an_owners_busy_slots_waits_for_a_slot(
    ray_session: Any,
    tmp_path: Path,
    name: str,
    quick_probes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every one of a dedicated owner's ``max_concurrency`` slots held by a call that waits (here
    streams whose readers stopped reading: backpressure; in use, lock requests or runs): a new call
    waits in Ray for a slot, and before, so did the probe (``__ray_ready__`` takes a slot too)."""
    slots = 3
    monkeypatch.setattr(placement, "OWNER_MAX_CONCURRENCY", slots)
    computer.init(data_dir=tmp_path / "data", owners="dedicated")
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/big", b"x" * (16 * STREAM_CHUNK))
            quick_probes()
            readers = [ws.fs.stream("/big") for _ in range(slots)]
            for reader in readers:
                assert len(await anext(reader)) == STREAM_CHUNK  # then it stops reading
            write = asyncio.ensure_future(ws.fs.write_file("/during", b"during"))
            await asyncio.sleep(HELD)  # waiting for a slot
            for reader in readers:
                await reader.aclose()  # the owner's side is cancelled: its slot is free
            async with asyncio.timeout(60):
                await write  # before: OutcomeUnknownError, "stopped or wedged"
            assert await ws.fs.read_file("/during") == b"during"
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_a_stopped_dedicated_owner_is_still_reported_through_its_probe_group(
    ray_session: Any, tmp_path: Path, name: str, quick_probes: Callable[[], None]
) -> None:
    """The probe on the owner's own concurrency group is answered by its process, so a process
    stopped with SIGSTOP answers it no more than the default group (``test_stopped_owner.py`` runs
    in the default owner model, hosted, whose hosts have no such group)."""
    computer.init(data_dir=tmp_path / "data", owners="dedicated")
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            assert ws._conn.probe_group == PROBE_GROUP
            quick_probes()
            pid = await process_pid(owner_process(ws._conn.handle))
            os.kill(pid, signal.SIGSTOP)
            try:
                async with asyncio.timeout(30):
                    with pytest.raises(OutcomeUnknownError, match="stopped or wedged"):
                        await ws.fs.write_file("/during", b"x")
            finally:
                os.kill(pid, signal.SIGCONT)
            assert await ws.fs.read_file("/kept") == b"kept"
    finally:
        computer.init(data_dir=tmp_path / "data")


def _opener_of(path: Path) -> int | None:
    """The pid of an owner process inside its constructor (Ray's title for it) holding ``path`` open."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"OwnerActor.__init__" not in (entry / "cmdline").read_bytes():
                continue
            if any(os.readlink(fd) == str(path) for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:
            continue  # gone, or not ours to look at
    return None


async def test_an_owner_stopped_inside_its_constructor_fails_the_call_after_a_bound(
    ray_session: Any,
    tmp_path: Path,
    name: str,
    quick_probes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray's actor table shows an owner whose constructor runs as being created, and the client waits
    for it (an open waiting for the file's lock is slow, not stopped). A process stopped (SIGSTOP)
    inside its constructor was waited for forever; now for ``STARTING_TIMEOUT`` at most."""
    config: Settings = computer.init(data_dir=tmp_path / "data", owners="dedicated")
    path = workspace_file(config, name)
    stopped: int | None = None
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            await kill_owner(ws._conn.handle)  # for good: the next get_workspace creates an owner
        quick_probes()
        monkeypatch.setattr(connection, "STARTING_TIMEOUT", 2.0, raising=False)
        async with write_locked(path):
            opening = asyncio.ensure_future(computer.get_workspace(name))
            for _ in range(600):  # the new owner's constructor opens the file and waits for its lock
                stopped = _opener_of(path)
                if stopped is not None:
                    break
                await asyncio.sleep(0.05)
            assert stopped is not None, "no owner opened the file"
            os.kill(stopped, signal.SIGSTOP)
        async with asyncio.timeout(60):  # before: waited for as long as the process stayed stopped
            with pytest.raises(WorkspaceUnavailableError, match="did not finish starting"):
                await opening
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        async with asyncio.timeout(60), computer.get_workspace(name) as again:  # continued: it serves
            assert await again.fs.read_file("/kept") == b"kept"
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        computer.init(data_dir=tmp_path / "data")
