"""Cluster faults many workers hit on one workspace, not covered elsewhere: worker processes racing to
wake a hibernated workspace; a client's event loop blocked past its lock lease; ``delete_workspace``
racing another worker's writes. All on the shared Ray session (``ray_session``)."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from owner_models import owner_awake

import computer
from computer.actors import open_directory
from computer.actors.naming import workspace_file

_DEADLINE = 60.0  # seconds any single wait of these tests may take


def _epoch(config: Any, name: str) -> int:
    """The epoch of ``name``'s latest activation, read in the directory (wakes nothing)."""
    directory = open_directory(config)
    try:
        record = directory.get(name)
    finally:
        directory.close()
    assert record is not None
    return record.epoch


@ray.remote(num_cpus=0, max_retries=0)
def _wake_and_write(name: str, index: int) -> tuple[str, bytes]:
    async def go() -> tuple[str, bytes]:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file(f"/w{index}", b"%d" % index)
            return str(ws._conn.owner_id), await ws.fs.read_file("/kept")

    return asyncio.run(go())


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_racing_wakes_of_a_hibernated_workspace_make_one_owner_with_its_data(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    """Six worker processes call ``get_workspace`` on one name at once while its owner is asleep (its
    process gone): one owner wakes (one owner id, epoch 2), it opens the existing file (every racer reads
    the byte written before the sleep: no empty workspace invented), and every racer's write lands.

    ``hibernate_after`` is 5 s, the window in which the racers count as racing: a racer started later
    than that after the others' calls rightly finds the owner asleep again and wakes another one. It was
    0.5 s, which six worker processes starting on a loaded machine could overrun (two owners), as could
    the final look (epoch 3, or a dedicated owner gone when asked). The epochs are read in the directory.
    """
    config = computer.init(
        data_dir=tmp_path / "data", owners=owners, hibernate_after=5.0, shell_pool_size=0, python_pool_size=0
    )
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"before the sleep")
        for _ in range(int(_DEADLINE / 0.05)):
            if not await owner_awake(name, config):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"{name} did not hibernate")
        slept = _epoch(config, name)
        racers = 6
        answers = await asyncio.wait_for(
            asyncio.gather(*[_wake_and_write.remote(name, i) for i in range(racers)]), _DEADLINE
        )
        assert len({owner for owner, _ in answers}) == 1  # one owner served them all
        assert {kept for _, kept in answers} == {b"before the sleep"}
        assert _epoch(config, name) == slept + 1  # one activation after the sleep: no second owner opened it
        async with computer.get_workspace(name) as ws:
            assert sorted(await ws.fs.ls("/")) == sorted(["/kept", *(f"/w{i}" for i in range(racers))])
        path = workspace_file(config, name)
        assert [p.name for p in path.parent.iterdir() if p.name == path.name] == [path.name]
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_a_client_whose_loop_is_blocked_past_its_lease_is_fenced_and_frees_the_lock(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """A holder whose event loop is blocked (a synchronous call) longer than ``lock_lease``: its renewal
    cannot run, the lease expires, and once the loop runs again its write under the lost lease is
    refused (ENOLCK, nothing written) rather than renewed back to life; leaving the block leaves
    nothing held, and the lock is at once free for another worker. Decided, not a defect: a lease
    is a promise of the holder's liveness, and a blocked loop is not live."""
    computer.init(data_dir=tmp_path / "data", lock_lease=1.0)
    try:
        async with computer.get_workspace(name) as ws, computer.get_workspace(name) as other:
            await ws.fs.write_file("/f", b"first")
            with pytest.raises(OSError) as lost:
                async with ws.locks.hold(["/f"]):
                    time.sleep(2.5)  # noqa: ASYNC251 (the point: the loop blocked for 2.5 lease lengths)
                    await ws.fs.write_file("/f", b"late")
            assert lost.value.errno == errno.ENOLCK
            assert await ws.fs.read_file("/f") == b"first"
            async with asyncio.timeout(_DEADLINE), other.locks.hold(["/f"]):
                await other.fs.write_file("/f", b"next holder")
            assert await ws.fs.read_file("/f") == b"next holder"
            assert (await ws.handle.stats.remote())["locks_held"] == 0
    finally:
        computer.init(data_dir=tmp_path / "data")


@ray.remote(num_cpus=0, max_retries=0)
def _keep_writing(name: str, count: int) -> list[tuple[str, float, float, str]]:
    """Write ``/k<i>`` for ``i < count`` through one client: (path, start, end, outcome) per write,
    times on the machine's monotonic clock (the same in every process)."""

    async def go() -> list[tuple[str, float, float, str]]:
        seen: list[tuple[str, float, float, str]] = []
        async with computer.get_workspace(name) as ws:
            for i in range(count):
                path = f"/k{i}"
                start = time.monotonic()
                try:
                    await asyncio.wait_for(ws.fs.write_file(path, b"%d" % i), _DEADLINE)
                    outcome = "ok"
                except Exception as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
                seen.append((path, start, time.monotonic(), outcome))
                await asyncio.sleep(0.01)
        return seen

    return asyncio.run(go())


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_delete_racing_another_workers_writes_loses_only_what_came_before_it(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    """A worker writes one file after another through its client while the driver deletes the
    workspace (retrying while it is busy, EBUSY). Every write acknowledged that started after the
    deletion returned is in the workspace afterwards (the writer's client followed the workspace into
    its new life, never writing into the deleted file), nothing there was not acknowledged, and the
    writes that finished before the deletion began are gone with it. A write meeting the deletion
    may fail EBUSY ("being deleted"; seen with owner hosts), then nothing of it is written."""
    computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=0, python_pool_size=0)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/seed", b"seed")
        writer = _keep_writing.remote(name, 150)
        await asyncio.sleep(0.3)
        deleted_from = time.monotonic()
        for _ in range(int(_DEADLINE / 0.02)):
            try:
                await asyncio.wait_for(computer.delete_workspace(name), _DEADLINE)
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
            deleted_from = time.monotonic()
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the deletion was refused as busy throughout")
        deleted_at = time.monotonic()
        seen = await asyncio.wait_for(writer, _DEADLINE * 3)
        failures = [row for row in seen if row[3] != "ok"]
        acknowledged = {path for path, _, _, outcome in seen if outcome == "ok"}
        after = {path for path, start, _, outcome in seen if outcome == "ok" and start > deleted_at}
        before = {path for path, _, end, outcome in seen if outcome == "ok" and end < deleted_from}
        assert after, f"no write started after the deletion: {seen[-3:]}"
        # A write that meets the deletion's lease (an owner host asked to open the name meanwhile) is
        # refused EBUSY "being deleted" (SPEC: placement answers so while the lease lives), nothing
        # written; no other failure.
        assert all("being deleted" in outcome for *_, outcome in failures), failures
        async with computer.get_workspace(name) as ws:
            present = set(await ws.fs.ls("/"))
        assert "/seed" not in present
        assert after <= present, (sorted(after - present), failures)
        assert present <= acknowledged, sorted(present - acknowledged)
        assert not (before & present), sorted(before & present)
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_a_pool_worker_killed_while_streaming_to_a_client_that_then_cancels(
    cluster: Any, name: str
) -> None:
    """A client streams a run's snapshots; the run's pool worker is SIGKILLed mid-stream; the client
    then stops reading (its task cancelled) and kills the run. Nothing hangs: the kill answers, the
    result says the worker died, the owner is left with no stream and no run going (either would keep
    it awake for ever), and the next run of the workspace completes."""
    from pools.pool_helpers import worker_stats

    async with computer.get_workspace(name) as ws:
        handle = await ws.runtime.exec("i=0; while true; do echo line $i; i=$((i+1)); sleep 0.02; done")
        started = asyncio.Event()

        async def read() -> None:
            async for snapshot in handle:
                if "line 3" in snapshot.stdout:
                    started.set()

        reader = asyncio.create_task(read())
        await asyncio.wait_for(started.wait(), _DEADLINE)
        running = [
            s
            for s in await worker_stats("shell")
            if any(key.endswith(f"/{handle.id}") for key in s["running"])
        ]
        assert len(running) == 1
        os.kill(running[0]["pid"], signal.SIGKILL)
        await asyncio.sleep(0.05)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await asyncio.wait_for(handle.kill(), _DEADLINE)
        result = await asyncio.wait_for(handle.result(), _DEADLINE)
        assert result.status in ("failed", "cancelled"), result
        for _ in range(int(_DEADLINE / 0.05)):
            stats = await ws.handle.stats.remote()
            if stats["streams"] == 0 and not stats["runs"]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the owner keeps a stream or a run: {stats}")
        after = await asyncio.wait_for((await ws.runtime.exec("echo next")).result(), _DEADLINE)
        assert (after.status, after.stdout) == ("completed", "next\n")


@pytest.mark.parametrize("delay", [0.0, 0.3, 1.0])
async def test_an_owner_killed_while_it_applies_a_big_pull_keeps_whole_files_and_a_failed_record(
    cluster: Any, name: str, delay: float
) -> None:
    """A run writes 4,000 files; the owner's process is SIGKILLed as the run ends (its pull being
    committed page by page, ``commit_batch`` after ``commit_batch``). The next owner opens a
    consistent store: every file there is whole (its content is its name), and the run's journal
    record says it failed with its owner (``owner restarted``), not ``running`` for ever. Seen: killed
    at once, 3,152 of the 4,000 files had landed and the record said ``pulled=[]``, nothing more: which
    files of a cut pull landed is not recorded (the record is written at the start and the end only),
    and now its error says part of the run may have been pulled, naming paths changed since it
    started (``tests/reliability/test_cut_pull_journal.py`` kills the owner right after a page)."""
    count = 4000
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        handle = await ws.runtime.exec(f"for i in $(seq 1 {count}); do echo f$i > f$i; done; echo written")
        async for snapshot in handle:
            if "written" in snapshot.stdout:
                break
        await asyncio.sleep(delay)
        pid = (await ws.handle.stats.remote())["pid"]
        os.kill(pid, signal.SIGKILL)
        run = handle.id
    async with computer.get_workspace(name) as ws:
        names = [p for p in await ws.fs.ls("/workspace") if p.startswith("/workspace/f")]
        for path in names:
            assert await ws.fs.read_file(path) == path.rsplit("/", 1)[1].encode() + b"\n", path
        result = await asyncio.wait_for((await ws.runtime.get_exec(run)).result(), _DEADLINE)
        assert result.status in ("failed", "completed"), result
        if result.status == "failed":
            assert (result.error or "").startswith("owner restarted"), result
            if names:  # part of the pull landed: the record says so (``computer/runtime/_journal.py``)
                assert "may have been pulled" in (result.error or ""), result
        else:
            assert len(names) == count


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_calls_racing_an_owner_as_it_goes_to_sleep_lose_nothing(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    """Rounds of three worker processes calling at once, each round about when the owner hibernates
    (``hibernate_after`` 0.3 s, the gaps around it): a call that meets the owner closing goes to the
    next one; every write lands, the first byte is read by all, and the workspace stays one file."""
    config = computer.init(
        data_dir=tmp_path / "data", owners=owners, hibernate_after=0.3, shell_pool_size=0, python_pool_size=0
    )
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"before the sleep")
        written = []
        for round_ in range(8):
            await asyncio.sleep(0.25 + 0.03 * round_)
            indexes = [round_ * 10 + i for i in range(3)]
            answers = await asyncio.wait_for(
                asyncio.gather(*[_wake_and_write.remote(name, i) for i in indexes]), _DEADLINE
            )
            assert {kept for _, kept in answers} == {b"before the sleep"}
            written += indexes
        async with computer.get_workspace(name) as ws:
            assert sorted(await ws.fs.ls("/")) == sorted(["/kept", *(f"/w{i}" for i in written)])
        path = workspace_file(config, name)
        assert [p.name for p in path.parent.iterdir() if p.name == path.name] == [path.name]
    finally:
        computer.init(data_dir=tmp_path / "data")


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_a_run_sent_to_an_owner_a_newer_one_fenced_runs_on_the_newer_one(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    """A deletion racing another worker's runs, its deterministic core: a newer owner raised the file's epoch (a deletion, a
    takeover) while this owner's lease renewal has not noticed yet (every ``lock_lease`` / 3, 10 s).
    A run sent to it is not started there: the owner answers "moved", and the run completes on an
    owner that opened the file above the raised epoch. Before, it failed "cannot start: [Errno 30]
    workspace is owned by a newer owner", as did every run sent there until the renewal."""
    from computer.storage import FileSystem

    config = computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=1, python_pool_size=0)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/before", b"a")
            fenced = int((await ws.handle.stats.remote())["epoch"])
            FileSystem.open(
                str(workspace_file(config, name)), fence=fenced + 1
            ).close()  # a newer owner's mark
            for i in range(3):
                handle = await asyncio.wait_for(ws.runtime.exec(f"echo {i} > r{i}"), _DEADLINE)
                result = await asyncio.wait_for(handle.result(), _DEADLINE)
                assert (result.status, result.error) == ("completed", None), result
                assert await ws.fs.read_file(f"/workspace/r{i}") == b"%d\n" % i
            assert await ws.fs.read_file("/before") == b"a"
            assert int((await ws.handle.stats.remote())["epoch"]) > fenced + 1
    finally:
        computer.init(data_dir=tmp_path / "data")


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_a_write_sent_to_an_owner_a_newer_one_fenced_lands_on_the_newer_one(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    """As above for writes, one after another and then at once: none fails "workspace is owned by a
    newer owner" (EROFS), each lands once. Before, the first write sent to the fenced owner failed so
    (its refusal told the owner to stop serving; later calls moved on)."""
    from computer.storage import FileSystem

    config = computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=0, python_pool_size=0)
    try:
        async with computer.get_workspace(name) as ws, computer.get_workspace(name) as other:
            await ws.fs.write_file("/before", b"a")
            fenced = int((await ws.handle.stats.remote())["epoch"])
            FileSystem.open(
                str(workspace_file(config, name)), fence=fenced + 1
            ).close()  # a newer owner's mark
            await asyncio.wait_for(ws.fs.write_file("/first", b"1"), _DEADLINE)
            await asyncio.wait_for(
                asyncio.gather(*[other.fs.write_file(f"/w{i}", b"%d" % i) for i in range(8)]), _DEADLINE
            )
            assert sorted(await ws.fs.ls("/")) == sorted(["/before", "/first", *(f"/w{i}" for i in range(8))])
            assert int((await ws.handle.stats.remote())["epoch"]) > fenced + 1
    finally:
        computer.init(data_dir=tmp_path / "data")
