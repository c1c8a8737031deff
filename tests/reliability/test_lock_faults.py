"""Workspace locks under cluster faults: the shared session's GCS stopped (SIGSTOP, always continued
in a ``finally``) while a lock is handed over, a holder's client closed, or the owner killed under a
held lock; and 50 waiters from several worker processes with cancellations among them.

Each waiter gets the lock or a clear error within a bound, a lock is never held twice at once (a write
under a fencing token that is no longer live is refused with ``LockLostError``, ENOLCK), grants follow
the order the requests reached the owner (``computer/storage/locks.py``: first come, first served),
and no acknowledged write is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from owner_models import owner_process, process_pid
from ray_heads import gcs_children

import computer
from computer.actors import HostedHandle
from computer.storage.errors import LockLostError

BOUND = 60.0  # seconds any single step may take (a loaded machine); the outcome is checked, not the time


def _gcs_pid() -> int:
    """The ``gcs_server`` of the shared session (``ray.init`` in this process starts it as a child)."""
    found = gcs_children(os.getpid())
    assert len(found) == 1, found
    return found[0]


@contextlib.contextmanager
def _gcs_stopped() -> Iterator[None]:
    """The session's GCS stopped for the block, continued whatever happens."""
    pid = _gcs_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _counts(ws: Any) -> tuple[int, int]:
    stats = await asyncio.wait_for(ws.handle.stats.remote(), BOUND)
    return stats["locks_held"], stats["locks_waiting"]


async def _until_waiting(ws: Any, count: int) -> None:
    """Until the owner has ``count`` lock requests queued (bounded)."""
    for _ in range(int(BOUND / 0.02)):
        if (await _counts(ws))[1] >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the owner never had {count} lock requests waiting")


async def _until_at_most_waiting(ws: Any, count: int) -> None:
    """Until the owner has ``count`` lock requests queued or fewer (bounded)."""
    for _ in range(int(BOUND / 0.02)):
        if (await _counts(ws))[1] <= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the owner kept more than {count} lock requests waiting")


async def _write_under(ws: Any, path: str, data: bytes) -> None:
    async with ws.locks.hold([path]):
        await ws.fs.write_file(path, data)


@pytest.fixture
def leased(ray_session: Any, tmp_path: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """``computer.init`` with the tests' settings (no pools; ``lock_lease`` when given), the defaults
    back after the test: the settings, for the worker processes to init alike."""

    def init(**extra: Any) -> dict[str, Any]:
        settings = {"data_dir": f"{tmp_path}/data", "shell_pool_size": 0, "python_pool_size": 0, **extra}
        computer.init(**settings)
        return settings

    yield init
    computer.init(data_dir=f"{tmp_path}/data")


@pytest.fixture
def config(leased: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return leased()


async def test_a_lock_handed_over_while_the_gcs_is_stopped_reaches_its_waiters(
    config: dict[str, Any], name: str
) -> None:
    """With the GCS stopped: A releases while B waits (B gets the lock); A', holding another lock,
    has its client closed while C waits (C gets it, and A's write under the closed lease is refused,
    nothing written). Actor calls do not go through the GCS, so all of it completes during the pause."""
    async with (
        computer.get_workspace(name) as a,
        computer.get_workspace(name) as b,
        computer.get_workspace(name) as c,
    ):
        closing = await computer.get_workspace(name)
        await a.fs.write_file("/f", b"0")
        await a.fs.write_file("/g", b"0")
        with _gcs_stopped():
            async with asyncio.timeout(BOUND):
                hold = a.locks.hold(["/f"])
                await hold.__aenter__()
                waiting = asyncio.ensure_future(_write_under(b, "/f", b"b"))
                await _until_waiting(a, 1)
                await a.fs.write_file("/f", b"a")
                await hold.__aexit__(None, None, None)
                await waiting  # B got the lock and wrote
                assert await a.fs.read_file("/f") == b"b"

                held = closing.locks.hold(["/g"])
                await held.__aenter__()  # this task now presents the lease's fencing token
                third = asyncio.ensure_future(_write_under(c, "/g", b"c"))
                await _until_waiting(a, 1)
                await closing.close()  # releases the lease: C is granted
                await third
                with pytest.raises(LockLostError) as lost:
                    await closing.fs.write_file("/g", b"stale")
                assert lost.value.errno == errno.ENOLCK
                await held.__aexit__(None, None, None)
                assert await a.fs.read_file("/g") == b"c"
                assert await _counts(a) == (0, 0)


async def test_an_owner_killed_under_a_held_lock_while_the_gcs_is_stopped_fences_the_holder(
    config: dict[str, Any], name: str
) -> None:
    """A holds a lock and B waits; the owner's process is SIGKILLed while the GCS is stopped, so Ray
    cannot restart it until the GCS continues. B gets the lock or a clear error (an OSError: ENOLCK,
    EAGAIN, ``ClusterSilentError``) within the bound; once the GCS continues B gets the lock from the
    new owner, A's write under its lost lease is refused, and every acknowledged write is kept."""
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        for i in range(10):
            await a.fs.write_file(f"/kept-{i}", b"%d" % i)
        await a.fs.write_file("/f", b"a0")
        pid = await process_pid(owner_process(a.handle))
        hold = a.locks.hold(["/f"])
        async with asyncio.timeout(BOUND):
            await hold.__aenter__()  # in this task: its writes present the lease's fencing token
        waiting = asyncio.ensure_future(_write_under(b, "/f", b"b"))
        await _until_waiting(a, 1)
        outcome: BaseException | None = None
        with _gcs_stopped():
            os.kill(pid, signal.SIGKILL)
            done, _ = await asyncio.wait({waiting}, timeout=5.0)
            if done:
                outcome = waiting.exception()
        if not done:
            try:
                await asyncio.wait_for(waiting, BOUND * 2)
            except Exception as exc:
                outcome = exc
        if outcome is not None:
            assert isinstance(outcome, (OSError, TimeoutError)), repr(outcome)
            async with asyncio.timeout(BOUND * 2):
                await _write_under(b, "/f", b"b")
        with pytest.raises(LockLostError):
            await asyncio.wait_for(a.fs.write_file("/f", b"stale"), BOUND * 2)
        await hold.__aexit__(None, None, None)
        assert await b.fs.read_file("/f") == b"b"
        for i in range(10):
            assert await b.fs.read_file(f"/kept-{i}") == b"%d" % i


@ray.remote(num_cpus=0, max_restarts=0)
class _Waiters:
    """A worker process holding several lock waiters over one client; each, once granted, appends its
    index to ``/order`` (a read-modify-write under the lock) and releases."""

    def __init__(self, name: str, config: dict[str, Any]) -> None:
        self.name = name
        self.config = config
        self.ws: Any = None
        self.waits: dict[int, asyncio.Task[None]] = {}
        self.entered: set[int] = set()

    async def open(self) -> None:
        computer.init(**self.config)
        self.ws = await computer.get_workspace(self.name)

    async def start(self, index: int) -> None:
        async def wait() -> None:
            async with self.ws.locks.hold(["/order"]):
                self.entered.add(index)
                order = await self.ws.fs.read_text("/order")
                await self.ws.fs.write_file("/order", f"{order}{index},")

        self.waits[index] = asyncio.ensure_future(wait())

    async def cancel(self, index: int) -> None:
        self.waits[index].cancel()

    async def outcome(self, index: int) -> str:
        try:
            await asyncio.wait_for(asyncio.shield(self.waits[index]), BOUND)
        except asyncio.CancelledError:
            return "cancelled inside" if index in self.entered else "cancelled"
        return "granted"

    async def close(self) -> None:
        await self.ws.close()

    def pid(self) -> int:
        return os.getpid()


async def test_fifty_waiters_from_several_workers_are_served_in_arrival_order_cancelled_ones_skipped(
    config: dict[str, Any], name: str
) -> None:
    """50 waiters from 5 worker processes queue for one lock in a known order (each queued before the
    next is sent); 10 of them are cancelled while waiting. Released, the lock goes to every live waiter
    once, in arrival order; no cancelled waiter is granted (its index never appears), nothing stays
    held or queued."""
    workers = [_Waiters.remote(name, config) for _ in range(5)]  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as holder:
            await holder.fs.write_file("/order", "")
            await asyncio.wait_for(asyncio.gather(*[w.open.remote() for w in workers]), BOUND)
            async with asyncio.timeout(BOUND * 3):
                hold = holder.locks.hold(["/order"])
                await hold.__aenter__()
                for i in range(50):
                    await workers[i % 5].start.remote(i)
                    await _until_waiting(holder, i + 1)
                cancelled = set(range(3, 50, 5))
                for i in sorted(cancelled):
                    await workers[i % 5].cancel.remote(i)
                await _until_at_most_waiting(holder, 50 - len(cancelled))  # the withdrawals arrived
                await hold.__aexit__(None, None, None)
                outcomes = await asyncio.gather(*[workers[i % 5].outcome.remote(i) for i in range(50)])
            assert [i for i, o in enumerate(outcomes) if o == "cancelled"] == sorted(cancelled)
            order = [int(i) for i in (await holder.fs.read_text("/order")).split(",") if i]
            assert order == [i for i in range(50) if i not in cancelled]
            assert await _counts(holder) == (0, 0)
            await asyncio.wait_for(asyncio.gather(*[w.close.remote() for w in workers]), BOUND)
    finally:
        for w in workers:
            ray.kill(w)


async def test_waiters_cancelled_while_the_lock_is_handed_down_the_queue_leave_no_orphaned_grant(
    leased: Callable[..., dict[str, Any]], name: str
) -> None:
    """The same queue of 50, but the cancellations race the grants: the holder releases and 10
    waiters spread over the queue are cancelled at once, while the lock passes from one waiter to the
    next. A waiter cancelled before its grant never writes and holds nothing; every other waiter is
    served once, in arrival order; at the end nothing is held or queued. The lease is long (120 s), so
    a grant made to a cancelled waiter and never released shows as a lock still held."""
    config = leased(lock_lease=120.0)
    workers = [_Waiters.remote(name, config) for _ in range(5)]  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as holder:
            await holder.fs.write_file("/order", "")
            await asyncio.wait_for(asyncio.gather(*[w.open.remote() for w in workers]), BOUND)
            async with asyncio.timeout(BOUND * 3):
                hold = holder.locks.hold(["/order"])
                await hold.__aenter__()
                for i in range(50):
                    await workers[i % 5].start.remote(i)
                    await _until_waiting(holder, i + 1)
                cancelled = {
                    0,
                    1,
                    2,
                    *range(6, 50, 6),
                }  # the head of the queue too: its grant races the cancel
                await hold.__aexit__(None, None, None)
                await asyncio.gather(*[workers[i % 5].cancel.remote(i) for i in sorted(cancelled)])
                outcomes = await asyncio.gather(*[workers[i % 5].outcome.remote(i) for i in range(50)])
                assert await _counts(holder) == (0, 0)  # no grant left to a waiter that went away
            order = [int(i) for i in (await holder.fs.read_text("/order")).split(",") if i]
            assert order == sorted(order)  # arrival order
            assert len(set(order)) == len(order)
            for i, outcome in enumerate(outcomes):
                if outcome == "granted":
                    assert i in order
                elif outcome == "cancelled":
                    assert i in cancelled and i not in order
                else:
                    assert outcome == "cancelled inside" and i in cancelled
            assert {i for i, o in enumerate(outcomes) if o == "granted"} >= set(range(50)) - cancelled
            await asyncio.wait_for(asyncio.gather(*[w.close.remote() for w in workers]), BOUND)
    finally:
        for w in workers:
            ray.kill(w)


async def test_waiters_of_a_worker_killed_in_the_middle_of_the_queue_are_skipped(
    leased: Callable[..., dict[str, Any]], name: str
) -> None:
    """50 waiters from 5 worker processes; one worker (10 waiters spread over the queue) is SIGKILLed
    while they all wait. Released, the lock goes to every live waiter in arrival order and never to a
    dead one: the lease is long (120 s), so a grant to a dead waiter would hold the rest up past the
    bound, and show as a lock still held."""
    config = leased(lock_lease=120.0)
    workers = [_Waiters.remote(name, config) for _ in range(5)]  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as holder:
            await holder.fs.write_file("/order", "")
            await asyncio.wait_for(asyncio.gather(*[w.open.remote() for w in workers]), BOUND)
            doomed = await workers[2].pid.remote()
            async with asyncio.timeout(BOUND * 3):
                hold = holder.locks.hold(["/order"])
                await hold.__aenter__()
                for i in range(50):
                    await workers[i % 5].start.remote(i)
                    await _until_waiting(holder, i + 1)
                os.kill(doomed, signal.SIGKILL)
                await asyncio.sleep(1.0)  # the process is gone (its requests stay queued at the owner)
                await hold.__aexit__(None, None, None)
                live = [i for i in range(50) if i % 5 != 2]
                outcomes = await asyncio.gather(*[workers[i % 5].outcome.remote(i) for i in live])
                assert outcomes == ["granted"] * len(live)
                assert await _counts(holder) == (0, 0)
            order = [int(i) for i in (await holder.fs.read_text("/order")).split(",") if i]
            assert order == live
    finally:
        for w in workers:
            ray.kill(w)


async def test_a_lock_wait_on_a_workspace_its_host_closes_goes_on_at_the_next_owner(
    leased: Callable[..., dict[str, Any]], name: str
) -> None:
    """A holds a lock and B waits when the owner host closes the workspace (as a deletion or a
    takeover does; the host lives on). B's wait is answered "moved" and goes on at the workspace's
    next owner, where B gets the lock; A's write under the closed table's lease is refused. Before,
    B waited in the closed table until A's lease ran out (120 s here; A's renewals reach the next
    owner, which does not know the lease) and was then granted a lease of that closed table."""
    leased(lock_lease=120.0)
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        if not isinstance(a.handle, HostedHandle):
            pytest.skip("an owner host closes one of its workspaces and lives on (owners='hosted')")
        await a.fs.write_file("/f", b"a")
        async with asyncio.timeout(BOUND):
            hold = a.locks.hold(["/f"])
            await hold.__aenter__()  # in this task: its writes present the lease's fencing token
            waiting = asyncio.ensure_future(_write_under(b, "/f", b"b"))
            await _until_waiting(a, 1)
            assert await owner_process(a.handle).close_workspace.remote(name)
            await waiting  # at the next owner
            with pytest.raises(LockLostError):
                await a.fs.write_file("/f", b"stale")
            await hold.__aexit__(None, None, None)
            assert await b.fs.read_file("/f") == b"b"
            assert await _counts(b) == (0, 0)


@ray.remote(num_cpus=0, max_restarts=0)
class _Holder:
    """A worker process that takes a lock and then sends a write under it when told."""

    async def take(self, name: str, config: dict[str, Any]) -> int:
        computer.init(**config)
        self.ws = await computer.get_workspace(name)
        self.ready = asyncio.Event()
        self.task = asyncio.ensure_future(self._hold_then_write())
        await self.ready.wait()
        return os.getpid()

    async def _hold_then_write(self) -> None:
        async with self.ws.locks.hold(["/f"]):
            self.ready.set()
            self.go = asyncio.Event()
            await self.go.wait()
            await self.ws.fs.write_file("/f", b"late")

    async def write(self) -> None:
        self.go.set()


async def test_a_sigkilled_holders_late_write_is_refused_and_the_waiter_gets_the_lock(
    leased: Callable[..., dict[str, Any]], name: str
) -> None:
    """A worker holds a lock and B waits. The owner is stopped, the holder sends a write under its
    lease (it sits in the stopped owner's queue) and is SIGKILLed; the owner stays stopped past the
    lease (3 s), then continues. B gets the lock once the dead holder's lease lapses, and the dead
    holder's write, if Ray still delivers it, is refused: never written, before or after B's."""
    config = leased(lock_lease=3.0)
    holder = _Holder.remote()  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as b:
            await b.fs.write_file("/f", b"first")
            pid = await asyncio.wait_for(holder.take.remote(name, config), BOUND)
            waiting = asyncio.ensure_future(b.locks.hold(["/f"]).__aenter__())
            await _until_waiting(b, 1)
            owner = await process_pid(owner_process(b.handle))
            os.kill(owner, signal.SIGSTOP)
            try:
                await asyncio.wait_for(holder.write.remote(), BOUND)
                await asyncio.sleep(0.5)  # the write is on its way to the stopped owner
                os.kill(pid, signal.SIGKILL)
                await asyncio.sleep(4.0)  # past the dead holder's lease
            finally:
                os.kill(owner, signal.SIGCONT)
            async with asyncio.timeout(BOUND):
                await waiting  # granted: this task presents B's token now
                assert await b.fs.read_file("/f") == b"first"
                await b.fs.write_file("/f", b"b")
                await asyncio.sleep(0.5)  # room for a late write still on its way
                assert await b.fs.read_file("/f") == b"b"
                await b.close()
                assert await _counts(b) == (0, 0)
    finally:
        ray.kill(holder)


async def test_a_holder_killed_while_the_gcs_is_stopped_loses_its_lock_to_the_waiter(
    leased: Callable[..., dict[str, Any]], name: str
) -> None:
    """A worker holds a lock and B waits; with the GCS stopped, the worker is SIGKILLed. Its lease
    (3 s) lapses at the owner, which needs no GCS for it: B gets the lock while the GCS is still
    stopped, and writes."""
    config = leased(lock_lease=3.0)
    holder = _Holder.remote()  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as b:
            await b.fs.write_file("/f", b"first")
            pid = await asyncio.wait_for(holder.take.remote(name, config), BOUND)
            waiting = asyncio.ensure_future(_write_under(b, "/f", b"b"))
            await _until_waiting(b, 1)
            with _gcs_stopped():
                os.kill(pid, signal.SIGKILL)
                await asyncio.wait_for(waiting, BOUND)
                assert await b.fs.read_file("/f") == b"b"
                assert await _counts(b) == (0, 0)
    finally:
        ray.kill(holder)
