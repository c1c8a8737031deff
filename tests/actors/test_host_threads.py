"""An owner host's own work must not wait for its workspaces' blocking work (no Ray: the renewal
round alone). The loops of a host's workspaces share one default thread pool (``asyncio.to_thread``
of any code running there); the host renewed every lease it holds, one directory write per round,
on that same pool, so workspaces whose blocking calls hung (shares on a wedged disk, before they left
the pool: ``tests/assets/test_shared_threads.py``; any library's ``to_thread``) held the round until
they ended, and every lease of the host could lapse meanwhile (other owners take the workspaces over).
The round now runs on a lane of the host's own (``computer.runtime.offload``). Observed with
events, never with timings."""

from __future__ import annotations

import asyncio
import threading
import types
from typing import Any

import pytest

import computer.actors._hosts as hosts
from computer.actors._hosts import OwnerHost
from computer.actors._loop_thread import LoopThread, SharedThreadPool

THREADS = 2  # the shared pool (a host has 16: only N >= it matters)
PATIENCE = 30.0  # seconds a waiting step may take before the test gives up (a bound, not a timing)


async def test_the_hosts_lease_renewal_round_waits_for_no_workspaces_stuck_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = SharedThreadPool(THREADS, thread_name_prefix="test-io")
    threads = [LoopThread(f"w{i}", pool) for i in range(THREADS + 1)]
    release, blocked = threading.Event(), threading.Semaphore(0)
    renewed = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stuck() -> None:
        blocked.release()
        release.wait(2 * PATIENCE)  # the test's own waits give up first

    async def hang() -> None:
        await asyncio.to_thread(stuck)

    def renew_leases(directory: object, renewals: list[Any]) -> list[bool]:
        loop.call_soon_threadsafe(renewed.set)
        return [True] * len(renewals)

    monkeypatch.setattr(hosts, "renew_leases", renew_leases)
    host = OwnerHost.__new__(OwnerHost)  # what the round reads of its host
    held = types.SimpleNamespace(
        name="n", owner_id="o", epoch=1, _lease_ttl=1.0, _last_active=0.0, _left=False, _closing=False
    )
    host.config = types.SimpleNamespace(lock_lease=0.15)
    host.loop, host._executor, host.directory, host._open = loop, pool, object(), {"n": held}
    try:
        hanging = [asyncio.ensure_future(thread.run(hang())) for thread in threads]
        for _ in range(THREADS):
            assert await asyncio.to_thread(blocked.acquire, True, PATIENCE), "a workspace's call never ran"
        renewing = asyncio.ensure_future(host._renew_leases())
        try:
            await asyncio.wait({asyncio.ensure_future(renewed.wait())}, timeout=PATIENCE)
            assert renewed.is_set(), f"the renewal round waited behind {len(threads)} stuck workspaces"
            assert not any(call.done() for call in hanging)  # renewed while they still hang
        finally:
            renewing.cancel()
        release.set()
        await asyncio.wait_for(asyncio.gather(*hanging), PATIENCE)
    finally:
        release.set()
        for thread in threads:
            thread.stop()
            thread.thread.join(10)
        pool.close()
