"""Property: whatever the order of requests and releases, granted leases never conflict and every
request is eventually granted once the others let go."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from computer.storage import LockTable
from computer.storage.paths import is_within

PATHS = ["/", "/a", "/a/b", "/a/b/c", "/ab", "/d"]

requests = st.tuples(st.lists(st.sampled_from(PATHS), min_size=1, max_size=3), st.booleans())
steps = st.lists(st.one_of(st.tuples(st.just("acquire"), requests), st.just(("release", None))), max_size=30)


def _conflict(a: tuple[tuple[str, ...], bool], b: tuple[tuple[str, ...], bool]) -> bool:
    wide = a[1] or b[1]
    return any(x == y or (wide and (is_within(x, y) or is_within(y, x))) for x in a[0] for y in b[0])


async def _run(sequence: list[tuple[str, object]]) -> None:
    table = LockTable()
    tasks: list[asyncio.Task[str]] = []
    released: set[str] = set()
    for kind, arg in sequence:
        if kind == "acquire":
            paths, subtree = arg  # type: ignore[misc]
            tasks.append(asyncio.ensure_future(table.acquire(paths, subtree=subtree)))
        else:
            granted = [t.result() for t in tasks if t.done() and t.result() not in released]
            if granted:
                released.add(granted[0])
                assert table.release(granted[0])
        for _ in range(3):
            await asyncio.sleep(0)
        held = [(lease.paths, lease.subtree) for lease in table.held()]
        for i, a in enumerate(held):
            for b in held[i + 1 :]:
                assert not _conflict(a, b), (a, b)
    # Let everything go: every request must be granted in turn.
    for _ in range(len(tasks) + 1):
        for t in tasks:
            if t.done() and t.result() not in released:
                released.add(t.result())
                table.release(t.result())
        for _ in range(3):
            await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*tasks), 30)  # at once; 30 s bounds a stalled machine (was 2)
    assert all(t.done() for t in tasks)


@settings(max_examples=100, deadline=None)
@given(steps)
def test_granted_leases_never_conflict_and_all_requests_complete(sequence: list[tuple[str, object]]) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_run(sequence))
    finally:
        loop.close()
