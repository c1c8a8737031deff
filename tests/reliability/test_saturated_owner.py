"""Every concurrency slot of an owner's process held by lock requests that wait (the ordinary way to
fill them: ``max_concurrency`` agents queueing on one lock).

- The holder's release (and renewal) needed a slot of the same group, so it queued behind the very
  waiters it would have woken: the lock stayed held until its lease ran out (``lock_lease``), and
  so did every waiter. Owners now serve lock releases, renewals and cancels on a concurrency group of
  their own (``CONTROL_GROUP``, ``describe``'s ``control_group``), dedicated and hosted alike.
- An owner host had no probe group (a dedicated owner has ``PROBE_GROUP``): its ``__ray_ready__``
  waited for a slot of its 100,000 with the call it was meant to vouch for, and a saturated host was
  reported "stopped or wedged". Hosts now have the probe group too.

- Lock requests (and the other calls that wait for others) held slots of the default group, so an
  ordinary call (a read, a write, ``stats``, a pool worker's sync) queued behind them until a lock was
  released or its lease ran out; as many ``result()`` waits as slots deadlocked the owner's own runs.
  They now wait on a group of their own (``WAIT_GROUP``, ``describe``'s ``wait_group``). The first two
  tests fill that group (``small_wait_group``): a release and a probe must still get through.
- File streams whose readers stopped held slots of the default group the same way (the owner waits
  for its reader to take the pieces it produced); they now take slots of a group of their own
  (``STREAM_GROUP``, ``describe``'s ``stream_group``).

The slot counts are lowered here (the real ones are 1,000 and 100,000: the behaviour is the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import computer
import computer.actors._host_placement as host_placement
import computer.actors._placement as placement
import computer.client._connection as connection
from tests.runtime._live_support import eventually

SLOTS = 3
LEASE = 600.0  # seconds: a release that waits for the lease to end is plainly stuck


@pytest.fixture
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    def shorten() -> None:
        monkeypatch.setattr(connection, "PROBE_AFTER", 0.2)
        monkeypatch.setattr(connection, "PROBE_TIMEOUT", 0.8)

    return shorten


@pytest.fixture
def small_wait_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Owners (and hosts) created from here on have ``SLOTS`` slots in their wait group too (the
    groups are fixed when the actor class is made: a class of its own, dropped after the test)."""
    monkeypatch.setattr(placement, "WAIT_SLOTS", SLOTS)
    monkeypatch.setattr(host_placement, "HOST_WAIT_SLOTS", SLOTS)
    monkeypatch.setattr(placement, "_remote_class", None)
    monkeypatch.setattr(host_placement, "_remote_class", None)


@contextlib.contextmanager
def _small_owners(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **settings: Any) -> Iterator[None]:
    """Owners and owner hosts created from here on have ``SLOTS`` slots in their default group, the
    cluster initialised with ``settings`` (its defaults again after)."""
    monkeypatch.setattr(placement, "OWNER_MAX_CONCURRENCY", SLOTS)
    monkeypatch.setattr(host_placement, "HOST_MAX_CONCURRENCY", SLOTS)
    computer.init(data_dir=tmp_path / "data", **settings)
    try:
        yield
    finally:
        computer.init(data_dir=tmp_path / "data")


async def _queue_on(ws: Any, path: str, value: bytes) -> bytes:
    """Wait for the lock on ``path``, then write ``value`` under it and read back what was there."""
    async with ws.locks.hold([path]):
        before = await ws.fs.read_file(path)
        await ws.fs.write_file(path, value)
        return bytes(before)


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_a_lock_holder_releases_while_waiters_hold_every_slot(
    ray_session: Any,
    tmp_path: Path,
    name: str,
    owners: str,
    monkeypatch: pytest.MonkeyPatch,
    small_wait_group: None,
) -> None:
    with _small_owners(monkeypatch, tmp_path, owners=owners, lock_lease=LEASE):
        async with computer.get_workspace(name) as holder:
            await holder.fs.write_file("/f", b"0")
            waiters = [await computer.get_workspace(name) for _ in range(SLOTS)]
            hold = holder.locks.hold(["/f"])
            await hold.__aenter__()
            await holder.fs.write_file("/f", b"held")  # under the lock (a call needs a slot too)
            queued = [
                asyncio.ensure_future(_queue_on(w, "/f", b"%d" % (i + 1))) for i, w in enumerate(waiters)
            ]
            done, _ = await asyncio.wait(queued, timeout=1.0)
            assert not done  # all waiting for the holder
            async with asyncio.timeout(60):  # before: the release waited for a slot, i.e. the lease (600 s)
                await hold.__aexit__(None, None, None)
                seen = await asyncio.gather(*queued)
            assert b"held" in seen  # one of them came right after it, each after another
            final = await holder.fs.read_file("/f")
            assert final in {b"1", b"2", b"3"} and final not in seen
            for w in waiters:
                await w.close()


async def test_a_call_queued_behind_a_saturated_owner_host_is_not_reported_stopped(
    ray_session: Any,
    tmp_path: Path,
    name: str,
    quick_probes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
    small_wait_group: None,
) -> None:
    with _small_owners(monkeypatch, tmp_path, owners="hosted", lock_lease=LEASE):
        async with computer.get_workspace(name) as holder, computer.get_workspace(name) as reader:
            await holder.fs.write_file("/f", b"0")
            await holder.fs.write_file("/g", b"g")
            waiters = [await computer.get_workspace(name) for _ in range(SLOTS)]
            hold = holder.locks.hold(["/f"])
            await hold.__aenter__()
            queued = [asyncio.ensure_future(_queue_on(w, "/f", b"w")) for w in waiters]
            quick_probes()
            read = asyncio.ensure_future(reader.fs.read_file("/g"))  # its group is free: answered
            # A lock nobody holds, asked while the waiters hold every slot of the wait group: it waits
            # in Ray for a slot (as a read did when they held the default group's).
            free = asyncio.ensure_future(_queue_on(reader, "/g", b"free"))
            done, _ = await asyncio.wait({free}, timeout=3.0)  # several probe rounds
            assert not done, free.exception()  # waiting for a slot (before: "stopped or wedged")
            async with asyncio.timeout(60):
                assert await read == b"g"
                await hold.__aexit__(None, None, None)
                await asyncio.gather(*queued)
                assert await free == b"g"
            for w in waiters:
                await w.close()


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_ordinary_calls_go_on_while_lock_waiters_hold_every_slot(
    ray_session: Any, tmp_path: Path, name: str, owners: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ordinary calls (a read, a write, ``stats``) waited behind lock requests holding every slot of
    the owner's default group, until a lock was released or its lease ran out; lock requests now wait
    on a concurrency group of their own (``WAIT_GROUP``), in order, a cancelled one withdrawn."""
    with _small_owners(monkeypatch, tmp_path, owners=owners, lock_lease=LEASE):
        async with computer.get_workspace(name) as holder, computer.get_workspace(name) as other:
            await holder.fs.write_file("/f", b"0")
            waiters = [await computer.get_workspace(name) for _ in range(SLOTS + 2)]
            hold = holder.locks.hold(["/f"])
            await hold.__aenter__()
            queued = []
            for i, w in enumerate(waiters):  # one after another: the lock table's order is known
                queued.append(asyncio.ensure_future(_queue_on(w, "/f", b"%d" % i)))
                await _until(lambda n=i + 1: _stats(other)["locks_waiting"] == n)
            queued[1].cancel()  # its client gave up: the owner withdraws the request
            await _until(lambda: _stats(other)["locks_waiting"] == SLOTS + 1)
            async with asyncio.timeout(30):  # before: until the holder's release (never, here)
                await other.fs.write_file("/g", b"g")
                assert await other.fs.read_file("/g") == b"g"
                await holder.fs.write_file("/f", b"held")  # the holder itself, under its lock
                assert await other.fs.read_file("/f") == b"held"
                async with other.locks.hold(["/h"]):  # a lock nobody holds: granted at once
                    await other.fs.write_file("/h", b"h")
            assert not any(q.done() for q in queued if not q.cancelled())
            async with asyncio.timeout(60):
                await hold.__aexit__(None, None, None)
                seen = await asyncio.gather(*(q for q in queued if not q.cancelled()))
            # First in, first served; the withdrawn one (1) never held it.
            assert seen == [b"held", b"0", *(b"%d" % i for i in range(2, SLOTS + 1))]
            assert await other.fs.read_file("/f") == b"%d" % (SLOTS + 1)
            assert _stats(other)["locks_waiting"] == 0 and _stats(other)["locks_held"] == 0
            for w in waiters:
                await w.close()


def _stats(ws: Any) -> dict[str, Any]:
    stats: dict[str, Any] = ray.get(ws.handle.stats.remote(), timeout=30)
    return stats


async def _until(check: Callable[[], bool]) -> None:
    await eventually(lambda: asyncio.to_thread(check), within=30.0)


async def _ordinary_calls(ws: Any) -> None:
    """A write, a read and ``stats``: each must be answered while waiting calls hold their slots."""
    async with asyncio.timeout(30):  # before: until those calls ended
        await ws.fs.write_file("/g", b"g")
        assert await ws.fs.read_file("/g") == b"g"
        assert await ws.run_tool("read", {"path": "/g"})  # a read-only tool is an ordinary call
        assert "rpcs" in await asyncio.to_thread(_stats, ws)


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
@pytest.mark.parametrize("waiting", ["tool", "result", "snapshots"])
async def test_tools_and_runs_that_wait_leave_ordinary_calls_their_slots(
    ray_session: Any, tmp_path: Path, name: str, owners: str, waiting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other owner calls that wait for long: a tool waiting for a path lock (or a command), a run's
    result, its snapshots. Each held a slot of the default group while it waited."""
    with _small_owners(monkeypatch, tmp_path, owners=owners, lock_lease=LEASE):
        async with computer.get_workspace(name) as holder, computer.get_workspace(name) as other:
            await holder.fs.write_file("/f", b"0")
            runs: list[Any] = []
            if waiting == "tool":
                hold = holder.locks.hold(["/f"])
                await hold.__aenter__()
                calls = [
                    holder.run_tool("write", {"path": "/f", "content": f"tool {i}"}) for i in range(SLOTS + 1)
                ]
            else:
                runs = [await holder.runtime.exec("sleep 120") for _ in range(SLOTS + 1)]
                if waiting == "result":
                    calls = [run.result() for run in runs]
                else:
                    calls = [_snapshots(run) for run in runs]
            queued = [asyncio.ensure_future(c) for c in calls]
            done, _ = await asyncio.wait(queued, timeout=1.0)
            assert not done  # every one waits
            await _ordinary_calls(other)
            assert not any(q.done() for q in queued)
            async with asyncio.timeout(60):
                if waiting == "tool":
                    await hold.__aexit__(None, None, None)
                for run in runs:
                    await other.runtime.kill_exec(run.id)
                ended = await asyncio.gather(*queued)
            if waiting == "tool":
                assert all("error" not in r for r in ended), ended
                assert (await other.fs.read_file("/f")).startswith(b"tool ")
            else:
                assert all(r.status == "cancelled" for r in ended), ended


async def _snapshots(run: Any) -> Any:
    last = None
    async for snapshot in run:
        last = snapshot
    return last


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_runs_awaited_by_as_many_results_as_slots_end(
    ray_session: Any, tmp_path: Path, name: str, owners: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No client but the one awaiting its runs' results: the runs' own calls back to the owner (a pool
    worker's sync) queued behind those waits, so no run ever ended: a deadlock, no lease to end it."""
    with _small_owners(monkeypatch, tmp_path, owners=owners):
        async with computer.get_workspace(name) as ws:
            runs = [await ws.runtime.exec(f"sleep 2; echo {i} > /workspace/r{i}") for i in range(SLOTS)]
            async with asyncio.timeout(60):  # before: never
                results = await asyncio.gather(*(run.result() for run in runs))
            assert [r.status for r in results] == ["completed"] * SLOTS, results
            for i in range(SLOTS):
                assert await ws.fs.read_file(f"/workspace/r{i}") == b"%d\n" % i


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_stopped_file_streams_leave_ordinary_calls_their_slots(
    ray_session: Any, tmp_path: Path, name: str, owners: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file stream whose reader stopped (or is slow) held a slot of the owner's default group while
    the owner waited for the reader to take its pieces: as many of them as slots and every read,
    write, ``stats`` and pool worker sync of that owner queued until a reader went on or gave up.
    Streams now take slots of a group of their own (``STREAM_GROUP``)."""
    content = os.urandom(8 * 1024 * 1024)  # 16 pieces: the owner runs a few ahead of a reader, then waits
    with _small_owners(monkeypatch, tmp_path, owners=owners):
        async with computer.get_workspace(name) as ws, computer.get_workspace(name) as other:
            await ws.fs.write_file("/big", content)
            readers = [ws.fs.stream("/big") for _ in range(SLOTS)]  # every slot
            async with asyncio.timeout(60):
                firsts = [await anext(r) for r in readers]  # each started, then its reader stops
            assert all(content.startswith(f) for f in firsts)
            await _ordinary_calls(other)
            async with asyncio.timeout(60):  # the readers go on: each gets the whole file
                for first, reader in zip(firsts, readers, strict=True):
                    assert first + b"".join([p async for p in reader]) == content
            assert _stats(other)["streams"] == 0
