"""SPEC 5: the lock table (conflicts, subtree holds, leases, fairness, independence)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from computer.storage import LockTable

# Seconds a wait expected to end may take: it ends at once when things go well. It was 1 s, which a
# loaded machine's stall of the test process could overrun (a false TimeoutError).
BOUND = 30.0


async def _blocked(coro: object, table: LockTable) -> asyncio.Task[str]:
    """Start an acquire and let it run until it waits."""
    task: asyncio.Task[str] = asyncio.ensure_future(coro)  # type: ignore[arg-type]
    for _ in range(5):
        await asyncio.sleep(0)
    return task


async def test_same_canonical_path_conflicts() -> None:
    table = LockTable()
    lease = await table.acquire(["/f"])
    waiter = await _blocked(table.acquire(["/a/../f"]), table)
    assert not waiter.done()
    table.release(lease)
    second = await asyncio.wait_for(waiter, BOUND)
    assert table.release(second)


async def test_unrelated_paths_proceed() -> None:
    table = LockTable()
    await table.acquire(["/a/f"])
    lease = await asyncio.wait_for(table.acquire(["/a/g", "/b"]), BOUND)
    assert lease


async def test_plain_holds_on_parent_and_child_do_not_conflict() -> None:
    table = LockTable()
    await table.acquire(["/a"])
    await asyncio.wait_for(table.acquire(["/a/f"]), BOUND)


async def test_subtree_hold_waits_for_descendant_and_blocks_it() -> None:
    table = LockTable()
    inner = await table.acquire(["/dir/sub/file"])
    subtree = await _blocked(table.acquire(["/dir"], subtree=True), table)
    unrelated = await asyncio.wait_for(table.acquire(["/other"]), BOUND)
    assert unrelated and not subtree.done()
    table.release(inner)
    held = await asyncio.wait_for(subtree, BOUND)
    later = await _blocked(table.acquire(["/dir/x"]), table)
    ancestor = await _blocked(table.acquire(["/"]), table)
    assert not later.done() and not ancestor.done()
    table.release(held)
    await asyncio.wait_for(asyncio.gather(later, ancestor), BOUND)


async def test_subtree_does_not_cover_prefix_siblings() -> None:
    table = LockTable()
    await table.acquire(["/dir"], subtree=True)
    await asyncio.wait_for(table.acquire(["/dir0/x", "/dir-x"]), BOUND)


async def test_several_paths_are_taken_all_at_once() -> None:
    table = LockTable()
    b = await table.acquire(["/b"])
    both = await _blocked(table.acquire(["/a", "/b"]), table)
    # No partial hold: while the request waits for /b it holds nothing, not even /a.
    assert [h.paths for h in table.held()] == [("/b",)]
    table.release(b)
    lease = await asyncio.wait_for(both, BOUND)
    assert [h.paths for h in table.held()] == [("/a", "/b")]
    table.release(lease)


async def test_hold_releases_on_failure() -> None:
    table = LockTable()
    with pytest.raises(RuntimeError):
        async with table.hold(["/f"]):
            raise RuntimeError("operation failed")
    assert table.held() == []
    async with table.hold(["/f"]):
        assert len(table.held()) == 1


async def test_expired_lease_is_dropped_and_waiter_woken() -> None:
    table = LockTable()
    await table.acquire(["/f"], holder="dead-client", ttl=0.05)
    lease = await asyncio.wait_for(table.acquire(["/f"]), BOUND)
    assert [h.holder for h in table.held()] == ["local"]
    assert table.release(lease)


async def test_renew_keeps_a_lease_alive() -> None:
    table = LockTable()
    lease = await table.acquire(["/f"], ttl=0.2)
    assert table.renew(lease, 30)
    with pytest.raises(TimeoutError):
        await table.acquire(["/f"], timeout=0.3)
    table.release(lease)
    assert not table.renew(lease, 30)


async def test_acquire_timeout_holds_nothing() -> None:
    table = LockTable()
    lease = await table.acquire(["/f"])
    with pytest.raises(TimeoutError):
        await table.acquire(["/f", "/g"], timeout=0.05)
    assert [h.paths for h in table.held()] == [("/f",)]
    table.release(lease)
    await asyncio.wait_for(table.acquire(["/g"]), BOUND)


async def test_cancelled_waiter_holds_nothing() -> None:
    table = LockTable()
    lease = await table.acquire(["/f"])
    waiter = await _blocked(table.acquire(["/f"]), table)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    table.release(lease)
    assert table.held() == []


async def test_release_holder_frees_all_its_leases() -> None:
    table = LockTable()
    await table.acquire(["/a"], holder="client-1")
    await table.acquire(["/b"], holder="client-1")
    await table.acquire(["/c"], holder="client-2")
    assert table.release_holder("client-1") == 2
    assert [h.holder for h in table.held()] == ["client-2"]


async def test_waiters_are_served_in_arrival_order() -> None:
    table = LockTable()
    first = await table.acquire(["/f"])
    order: list[str] = []

    async def take(name: str, paths: list[str]) -> None:
        lease = await table.acquire(paths)
        order.append(name)
        await asyncio.sleep(0)
        table.release(lease)

    a = asyncio.ensure_future(take("a", ["/f"]))
    await asyncio.sleep(0)
    b = asyncio.ensure_future(take("b", ["/f", "/g"]))
    await asyncio.sleep(0)
    c = asyncio.ensure_future(take("c", ["/f"]))
    await asyncio.sleep(0)
    table.release(first)
    await asyncio.wait_for(asyncio.gather(a, b, c), BOUND)
    assert order == ["a", "b", "c"]


async def test_a_resent_request_keeps_its_place_and_its_first_attempt_holds_nothing() -> None:
    """``resend=True``: the same request sent again while its first attempt waits takes that attempt's
    place. A later request that waits behind it only (``/b``: free, but ``first`` came before and
    wants it too) is not let through meanwhile, and is served after the resend."""
    table = LockTable()
    held = await table.acquire(["/a"])
    first = await _blocked(table.acquire(["/a", "/b"], holder="r1"), table)
    later = await _blocked(table.acquire(["/b"], holder="r2"), table)
    resent = await _blocked(table.acquire(["/a", "/b"], holder="r1", resend=True), table)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(first, BOUND)
    assert not later.done() and not resent.done()
    assert [lease.holder for lease in table.held()] == ["local"]
    table.release(held)
    lease = await asyncio.wait_for(resent, BOUND)
    assert not later.done()
    table.release(lease)
    table.release(await asyncio.wait_for(later, BOUND))
    assert table.held() == [] and not table._waiting


async def test_a_stream_of_small_holds_does_not_starve_a_subtree_hold() -> None:
    table = LockTable()
    held = await table.acquire(["/d/0"])
    big = asyncio.ensure_future(table.acquire(["/d"], subtree=True))
    await asyncio.sleep(0)
    # A later request for another descendant must queue behind the subtree request.
    late = asyncio.ensure_future(table.acquire(["/d/1"]))
    await asyncio.sleep(0)
    assert not late.done()
    table.release(held)
    lease = await asyncio.wait_for(big, BOUND)
    assert not late.done()
    table.release(lease)
    await asyncio.wait_for(late, BOUND)


async def test_different_tables_never_interact() -> None:
    one, two = LockTable(), LockTable()
    await one.acquire(["/f"], subtree=True)
    await asyncio.wait_for(two.acquire(["/f"], subtree=True), BOUND)


async def test_release_of_unknown_lease_is_false() -> None:
    assert not LockTable().release("nope")


async def test_a_nested_hold_its_own_task_conflicts_with_is_edeadlk_at_once(tmp_path: Path) -> None:
    """A second hold of a path inside the same task's hold of it, or the write tool called on it
    there, waited for good (the block cannot end while its own task waits; the outer lease is renewed
    all along). A task started in the block still waits for it, as a second agent would."""
    import errno

    import computer
    from computer.tools import create_tools

    async with computer.Workspace(str(tmp_path / "ws.sqlite")) as ws:
        await ws.fs.write_file("/f", "x")
        tools = create_tools(ws)
        async with ws.locks.hold(["/f"]):
            nested = (["/f"], False), (["/a/../f"], False), (["/"], True), (["/g", "/f"], False)
            for paths, subtree in nested:
                with pytest.raises(OSError) as raised:
                    async with asyncio.timeout(10), ws.locks.hold(paths, subtree=subtree):
                        pass
                assert raised.value.errno == errno.EDEADLK, raised.value
                assert "this task holds /f, and a nested hold would wait" in str(raised.value)
            async with asyncio.timeout(10):
                written = await tools["write"].run({"path": "/f", "content": "y"})
            assert "Resource deadlock avoided" in str(written.get("error")), written
            async with ws.locks.hold(["/g"]):  # unrelated paths still nest
                await ws.fs.write_file("/g", "g")
            other = asyncio.ensure_future(
                asyncio.wait_for(tools["write"].run({"path": "/f", "content": "z"}), 10)
            )
            await asyncio.sleep(0.1)
            assert not other.done()  # another task: waits for the block's end
        assert (await other).get("error") is None
        assert await ws.fs.read_text("/f") == "z"
        async with ws.locks.hold(["/d"], subtree=True):
            with pytest.raises(OSError) as raised:
                async with asyncio.timeout(10), ws.locks.hold(["/d/e/f"]):
                    pass
            assert raised.value.errno == errno.EDEADLK
