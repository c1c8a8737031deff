"""Clients share the owner's lock table: leases per client, renewed, released, expiring with the client."""

from __future__ import annotations

import asyncio
import os

import pytest
import ray

import computer
from computer.config import Settings


@ray.remote(num_cpus=0)
def _increment(name: str, times: int) -> int:
    async def go() -> int:
        async with computer.get_workspace(name) as ws:
            for _ in range(times):
                async with ws.locks.hold(["/counter"]):
                    value = int(await ws.fs.read_text("/counter"))
                    await ws.fs.write_file("/counter", str(value + 1))
        return times

    return asyncio.run(go())


@ray.remote(num_cpus=0, max_retries=0)
def _die_holding_a_lock(name: str) -> None:
    async def go() -> None:
        ws = await computer.get_workspace(name)
        await ws.locks.hold(["/f"]).__aenter__()
        os._exit(1)  # the client dies without releasing

    asyncio.run(go())


@ray.remote(num_cpus=0, max_retries=0)
def _die_waiting_for_a_lock(name: str) -> None:
    async def go() -> None:
        ws = await computer.get_workspace(name)
        waiting = asyncio.ensure_future(ws.locks.hold(["/f"]).__aenter__())
        for _ in range(400):  # until the owner queued the request (bounded)
            if (await ws.handle.stats.remote())["locks_waiting"]:
                break
            await asyncio.sleep(0.05)
        assert not waiting.done()
        os._exit(1)  # the client dies while waiting

    asyncio.run(go())


async def test_three_workers_incrementing_under_locks_lose_no_update(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/counter", "0")
        assert await asyncio.gather(*[_increment.remote(name, 15) for _ in range(3)]) == [15, 15, 15]
        assert await ws.fs.read_text("/counter") == "45"


async def test_equivalent_paths_conflict_across_clients(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        async with a.locks.hold(["/a/../f"]):
            waiter = asyncio.ensure_future(b.locks.hold(["/f"]).__aenter__())
            done, _ = await asyncio.wait({waiter}, timeout=0.3)
            assert not done  # blocked by a's lease on the same canonical path
        await asyncio.wait_for(waiter, 10)
        held = await b.handle.stats.remote()
        assert held["inflight"] == 0


async def test_subtree_hold_waits_for_a_descendant_while_unrelated_paths_proceed(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        async with a.locks.hold(["/dir/inner/file"]):
            subtree = asyncio.ensure_future(b.locks.hold(["/dir"], subtree=True).__aenter__())
            async with b.locks.hold(["/other"]):
                pass  # unrelated path: not blocked
            done, _ = await asyncio.wait({subtree}, timeout=0.3)
            assert not done
        await asyncio.wait_for(subtree, 10)
        await b.close()


async def test_lease_of_a_dead_client_expires(ray_session: object, name: str, tmp_path: object) -> None:
    """The lease is 6 s: the test sees it still live after the client's death reached it. Before, 2 s:
    a death reported (or a check made) 1.7 s late on a loaded machine found it expired already."""
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=6.0)
    try:
        async with computer.get_workspace(name) as ws:
            with pytest.raises(ray.exceptions.RayError):
                await _die_holding_a_lock.remote(name)
            blocked = asyncio.ensure_future(ws.locks.hold(["/f"]).__aenter__())
            done, _ = await asyncio.wait({blocked}, timeout=0.3)
            assert not done  # the dead client's lease is still live
            await asyncio.wait_for(blocked, 30)  # ... until it expires (6 s without renewal)
            stats = await ws.handle.stats.remote()
            assert stats["inflight"] == 0
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


async def test_closing_a_client_releases_its_leases(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        await a.locks.hold(["/f"]).__aenter__()  # never exited: only close() can release it
        await a.close()
        await asyncio.wait_for(b.locks.hold(["/f"]).__aenter__(), 10)
        await b.close()


async def test_cancelled_lock_wait_holds_nothing(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        async with a.locks.hold(["/f"]):
            waiter = asyncio.ensure_future(b.locks.hold(["/f"]).__aenter__())
            done, _ = await asyncio.wait({waiter}, timeout=0.2)
            assert not done
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        # If the cancelled wait had been granted on the owner, this would block for a whole lease.
        async with computer.get_workspace(name) as c:
            await asyncio.wait_for(c.locks.hold(["/f"]).__aenter__(), 5)
            await c.close()


@ray.remote(num_cpus=0, max_restarts=0)
class _SlowHolder:
    """A client in its own process that takes a lock, waits to be told, then writes under it."""

    def __init__(self) -> None:
        self._go = asyncio.Event()
        self._held = asyncio.Event()

    def pid(self) -> int:
        return os.getpid()

    async def held(self) -> None:
        await self._held.wait()

    def go(self) -> None:
        self._go.set()

    async def hold_then_write(self, name: str, config: dict[str, object]) -> object:
        computer.init(**config)
        async with computer.get_workspace(name) as ws, ws.locks.hold(["/f"]):
            self._held.set()
            await self._go.wait()
            try:
                await ws.fs.write_file("/f", b"late writer")
            except OSError as exc:
                return exc.errno
            return "written"


async def test_a_holder_stopped_past_its_lease_is_refused_after_another_took_the_lock(
    ray_session: object, name: str, tmp_path: object
) -> None:
    """Lease expiry while the holder is merely slow (its process stopped longer than ``lock_lease``,
    then running again, unaware): the next holder gets the lock, and the late holder's write under
    its lost lease is refused (LockLostError, ENOLCK), never interleaved."""
    import errno
    import signal

    config = {"data_dir": f"{tmp_path}/data", "lock_lease": 2.0}
    computer.init(**config)
    holder = _SlowHolder.remote()  # type: ignore[attr-defined]
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/f", b"first")
            written = holder.hold_then_write.remote(name, config)
            await asyncio.wait_for(holder.held.remote(), 30)
            pid = await holder.pid.remote()
            os.kill(pid, signal.SIGSTOP)  # no renewal from now on
            try:
                # Blocked until the stopped holder's lease runs out (2 s), then granted.
                async with asyncio.timeout(20), ws.locks.hold(["/f"]):
                    await ws.fs.write_file("/f", b"next holder")
            finally:
                os.kill(pid, signal.SIGCONT)
            await holder.go.remote()
            assert await asyncio.wait_for(written, 30) == errno.ENOLCK
            assert await ws.fs.read_file("/f") == b"next holder"
            assert (await ws.handle.stats.remote())["locks_held"] == 0
    finally:
        ray.kill(holder)
        computer.init(data_dir=f"{tmp_path}/data")


async def test_a_waiter_whose_process_died_is_skipped_when_the_lock_frees(
    ray_session: object, name: str, tmp_path: object
) -> None:
    """Several workers wait for one lock; one of them is killed while it waits. When the holder
    releases, the next live waiter gets the lock. Before, the dead worker's request was granted (Ray
    does not cancel a call whose caller died), and every other waiter waited out that lease nobody
    renewed (``lock_lease``: 30 s by default, 60 s here)."""
    computer.init(data_dir=f"{tmp_path}/data", lock_lease=60.0)
    try:
        async with computer.get_workspace(name) as holder, computer.get_workspace(name) as next_one:
            async with holder.locks.hold(["/f"]):
                with pytest.raises(ray.exceptions.RayError):
                    await _die_waiting_for_a_lock.remote(name)
                # Kept: a hold nothing refers to any more is collected once entered, and its generator's
                # finalizer releases the lock soon after (the counts below then read 0 held, at times).
                hold = next_one.locks.hold(["/f"])
                waiting = asyncio.ensure_future(hold.__aenter__())
                done, _ = await asyncio.wait({waiting}, timeout=0.3)
                assert not done  # behind the holder (and the dead worker's request)
            await asyncio.wait_for(waiting, 20)  # a third of the dead request's lease at most
            stats = await next_one.handle.stats.remote()
            assert (stats["locks_held"], stats["locks_waiting"]) == (1, 0)
            await hold.__aexit__(None, None, None)
            await next_one.close()
    finally:
        computer.init(data_dir=f"{tmp_path}/data")


def test_a_dead_pid_is_taken_for_a_gone_waiter_only_in_the_owners_own_machine_and_pid_namespace() -> None:
    """A lock request names its process by pid, hostname and place (boot id and pid namespace). A pid
    that is not alive here is a gone waiter only when the place is this one: a container sharing the
    host's name (``--net=host``) or a cloned machine has pids of its own, and taking its live waiter
    for dead would refuse it the lock (ESRCH). Before, the hostname alone decided."""
    import socket
    import subprocess

    from computer.actors import lock_process
    from computer.actors._lease import holder_gone

    dead = subprocess.Popen(["true"])
    dead.wait()
    me = lock_process()
    assert me.startswith(f"{os.getpid()}@{socket.gethostname()}~") and len(me.rpartition("~")[2]) == 12
    place = me.rpartition("~")[2]
    here = f"{dead.pid}@{socket.gethostname()}~{place}"
    assert holder_gone(f"client:abc#r1:{here}")
    assert not holder_gone(f"client:abc#r1:{os.getpid()}@{socket.gethostname()}~{place}")  # alive
    assert not holder_gone(f"client:abc#r1:{dead.pid}@{socket.gethostname()}~{'0' * 12}")  # another place
    assert not holder_gone(f"client:abc#r1:{dead.pid}@{socket.gethostname()}")  # no place: cannot tell
    # Another hostname in the same place (a UTS namespace of its own, as tests emulate a second node):
    # its pids are this namespace's, so its dead pid is gone too.
    assert holder_gone(f"client:abc#r1:{dead.pid}@another-host~{place}")
    assert not holder_gone(f"agent:abc#r1:{here}")  # not a client's request


async def test_a_lock_wait_of_a_client_closed_meanwhile_never_holds_the_lock(
    cluster: Settings, name: str
) -> None:
    """A worker closes its client while one of its tasks still waits for a lock. That wait ends with
    ``LockLostError`` (ENOLCK) once the lock frees, holding nothing. Before, the wait was granted after
    the close and its lease renewed for as long as the process lived: every other worker was locked
    out (and the owner never hibernated), and the closed client's task went on as the holder."""
    import errno

    async with computer.get_workspace(name) as a, computer.get_workspace(name) as c:
        b = await computer.get_workspace(name)
        async with a.locks.hold(["/f"]):
            waiting = asyncio.ensure_future(b.locks.hold(["/f"]).__aenter__())
            for _ in range(400):  # until the owner queued b's request (bounded)
                if (await a.handle.stats.remote())["locks_waiting"]:
                    break
                await asyncio.sleep(0.05)
            await b.close()
        with pytest.raises(OSError) as lost:
            await asyncio.wait_for(waiting, 20)
        assert lost.value.errno == errno.ENOLCK
        async with asyncio.timeout(20), c.locks.hold(["/f"]):  # free: nothing of b's holds it
            stats = await c.handle.stats.remote()
            assert (stats["locks_held"], stats["locks_waiting"]) == (1, 0)


async def test_a_nested_hold_of_a_held_path_is_edeadlk_through_a_client(cluster: Settings, name: str) -> None:
    """Through a client as embedded (``storage.locks.own_hold``): a hold of ``/f`` inside the same
    task's hold of it, or the write tool called on ``/f`` there, waited for good, the outer lease
    renewed all along."""
    import errno

    from computer.tools import create_tools

    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", "x")
        tools = create_tools(ws)
        async with ws.locks.hold(["/f"]):
            with pytest.raises(OSError) as raised:
                async with asyncio.timeout(30), ws.locks.hold(["/f"]):
                    pass
            assert raised.value.errno == errno.EDEADLK, raised.value
            async with asyncio.timeout(30):
                written = await tools["write"].run({"path": "/f", "content": "y"})
            assert "Resource deadlock avoided" in str(written.get("error")), written
            assert (await ws.handle.stats.remote())["locks_waiting"] == 0  # nothing was queued
        written = await asyncio.wait_for(tools["write"].run({"path": "/f", "content": "z"}), 30)
        assert written.get("error") is None and await ws.fs.read_text("/f") == "z"
        assert (await ws.handle.stats.remote())["locks_held"] == 0
