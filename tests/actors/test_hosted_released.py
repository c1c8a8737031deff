"""Hosted owners: whether a mutation cut by its host's death may be resent, when the host woke the
workspace in place under an epoch the client never heard of (``Connection._released_cleanly``).

A client learns its owner's epoch from ``describe``. A hosted workspace that hibernated inside a live
host is woken there by the next call, under a new epoch, without a "moved" reply: the client's epoch
is then stale. The proof "its owner released the lease itself, so it ran nothing after" must be about
the activation the call could have reached, not the one the client learned.

Each case is built on a real cluster and directory; the call cut by the death is represented by when
it was sent (``sent_at``), handed to the client's own check (``_did_not_run``), as ``request`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from owner_models import death_recorded, kill_owner

import computer
from computer.actors import open_directory
from computer.config import Settings


async def _hibernated(conf: Settings, name: str, epoch: int | None = None) -> int:
    """Until ``name`` released its lease in place (at ``epoch``, when given): the epoch released.
    (A neighbour holding a lock keeps the host up meanwhile.)"""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        directory = open_directory(conf)
        try:
            record = directory.get(name)
        finally:
            directory.close()
        if record is not None and record.state == "hibernating" and record.released_epoch == record.epoch:
            assert epoch is None or record.released_epoch == epoch, (record, epoch)
            return record.released_epoch
        await asyncio.sleep(0.2)
    raise AssertionError(f"{name} did not hibernate at epoch {epoch}")


@asynccontextmanager
async def _woken_in_place(tmp_path: Path, name: str) -> AsyncIterator[tuple[Settings, Any, Any, Any, int]]:
    """A hosted workspace that hibernated (epoch 1 released) and was woken in place by its client's next
    call (epoch 2, yielded last), the client still knowing epoch 1; its neighbour keeps the one host up.

    The waking call opens a stream, left open: it keeps the workspace awake under epoch 2 (yielded, to
    be closed with ``aclose`` when the test needs it to hibernate again). Before, the tests relied on
    less than a second (``hibernate_after``) passing between the wake and the host's death: a stall of
    0.5 s on a loaded machine let it hibernate again first, and the case under test was another one.
    Likewise the neighbour holds a lock (it was kept awake by a stat every 0.2 s, which a stalled loop
    could leave idle for a second: the host then left with both), and the epochs are read in the
    directory: a second's stall before the first writes lets the workspace sleep and wake silently
    once more (released 2, woken 3, the client knowing 1), the same case one epoch later."""
    conf = computer.init(
        data_dir=tmp_path / "data",
        owners="hosted",
        owner_hosts_per_node=1,
        hibernate_after=1.0,
        shell_pool_size=0,
        python_pool_size=0,
    )
    try:
        async with (
            computer.get_workspace(f"{name}-other") as busy,
            computer.get_workspace(name) as idle,
            busy.locks.hold(["/keep-awake"]),
        ):
            await idle.fs.write_file("/f", b"one")
            await idle.fs.write_file("/big", b"x" * (8 * 1024 * 1024))  # streamed in pieces
            assert idle._conn.epoch == 1
            released = await _hibernated(conf, name)  # 1 (2 after a stall before the writes)
            awake = idle.fs.stream("/big")
            await anext(awake)  # woken in place, under the next epoch
            try:
                assert await idle.fs.read_file("/f") == b"one"
                assert (await idle.handle.stats.remote())["epoch"] == released + 1
                assert idle._conn.epoch == 1  # the client was not told
                yield conf, busy, idle, awake, released + 1
            finally:
                with contextlib.suppress(Exception):
                    await awake.aclose()
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_a_call_that_may_have_run_on_a_later_activation_is_never_resent(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """The host is killed while a mutation to the workspace it woke again (epoch 2) is in flight. The
    directory says epoch 1 was released cleanly, the epoch the client knows; yet the call may have run
    under epoch 2. Before, that was taken for "it did not run" and the mutation was sent again (applied
    twice, for a mutation without an idempotency key: a tool, a run, an upload's commit)."""
    async with _woken_in_place(tmp_path, name) as (_, _, idle, _, _):
        handle = idle._conn.handle
        sent_at = time.time()  # the call went out to the live host, then it died
        await asyncio.sleep(0.5)  # well past the margin: the death is after the send
        await kill_owner(handle)
        assert not await idle._conn._did_not_run(handle, sent_at, keyed=False)


async def test_a_call_sent_after_a_hosted_release_is_resent_though_the_client_knew_an_older_epoch(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """The woken workspace hibernated again (epoch 2 released) in its host, which then died with a call
    to it on the way. The host never woke it again (that would have taken epoch 3 first), so the call
    ran nothing: it is sent again. Before, the released epoch (2) was compared with the client's stale
    one (1), and the call failed "unknown outcome" though it provably never ran."""
    async with _woken_in_place(tmp_path, name) as (conf, _, idle, awake, woken):
        await awake.aclose()
        await _hibernated(conf, name, woken)
        handle = idle._conn.handle
        sent_at = time.time()  # the call went out after the release, then the host died
        await asyncio.sleep(0.5)
        await kill_owner(handle)
        assert await idle._conn._did_not_run(handle, sent_at, keyed=False)
        assert await idle.fs.read_file("/f") == b"one"  # the resend's path: a new owner answers


async def test_a_host_killed_holding_the_epoch_its_client_knows_proves_nothing(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """Pinned: a host that died holding the workspace under the epoch its client knows (no release)
    proves nothing for a call sent before its death: "unknown outcome" stays."""
    async with _woken_in_place(tmp_path, name) as (_, _, idle, _, woken):
        await idle._conn._reresolve(idle._conn.handle)  # learns epoch 2
        assert idle._conn.epoch == woken
        handle = idle._conn.handle
        sent_at = time.time()
        await asyncio.sleep(0.5)
        await kill_owner(handle)
        assert not await idle._conn._did_not_run(handle, sent_at, keyed=False)


async def test_a_call_sent_after_its_host_died_is_resent_though_the_client_knew_an_older_epoch(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """Pinned: a call sent to a host already dead (killed for good) never ran, whatever epoch the
    client knows: Ray's actor table dates the death before the send, and the call is sent again."""
    async with _woken_in_place(tmp_path, name) as (_, _, idle, _, _):
        handle = idle._conn.handle
        await kill_owner(handle)
        await death_recorded(handle)  # dated past the margin: the send is after the death
        sent_at = time.time()
        assert await idle._conn._did_not_run(handle, sent_at, keyed=False)
        assert await idle.fs.read_file("/f") == b"one"
