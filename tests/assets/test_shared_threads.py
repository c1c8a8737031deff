"""Share links published by many workspaces of one process (an owner host: each workspace on a loop
thread of its own, the loops sharing one default thread pool) must not queue behind each other: the
store's blocking file and SQLite work once went to that pool (``asyncio.to_thread``), and a few
shares stuck on a slow disk held every thread of it, so a neighbour's share waited until they ended
(the host's lease renewal round too: ``tests/actors/test_host_threads.py``). Each blocked share here holds one thread
until the test lets it go; what the neighbour gets done meanwhile is observed with events, never
with timings."""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import computer
from computer.actors._loop_thread import LoopThread, SharedThreadPool
from computer.assets import SqliteAssetStore

THREADS = 2  # the shared pool (an owner host has 16: the number does not matter, only that N >= it)
HOSTILE = 3
STUCK = b"STUCK"  # a file whose bytes start so is written to a disk that does not answer (below)
PATIENCE = 30.0  # seconds a waiting step may take before the test gives up (a bound, not a timing)


class _StuckDisk:
    """``open`` for the blob directory: a write of bytes starting with ``STUCK`` blocks until
    ``release`` (a slow or wedged disk), counting the writes blocked."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.blocked = threading.Semaphore(0)

    def open(self, *args: Any, **kwargs: Any) -> Any:
        handle = builtins.open(*args, **kwargs)
        mode = str(args[1] if len(args) > 1 else kwargs.get("mode", "r"))
        if "w" not in mode and "x" not in mode:
            return handle
        disk = self

        class Stuck:
            def write(self, data: bytes) -> int:
                if bytes(data[: len(STUCK)]) == STUCK:
                    disk.blocked.release()
                    disk.release.wait(2 * PATIENCE)  # the test's own waits give up first
                return handle.write(data)

            def __getattr__(self, name: str) -> Any:
                return getattr(handle, name)

        return Stuck()


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[_StuckDisk]:
    import computer.assets._blobs as blobs

    stuck = _StuckDisk()
    monkeypatch.setattr(blobs, "open", stuck.open, raising=False)
    yield stuck
    stuck.release.set()


async def _open_workspace(path: Path, store: SqliteAssetStore, content: bytes) -> computer.Workspace:
    ws = computer.Workspace(str(path), assets=store)
    await ws.__aenter__()
    await ws.fs.mkdir("/workspace")
    await ws.fs.write_file("/workspace/report.bin", content)
    return ws


async def _blocked(disk: _StuckDisk, count: int) -> None:
    """Until ``count`` writes are stuck on the disk (each holds the thread that made it)."""
    for _ in range(count):
        assert await asyncio.to_thread(disk.blocked.acquire, True, PATIENCE), "a stuck share never wrote"


async def test_shares_stuck_on_a_slow_disk_hold_no_neighbours_share(tmp_path: Path, disk: _StuckDisk) -> None:
    """N workspaces' shares stuck writing (N above the shared pool's threads): a neighbour's share
    is stored and readable while they still hang; theirs complete once the disk answers."""
    pool = SharedThreadPool(THREADS, thread_name_prefix="test-io")
    store = SqliteAssetStore(tmp_path / "assets")
    threads = [LoopThread(f"w{i}", pool) for i in range(HOSTILE + 1)]
    workspaces: list[computer.Workspace] = []
    try:
        for i, thread in enumerate(threads):
            content = (STUCK if i < HOSTILE else b"fine") + bytes(range(256)) * 64
            workspaces.append(await thread.run(_open_workspace(tmp_path / f"w{i}.db", store, content)))
        shares = [
            asyncio.ensure_future(threads[i].run(workspaces[i].assets.share("/workspace/report.bin")))
            for i in range(HOSTILE)
        ]
        await _blocked(disk, THREADS)  # the shared pool's every thread would be theirs now
        order: list[str] = []
        neighbour = threads[HOSTILE]
        sharing = asyncio.ensure_future(
            neighbour.run(workspaces[HOSTILE].assets.share("/workspace/report.bin"))
        )
        await asyncio.wait({sharing}, timeout=PATIENCE)
        assert sharing.done(), f"the neighbour's share waited behind {HOSTILE} stuck ones"
        url = sharing.result()
        order.append("neighbour shared")
        base = workspaces[HOSTILE].assets.base_url  # (may carry a path: the settings' base URL)
        assert url.startswith(base + "/"), url
        key = unquote(url[len(base) + 1 :])
        record = await neighbour.run(store.get(key))
        assert record is not None and record.size == 4 + 256 * 64
        order.append("neighbour read")
        assert not any(share.done() for share in shares)
        disk.release.set()
        hostile = await asyncio.wait_for(asyncio.gather(*shares), PATIENCE)
        order.append("stuck shares done")
        assert order == ["neighbour shared", "neighbour read", "stuck shares done"]
        assert len(set(hostile)) == HOSTILE
    finally:
        disk.release.set()
        for thread, ws in zip(threads, workspaces, strict=False):
            await thread.run(ws.__aexit__(None, None, None))
        for thread in threads:
            thread.stop()
            thread.thread.join(10)
        await store.close()
        pool.close()
