"""SIGKILL of an owner's worker process in the middle of a burst of writes and reads.

Writers log what the owner acknowledged; after three kills every acknowledged write is read back
byte for byte. A write cut by a kill fails with the retryable ``WorkspaceUnavailableError`` (EAGAIN)
and nothing else; reads ride through kills by the client's transparent retry.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from typing import Any

import computer
from computer.actors import WorkspaceUnavailableError
from computer.config import Settings

WRITERS = 6
KILLS = 3


async def _sigkill_owner(ws: Any) -> int:
    """Kill the owner's worker process (found through its own stats RPC) and return its pid."""
    pid = int((await ws.handle.stats.remote())["pid"])
    os.kill(pid, signal.SIGKILL)
    return pid


async def _write_retrying(ws: Any, path: str, data: bytes) -> int:
    """Write, retrying on EAGAIN with a short backoff while the owner restarts; returns the failures."""
    failures = 0
    while True:
        try:
            await ws.fs.write_file(path, data)
            return failures
        except WorkspaceUnavailableError:
            failures += 1
            assert failures < 100, "the owner never came back"
            await asyncio.sleep(0.1)


async def test_sigkill_mid_burst_loses_no_acknowledged_write(
    cluster: Settings, name: str, record_property: Any
) -> None:
    acknowledged: dict[str, bytes] = {}
    unavailable = 0
    other_errors: list[BaseException] = []
    reads = 0
    stop = asyncio.Event()
    progress = asyncio.Condition()

    async def acknowledged_at_least(count: int) -> None:
        async with progress:
            await progress.wait_for(lambda: len(acknowledged) >= count)

    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/burst")
        await ws.fs.write_file("/burst/anchor", b"anchor")

        async def writer(w: int) -> None:
            nonlocal unavailable
            i = 0
            while not stop.is_set():
                path, data = f"/burst/w{w}-{i}", f"{w}:{i}:".encode() * (1 + i % 50)
                try:
                    await ws.fs.write_file(path, data)
                    acknowledged[path] = data
                    async with progress:
                        progress.notify_all()
                except WorkspaceUnavailableError as exc:
                    assert exc.errno == errno.EAGAIN
                    unavailable += 1
                except BaseException as exc:  # anything else is a finding
                    other_errors.append(exc)
                i += 1

        async def reader() -> None:
            nonlocal reads
            while not stop.is_set():
                assert await ws.fs.read_file("/burst/anchor") == b"anchor"  # never an error
                reads += 1

        tasks = [asyncio.create_task(writer(w)) for w in range(WRITERS)] + [asyncio.create_task(reader())]
        pids = []
        for _ in range(KILLS):
            await acknowledged_at_least(len(acknowledged) + 30)  # let the burst run against this owner
            pids.append(await _sigkill_owner(ws))
        await acknowledged_at_least(len(acknowledged) + 30)  # and against the last one
        stop.set()
        await asyncio.gather(*tasks)

    assert other_errors == []
    assert len(set(pids)) == KILLS  # each kill hit a fresh owner process
    async with computer.get_workspace(name) as again:
        stored = set(await again.fs.ls("/burst"))
        lost = [
            p for p, data in acknowledged.items() if p not in stored or await again.fs.read_file(p) != data
        ]
        assert (await again.handle.stats.remote())["epoch"] >= KILLS + 1
    assert lost == []
    assert reads > 0
    record_property("owner_sigkills", KILLS)
    record_property("acknowledged_writes", len(acknowledged))
    record_property("lost_writes", len(lost))
    record_property("retryable_errors", unavailable)


async def test_a_retried_write_after_eagain_lands_exactly_once(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", b"before")
        await _sigkill_owner(ws)
        await _write_retrying(ws, "/f", b"after")  # only EAGAIN may interrupt it
        assert await ws.fs.read_file("/f") == b"after"
        assert await ws.fs.ls("/") == ["/f"]


async def test_sigkill_mid_upload_and_tree_rename_leaves_each_whole_for_two_racing_clients(
    cluster: Settings, name: str
) -> None:
    """SIGKILL of the owner's process while a 24 MiB upload and a rename of a 200-file tree run, then
    two new clients at once: one owner (the same epoch and owner id for both), the big file absent or
    whole, the tree wholly at its old or new place, an acknowledged call applied."""
    from owner_models import owner_process, process_pid

    big = os.urandom(24 << 20)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/t/a/b", recursive=True)
        for i in range(200):
            await ws.fs.write_file(f"/t/a/b/f{i}", b"%d" % i)
        pid = await process_pid(owner_process(ws._conn.handle))
        upload = asyncio.create_task(ws.fs.write_file("/big", big))
        rename = asyncio.create_task(ws.fs.rename("/t", "/u"))
        await asyncio.sleep(0.2)  # under way (where exactly does not matter: every point must hold)
        os.kill(pid, signal.SIGKILL)
        outcomes = await asyncio.gather(upload, rename, return_exceptions=True)
        for outcome in outcomes:  # acknowledged, or the documented retryable error
            assert outcome is None or isinstance(outcome, WorkspaceUnavailableError), repr(outcome)
    first, second = await asyncio.gather(computer.get_workspace(name), computer.get_workspace(name))
    try:
        assert (first._conn.epoch, first._conn.owner_id) == (second._conn.epoch, second._conn.owner_id)
        if await first.fs.exists("/big"):
            assert await second.fs.read_file("/big") == big
        else:
            assert outcomes[0] is not None
        old, new = await first.fs.exists("/t"), await second.fs.exists("/u")
        assert old != new
        assert len(await first.fs.readdir("/u/a/b" if new else "/t/a/b")) == 200
        assert new or outcomes[1] is not None
    finally:
        await first.close()
        await second.close()
