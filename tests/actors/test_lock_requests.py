"""A lock request reaches the owner more than once, or after it was withdrawn: it never leaves a lease
that nobody holds (``computer/actors/_lock_requests.py``), nor does a hold cancelled while it releases.

The owner's lease is short (``lock_lease=3.0``) so that a test which would wait a whole lease out on the
code before the fix stays short; each checks an outcome (the grant, its lease id, the owner's counts),
never a duration.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from owner_models import owner_process, process_pid

import computer
from computer.actors import lock_process
from computer.actors.wire import unwrap


@pytest.fixture
def short_leases(ray_session: Any, tmp_path: Path) -> Iterator[None]:
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=3.0)
    yield
    computer.init(data_dir=f"{tmp_path}/data")


def _dead_pid() -> int:
    """The pid of a process of this machine that has exited."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


def _request(client: str) -> str:
    """A holder as a client names one acquire (``computer/client/_locks.py``)."""
    return f"client:{client}#r1:{lock_process()}"


async def _acquire(handle: Any, holder: str, path: str = "/f") -> tuple[str, float, int]:
    lease_id, ttl, token = unwrap(await asyncio.wait_for(handle.lock_acquire.remote(holder, [path]), 30))
    return str(lease_id), float(ttl), int(token)


async def _held(handle: Any) -> tuple[int, int]:
    stats = await handle.stats.remote()
    return stats["locks_held"], stats["locks_waiting"]


async def test_a_lock_request_that_arrives_after_its_withdrawal_is_refused_and_holds_nothing(
    short_leases: None, name: str
) -> None:
    """The client gave up waiting (cancelled, timed out) and sent ``lock_cancel``, which overtook its
    ``lock_acquire`` still on its way (another concurrency group; Ray's cancel is best effort). Before,
    the acquire was granted to nobody: every other worker locked out for a whole lease."""
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        abandoned = _request(a.client_id)
        assert unwrap(await a.handle.lock_cancel.remote(abandoned)) == 0  # nothing to withdraw yet
        with pytest.raises(OSError) as refused:
            await _acquire(a.handle, abandoned)
        assert refused.value.errno == errno.ECANCELED
        assert await _held(a.handle) == (0, 0)
        async with asyncio.timeout(20), b.locks.hold(["/f"]):
            assert await _held(b.handle) == (1, 0)  # b's own lease, nothing of the withdrawn request's


async def test_a_lock_request_that_arrives_after_its_client_closed_is_refused_and_holds_nothing(
    short_leases: None, name: str
) -> None:
    """The client closed (``lock_release_holder``, one call for all its requests) while one of its
    acquires was still on its way (another concurrency group). Before, only single withdrawals were
    remembered: the acquire was granted after the close, to a client that would never renew nor release
    it, every other worker locked out for a whole lease."""
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        late = _request(a.client_id)
        assert unwrap(await a.handle.lock_release_holder.remote(f"client:{a.client_id}")) == 0
        with pytest.raises(OSError) as refused:
            await _acquire(a.handle, late)
        assert refused.value.errno == errno.ECANCELED
        assert await _held(a.handle) == (0, 0)
        async with asyncio.timeout(20), b.locks.hold(["/f"]):
            assert await _held(b.handle) == (1, 0)  # b's own lease, nothing of the closed client's
        # Another client's requests are not refused: only the closed one's.
        granted = await _acquire(b.handle, _request(b.client_id))
        assert unwrap(await b.handle.lock_release.remote(granted[0])) is True


async def test_a_resent_lock_request_gets_its_first_grant_again(short_leases: None, name: str) -> None:
    """The acquire's reply was lost (the call cut by Ray) and the retry-safe call was sent again. Before,
    the resend waited behind the first grant, which nobody renewed nor released, for the whole lease,
    then held a second one."""
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        request = _request(a.client_id)
        first = await _acquire(a.handle, request)
        again = await _acquire(a.handle, request)
        assert (again[0], again[2]) == (first[0], first[2])  # the same lease and fencing token
        assert await _held(a.handle) == (1, 0)
        assert unwrap(await a.handle.lock_release.remote(first[0])) is True
        async with asyncio.timeout(20), b.locks.hold(["/f"]):
            assert await _held(b.handle) == (1, 0)


async def test_a_request_resent_while_its_first_attempt_waits_is_granted_once(
    short_leases: None, name: str
) -> None:
    """The first attempt still waits in the owner when its resend comes: the resend takes its place and
    the first is cancelled there. Before, both waited; the first was granted to nobody when the lock
    freed, and the resend waited out that lease."""
    async with computer.get_workspace(name) as holder, computer.get_workspace(name) as a:
        request = _request(a.client_id)
        async with holder.locks.hold(["/f"]):
            first = a.handle.lock_acquire.remote(request, ["/f"])
            for _ in range(400):  # until the owner queued the first attempt (bounded)
                if (await _held(a.handle))[1]:
                    break
                await asyncio.sleep(0.05)
            resent = asyncio.ensure_future(_acquire(a.handle, request))
            outcome = await _replaced(first)  # the resend reached the owner while the lock was held
            assert not resent.done()  # behind the holder
        lease_id, _, _ = await resent
        assert not (isinstance(outcome, tuple) and outcome[0] == "ok"), outcome  # never granted too
        assert await _held(a.handle) == (1, 0)
        assert unwrap(await a.handle.lock_release.remote(lease_id)) is True
        assert await _held(a.handle) == (0, 0)


async def _replaced(first: Any) -> Any:
    """Until the first attempt ``first`` (an ``ObjectRef``) of a request ended, as it does once its
    resend reaches the owner and takes its place; its outcome (bounded: 30 s). Before, the tests gave
    the resend a fixed moment (0.3 s, 0.5 s) to arrive before freeing the lock; on a loaded machine it
    came later, found the first attempt granted, and got that same grant (correct, but not the case
    under test), so the check failed now and then."""
    try:
        return await asyncio.wait_for(first, 30)
    except TimeoutError:
        raise AssertionError("the first attempt still waits: its resend did not take its place") from None
    except Exception as exc:  # cancelled in the owner (Ray's cancellation error)
        return exc


async def _until_queued(handle: Any, count: int) -> None:
    """Until the owner has ``count`` lock requests waiting (bounded)."""
    for _ in range(400):
        if (await _held(handle))[1] >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the owner never had {count} lock requests waiting")


async def test_a_request_resent_while_its_first_attempt_waits_keeps_its_place_in_the_queue(
    short_leases: None, name: str
) -> None:
    """Waiters are served in arrival order, and a resend is the same request, not a new one: it takes
    its first attempt's place. Before, the first attempt was cancelled and the resend queued behind
    every request that came meanwhile (here B's, served first although it came after)."""
    async with computer.get_workspace(name) as holder, computer.get_workspace(name) as a:
        first_request, later_request = _request(a.client_id), f"client:{a.client_id}#r2:{lock_process()}"
        async with holder.locks.hold(["/f"]):
            first = a.handle.lock_acquire.remote(first_request, ["/f"])
            await _until_queued(a.handle, 1)
            later = asyncio.ensure_future(_acquire(a.handle, later_request))
            await _until_queued(a.handle, 2)
            resent = asyncio.ensure_future(_acquire(a.handle, first_request))
            outcome = await _replaced(first)  # the resend reached the owner (same place: not counted)
            assert await _held(a.handle) == (1, 2)
        assert not (isinstance(outcome, tuple) and outcome[0] == "ok"), outcome  # never granted too
        async with asyncio.timeout(20):
            lease_id, _, _ = await resent  # first, though the later request came before the resend
            assert not later.done()
            assert unwrap(await a.handle.lock_release.remote(lease_id)) is True
            later_lease, _, _ = await later
            assert unwrap(await a.handle.lock_release.remote(later_lease)) is True
            assert await _held(a.handle) == (0, 0)


async def test_a_hold_cancelled_while_it_releases_still_releases(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """The task holding a lock is cancelled again as it leaves the block (a timeout, a task group
    shutting down) while the release is on its way. Before, the cancellation cancelled the release
    call itself in Ray, and the lease (its renewal already stopped) stayed until it expired: every
    other worker locked out for a whole lease (60 s here)."""
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=60.0)
    try:
        async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:

            async def hold_once() -> None:
                me = asyncio.current_task()
                assert me is not None
                async with a.locks.hold(["/f"]):
                    # Delivered at the first wait after the block: the release's round trip.
                    asyncio.get_running_loop().call_soon(me.cancel)

            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(hold_once(), 30)
            for _ in range(400):  # the release goes on after the cancellation (bounded: 20 s)
                if await _held(a.handle) == (0, 0):
                    break
                await asyncio.sleep(0.05)
            assert await _held(a.handle) == (0, 0)  # released, a third of the lease at most
            async with asyncio.timeout(20), b.locks.hold(["/f"]):
                assert await _held(b.handle) == (1, 0)
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


# -- what else could outlive its holder (pinned: no defect found) -------------------------------------


async def test_a_hold_kept_for_several_leases_is_renewed_and_writes_under_it(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """Pinned: a hold kept for more than three leases is renewed in the background (every third of the
    lease): another client's request waits all along, and the holder's fenced write lands. The lease
    is 3 s (a renewal may come up to 2 s late): before, 1 s, and a renewal late by 0.67 s on a loaded
    machine lost the lease, the other client's request was granted, and the test failed."""
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=3.0)
    try:
        async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
            async with a.locks.hold(["/f"]):
                waiting = asyncio.ensure_future(b.locks.hold(["/f"]).__aenter__())
                done, _ = await asyncio.wait({waiting}, timeout=10.5)  # three and a half leases
                assert not done
                await a.fs.write_file("/f", b"under a renewed lease")  # refused (ENOLCK) once lost
            await asyncio.wait_for(waiting, 20)
            assert await b.fs.read_file("/f") == b"under a renewed lease"
            await b.close()
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


async def test_a_hold_nobody_refers_to_any_more_releases_its_lease(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """Pinned: a hold entered and then dropped without leaving the block (its task forgot it) is
    released when the loop finalizes its generator, long before its lease (60 s) would expire: its
    renewal stops with it, so nobody holds it on."""
    import gc

    computer.init(data_dir=f"{tmp_path}/data", lock_lease=60.0)
    try:
        async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
            hold = a.locks.hold(["/f"])
            await hold.__aenter__()
            assert await _held(a.handle) == (1, 0)
            del hold
            gc.collect()
            for _ in range(400):  # bounded: 20 s
                if await _held(a.handle) == (0, 0):
                    break
                await asyncio.sleep(0.05)
            assert await _held(a.handle) == (0, 0)
            async with asyncio.timeout(20), b.locks.hold(["/f"]):
                assert await _held(b.handle) == (1, 0)
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


async def test_a_lock_request_arriving_after_its_client_process_died_is_dropped(
    short_leases: None, name: str
) -> None:
    """A client process sent its acquire and died before the owner served it (Ray still delivers a dead
    caller's call); the lock is free. Before, the request was granted at once (only a request that
    waited was checked): a lease nobody renews, every other worker locked out for ``lock_lease``."""
    place = lock_process().rpartition("~")[2]
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        with pytest.raises(OSError) as dropped:
            await _acquire(a.handle, f"client:gone#r1:{_dead_pid()}@{socket.gethostname()}~{place}")
        assert dropped.value.errno == errno.ESRCH
        assert await _held(a.handle) == (0, 0)
        async with asyncio.timeout(20), b.locks.hold(["/f"]):
            assert await _held(b.handle) == (1, 0)


@ray.remote(num_cpus=0, max_restarts=0)
class _Asker:
    """A worker in its own process: opens a client, then asks for a lock and dies before an answer."""

    async def open(self, name: str, config: dict[str, object]) -> None:
        computer.init(**config)
        self.ws = await computer.get_workspace(name)

    async def ask_briefly(self) -> str:
        """Ask for the lock, giving up after a second (the worker lives on)."""
        try:
            await asyncio.wait_for(self.ws.locks.hold(["/f"]).__aenter__(), 1.0)
        except TimeoutError:
            return "gave up"
        return "held"

    async def ask_and_die(self) -> None:
        self.asking = asyncio.ensure_future(self.ws.locks.hold(["/f"]).__aenter__())
        await asyncio.sleep(1.0)  # the request is on its way to the (stopped) owner
        os._exit(1)


async def test_a_lock_request_of_a_worker_that_died_before_its_owner_served_it_holds_nothing(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """Pinned, two processes: a worker asks for a free lock while the owner's process is stopped, and
    dies; the owner then goes on. The dead worker holds nothing: the driver's client gets the lock well
    within the lease (60 s here). (This passed before the owner dropped requests of dead processes on
    arrival too: Ray did not serve the dead caller's queued call here; the owner's check, proven by
    ``test_a_lock_request_arriving_after_its_client_process_died_is_dropped``, covers one that is.)"""

    async def ask(asker: Any) -> None:
        with pytest.raises(ray.exceptions.RayError):
            await asyncio.wait_for(asker.ask_and_die.remote(), 60)

    await _asked_while_the_owner_was_stopped(name, tmp_path, ask)


async def test_a_lock_wait_given_up_while_the_owner_was_stopped_leaves_no_lease(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """Two processes: a worker asks for a free lock while the owner's process is stopped (slow, frozen)
    and gives up after a second (its timeout: the acquire is cancelled, ``lock_cancel`` sent); the
    owner then goes on, serving the withdrawal before the acquire (another concurrency group). Before,
    the acquire was granted after its withdrawal to nobody: the driver's client waited out the whole
    lease (60 s here), the owner showing one lease held."""

    async def ask(asker: Any) -> None:
        assert await asyncio.wait_for(asker.ask_briefly.remote(), 60) == "gave up"
        await asyncio.sleep(1.0)  # its withdrawal is on its way too

    await _asked_while_the_owner_was_stopped(name, tmp_path, ask)


async def _asked_while_the_owner_was_stopped(
    name: str, tmp_path: Path, ask: Callable[[Any], Awaitable[None]]
) -> None:
    """A worker in its own process (``_Asker``) does ``ask`` while the owner's process is stopped; once
    the owner goes on, the driver's client gets the lock within a third of the lease (60 s)."""
    config = {"data_dir": f"{tmp_path}/data", "lock_lease": 60.0}
    computer.init(**config)
    asker = _Asker.remote()  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as b:
            await b.fs.stat("/")
            await asyncio.wait_for(asker.open.remote(name, config), 60)
            owner = await process_pid(owner_process(b.handle))
            os.kill(owner, signal.SIGSTOP)
            try:
                await ask(asker)
            finally:
                os.kill(owner, signal.SIGCONT)
            async with asyncio.timeout(20), b.locks.hold(["/f"]):  # a third of the lease at most
                assert await _held(b.handle) == (1, 0)
    finally:
        ray.kill(asker)
        computer.init(data_dir=f"{tmp_path}/data")


async def test_a_lock_wait_timed_out_while_the_owner_was_stopped_leaves_no_lease(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """The same with both clients in this process: ``wait_for(hold, 1.0)`` times out while the owner's
    process is stopped. Before, the owner held the timed-out request's lease once it went on."""
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=60.0)
    try:
        async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
            await a.fs.stat("/")
            owner = await process_pid(owner_process(a.handle))
            os.kill(owner, signal.SIGSTOP)
            try:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(a.locks.hold(["/f"]).__aenter__(), 1.0)
                await asyncio.sleep(1.0)  # its withdrawal is on its way too
            finally:
                os.kill(owner, signal.SIGCONT)
            async with asyncio.timeout(20), b.locks.hold(["/f"]):  # a third of the lease at most
                assert await _held(b.handle) == (1, 0)
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


async def test_a_close_cancelled_while_it_releases_still_releases(
    ray_session: Any, name: str, tmp_path: Path
) -> None:
    """A worker closes its client while holding a lock and is cancelled as the release is on its way
    (its task group shutting down): the lease is released all the same, long before it would expire
    (60 s here). It failed (the lease held after 20 s) in 3 of 4 runs before ``close`` sent its
    release in a task of its own; it had seemed to pass while the test dropped its hold unexited, whose
    generator's finalizer released the lease instead."""
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=60.0)
    try:
        async with computer.get_workspace(name) as b:
            a = await computer.get_workspace(name)
            # Never exited: only close() releases it. Kept referenced: a hold collected unexited is
            # released by its generator's finalizer, which would pass this test for the wrong reason
            # or fail its first count.
            hold = a.locks.hold(["/f"])
            await hold.__aenter__()
            assert await _held(b.handle) == (1, 0)

            async def close() -> None:
                me = asyncio.current_task()
                assert me is not None
                asyncio.get_running_loop().call_soon(me.cancel)  # delivered at close's round trip
                await a.close()

            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(close(), 30)
            for _ in range(400):  # the release goes on after the cancellation (bounded: 20 s)
                if await _held(b.handle) == (0, 0):
                    break
                await asyncio.sleep(0.05)
            assert await _held(b.handle) == (0, 0)
            async with asyncio.timeout(20), b.locks.hold(["/f"]):
                assert await _held(b.handle) == (1, 0)
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


async def test_a_hold_waiting_when_its_client_closes_ends_with_enolck_and_holds_nothing(
    short_leases: None, name: str
) -> None:
    """A hold still waiting for its lock when its client is closed: the close withdraws it (the owner
    stops its wait and refuses it from then on), and the hold ends with ENOLCK naming the close,
    never holding the lock. Before (dbbb5d2), the owner's cancelled wait made the retry-safe acquire
    go again, and the resend waited behind the other holder: the hold had not ended after 30 s."""
    async with computer.get_workspace(name) as b:
        a = await computer.get_workspace(name)

        async def waiting() -> None:
            async with a.locks.hold(["/f"]):
                pass

        async with b.locks.hold(["/f"]):
            task = asyncio.ensure_future(waiting())
            for _ in range(400):  # until the owner queued a's request (bounded)
                if (await _held(b.handle))[1]:
                    break
                await asyncio.sleep(0.05)
            assert await _held(b.handle) == (1, 1)
            await a.close()
            with pytest.raises(OSError) as closed:
                await asyncio.wait_for(task, 30)
            assert closed.value.errno == errno.ENOLCK, closed.value
            assert "its client was closed" in str(closed.value)
        assert await _held(b.handle) == (0, 0)
