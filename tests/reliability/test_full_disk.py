"""A real full disk (a small tmpfs with ``size=``), not the per-workspace quota: issue 25 (6).

Before: writes reported ``EIO ... database or disk is full``, a new workspace failed as "owner died
during describe", and the WAL kept 64 MiB per busy workspace, all of it needed again to recover.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from owner_models import kill_awake_owners

import computer
from computer import Workspace
from computer.actors.naming import data_dir_key

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")

SIZE_MIB = 24


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MIB}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, *, leave: int = 0) -> Path:
    """Fill the disk with a plain file, leaving ``leave`` bytes free; returns the file."""
    filler = disk / "filler"
    # Unbuffered: a buffered write the disk took short (another writer took space meanwhile) keeps
    # its tail, and the ``with``'s close flushing it raises ENOSPC out of here.
    with open(filler, "ab", buffering=0) as f:
        while True:
            free = shutil.disk_usage(disk).free - leave
            if free <= 0:
                break
            try:
                f.write(b"\0" * min(free, 1 << 20))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return filler


def assert_enospc(exc: BaseException, path: str | None = None) -> None:
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC, repr(exc)
    if path is not None:
        assert exc.filename == path, (exc.filename, path)


async def test_a_full_disk_is_enospc_and_rm_still_frees_space(small_disk: Path) -> None:
    path = str(small_disk / "ws.sqlite")
    ws = Workspace(path)
    try:
        await ws.fs.write_file("/keep", b"kept")
        await ws.fs.write_file("/big", os.urandom(6 << 20))
        filler = fill(small_disk, leave=1 << 20)
        with pytest.raises(OSError) as full:
            await ws.fs.write_file("/huge", os.urandom(16 << 20))
        assert_enospc(full.value, "/huge")
        assert "no space left" in str(full.value)
        assert not await ws.fs.exists("/huge")
        fill(small_disk)  # now completely full (the failed write's WAL space stays the workspace's)
        await ws.fs.rm("/big")  # freeing space must always be possible
        assert not await ws.fs.exists("/big")
        await ws.fs.write_file("/small", os.urandom(1 << 20))  # the freed pages are used again
        assert await ws.fs.read_file("/keep") == b"kept"
        # A new workspace on the full disk names the real cause.
        fill(small_disk)
        with pytest.raises(OSError) as new:
            Workspace(str(small_disk / "new.sqlite"))
        assert_enospc(new.value, str(small_disk / "new.sqlite"))
        filler.unlink()
    finally:
        await ws.close()


async def test_exec_whose_pull_finds_the_disk_full_returns_a_failed_run(small_disk: Path) -> None:
    from computer.runtime import ShellBackend

    # A sandbox per call: its pull is one transaction, so nothing of the file is stored. (A live
    # sandbox's ticks may store a first part while the program writes, under a loaded machine: the
    # full suite saw a partial file; its run fails the same way.)
    ws = Workspace(str(small_disk / "ws.sqlite"), backends=[ShellBackend(live=False)])
    try:
        await ws.fs.mkdir("/workspace", recursive=True)
        await (await ws.runtime.exec("true")).result()
        fill(small_disk, leave=1 << 20)
        # The pull of what the program wrote cannot be stored: a failed run naming ENOSPC.
        pulled = await (await ws.runtime.exec("head -c 8000000 /dev/urandom > /workspace/big")).result()
        assert pulled.status == "failed" and "No space left" not in pulled.stdout, pulled
        assert "[Errno 28]" in (pulled.error or "") or "/workspace/big" in pulled.skipped_reasons, pulled
        assert not await ws.fs.exists("/workspace/big")
    finally:
        await ws.close()


async def test_exec_whose_journal_cannot_be_written_returns_a_failed_run(small_disk: Path) -> None:
    from computer.runtime import ShellBackend

    ws = Workspace(str(small_disk / "ws.sqlite"), backends=[ShellBackend()])
    try:
        await ws.fs.write_file("/keep", b"kept")
        fill(small_disk)
        handle = await ws.runtime.exec("echo hi")  # its journal cannot be written: a failed run
        result = await handle.result()
        assert result.status == "failed" and "no space left" in result.stderr, result
        assert (await ws.runtime.get_exec(handle.id)).id == handle.id
    finally:
        await ws.close()


async def test_after_a_full_disk_a_few_mib_are_enough_to_recover(small_disk: Path) -> None:
    path = str(small_disk / "ws.sqlite")
    ws = Workspace(path)
    for i in range(24):  # a busy workspace: many small writes
        await ws.fs.write_file(f"/f{i}", os.urandom(256 << 10))
    wal_size = os.stat(path + "-wal").st_size
    assert wal_size <= 8 << 20, wal_size  # the WAL is cut back after checkpoints (it was 64 MiB)
    filler = fill(small_disk)
    with pytest.raises(OSError) as full:
        await ws.fs.write_file("/x", os.urandom(2 << 20))
    assert_enospc(full.value)
    await ws.close()
    # Free 6 MiB only: the owner opens again and takes writes.
    os.truncate(filler, max(os.stat(filler).st_size - (6 << 20), 0))
    ws = Workspace(path)
    try:
        await ws.fs.write_file("/after", os.urandom(1 << 20))
        assert len(await ws.fs.read_file("/f0")) == 256 << 10
    finally:
        await ws.close()


async def test_a_full_disk_through_a_client_and_a_new_workspace(
    ray_session: Any, small_disk: Path, tmp_path: Path
) -> None:
    data = small_disk / "data"
    conf = computer.init(data_dir=data)
    try:
        async with computer.get_workspace("full-disk-a") as ws:
            await ws.fs.write_file("/keep", b"kept")
            await ws.fs.write_file("/big", os.urandom(1 << 20))
            fill(small_disk)
            with pytest.raises(OSError) as full:
                await ws.fs.write_file("/more", os.urandom(3 << 20))
            assert_enospc(full.value, "/more")
            fill(small_disk)
            with pytest.raises(OSError) as upload:  # a chunked upload, too
                await ws.fs.write_file("/more", os.urandom(12 << 20))
            assert_enospc(upload.value)
            fill(small_disk)
            await ws.fs.rm("/big")  # on a full disk: the owner's reserve makes room for it
            assert not await ws.fs.exists("/big")
            assert await ws.fs.read_file("/keep") == b"kept"
        fill(small_disk)
        with pytest.raises(OSError) as new:
            async with computer.get_workspace("full-disk-b"):
                pass
        assert_enospc(new.value)
        assert "owner died" not in str(new.value)
    finally:
        await kill_awake_owners(("full-disk-a", "full-disk-b"), conf)  # its host, or its dedicated actor
        computer.init(data_dir=tmp_path / "data")


async def test_a_new_workspace_refused_on_a_full_disk_leaves_no_file_placement_would_trust(
    ray_session: Any, small_disk: Path, tmp_path: Path
) -> None:
    """Before: the failed creation left an empty ``<name>.sqlite``; placement asks every node whether
    it holds the file (a record lost, a second node), so this node "held" a workspace that never was,
    and every later open of the name came back here."""
    import ray

    from computer.actors._full_nodes import refused_recently
    from computer.actors._nodes import alive_nodes
    from computer.actors._placement import nodes_holding
    from computer.actors.naming import workspace_file

    conf = computer.init(data_dir=small_disk / "data")
    try:
        async with computer.get_workspace("full-disk-c") as ws:  # the data directory and its directory
            await ws.fs.write_file("/keep", b"kept")
        filler = fill(small_disk)
        with pytest.raises(OSError) as new:
            async with computer.get_workspace("full-disk-d"):
                pass
        assert_enospc(new.value)
        path = workspace_file(conf, "full-disk-d")
        assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name)) == []
        assert nodes_holding(conf, "full-disk-d", alive_nodes()) == {}
        # The owner marked its node: a new name goes to another node with room, if any (_full_nodes).
        assert refused_recently(conf, str(ray.get_runtime_context().get_node_id()))
        filler.unlink()
        async with computer.get_workspace("full-disk-d") as ws:  # space back: a new workspace
            await ws.fs.write_file("/f", b"new")
            assert await ws.fs.read_file("/f") == b"new"
        async with computer.get_workspace("full-disk-c") as ws:
            assert await ws.fs.read_file("/keep") == b"kept"
    finally:
        await kill_awake_owners(("full-disk-c", "full-disk-d"), conf)  # its host, or its dedicated actor
        computer.init(data_dir=tmp_path / "data")


async def test_a_workspace_whose_owner_restarted_on_a_full_disk_opens_and_frees_space(
    ray_session: Any, small_disk: Path, tmp_path: Path
) -> None:
    """Before: the new owner could not take its lease nor write its fencing epoch on the full disk, so
    every call, reads and the ``rm`` meant to free space alike, was ENOSPC until someone freed space by
    hand. The reserve the last owner kept beside the file now gives the new one room to open."""
    from owner_models import kill_owner

    conf = computer.init(data_dir=small_disk / "data")
    ws = await computer.get_workspace("full-disk-e")
    try:
        await ws.fs.write_file("/keep", b"kept")
        await ws.fs.write_file("/big", os.urandom(4 << 20))
        fill(small_disk)
        await kill_owner(ws._conn.handle)  # a crash, a host restart, a wake after hibernation
        fill(small_disk)
        assert await ws.fs.read_file("/keep") == b"kept"
        await ws.fs.rm("/big")
        await ws.fs.write_file("/small", b"fits where /big was")
        assert await ws.fs.read_file("/small") == b"fits where /big was"
    finally:
        await ws.close()
        await kill_awake_owners(("full-disk-e",), conf)
        computer.init(data_dir=tmp_path / "data")


async def test_a_new_workspace_refused_on_a_full_disk_gives_its_node_claim_up_an_existing_one_keeps_it(
    ray_session: Any, small_disk: Path, tmp_path: Path
) -> None:
    """With two nodes or more, a hosted owner's new name is created on the node that claimed it first
    (``claim_new_node``). Before: a creation that failed on a full node kept the claim, so every later
    attempt, from any node, was sent back there and failed while another node had room. Now the
    owner host drops the claim once the failure left nothing (no file, no record); a workspace that
    exists keeps it, even when its owner cannot open it (its file out of reach here): it is never
    made anew elsewhere. One node here: the claims are planted as placement makes them;
    ``tests/actors/_full_node.py`` runs it on two nodes."""
    import ray
    from owner_models import kill_owner

    from computer.actors import WorkspaceUnavailableError
    from computer.actors._host_placement import claim_new_node
    from computer.actors.naming import workspace_file
    from computer.actors.raycompat import kv_get

    conf = computer.init(data_dir=small_disk / "data", owners="hosted", shell_pool_size=0, python_pool_size=0)
    here = str(ray.get_runtime_context().get_node_id())
    old, new = "full-disk-f", "full-disk-g"

    def claim(name: str) -> str | None:
        raw = kv_get(f"computer:new:{data_dir_key(conf.data_dir)}:{name}".encode())
        return raw.decode() if raw else None

    try:
        assert claim_new_node(conf, old, here, {here: ""}) == here
        async with computer.get_workspace(old) as ws:
            await ws.fs.write_file("/keep", b"kept")
        await kill_owner(computer.workspace_actor(old))
        away = small_disk / "away"
        away.mkdir()
        files = list(workspace_file(conf, old).parent.glob(f"{old}.sqlite*"))
        for file in files:  # out of reach here (an unmounted data directory), known to the directory
            file.rename(away / file.name)
        assert claim_new_node(conf, new, here, {here: ""}) == here
        filler = fill(small_disk)
        with pytest.raises(WorkspaceUnavailableError, match="missing"):
            async with computer.get_workspace(old):
                pass
        assert claim(old) == here  # it exists: its claim stays
        with pytest.raises(OSError) as unborn:
            async with computer.get_workspace(new):
                pass
        assert_enospc(unborn.value)
        assert claim(new) is None  # nothing of it anywhere: its next attempt is placed anew
        filler.unlink()
        for file in files:
            (away / file.name).rename(file)
        async with computer.get_workspace(old) as ws:
            assert await ws.fs.read_file("/keep") == b"kept"
        async with computer.get_workspace(new) as ws:
            assert await ws.fs.ls("/") == []
        assert claim(new) == here  # the host that created it claimed it first
    finally:
        await kill_awake_owners((old, new), conf)
        computer.init(data_dir=tmp_path / "data")


@pytest.mark.parametrize("left_kib", [8, 16, 32])
def test_a_new_workspace_on_a_disk_with_a_few_kib_left_is_enospc(small_disk: Path, left_kib: int) -> None:
    """Before: with 8-32 KiB left, SQLite could make the file but not grow its ``-shm`` file to 32 KiB
    (``SQLITE_IOERR_SHMSIZE``), and the new workspace failed with "disk I/O error" (EIO); with less
    left, or more, it was ENOSPC. A client sees the same error (an owner's constructor)."""
    filler = fill(small_disk, leave=left_kib << 10)
    path = str(small_disk / "new.sqlite")
    with pytest.raises(OSError) as new:
        Workspace(path)
    assert_enospc(new.value, path)
    filler.unlink()


async def test_a_new_workspace_refused_after_its_file_was_made_leaves_neither_file_nor_record(
    ray_session: Any, small_disk: Path, tmp_path: Path
) -> None:
    """With ~110-150 KiB left, the new name's empty file fits (the owner makes it before its lease)
    but the lease's directory write or the first open does not. Before: that ENOSPC left the empty
    file (stored epoch 0) and no record, so this node "held" the name for placement and kept its
    claim: every later attempt came back to the full node. Now the owner removes what it made."""
    from computer.actors import open_directory
    from computer.actors._nodes import alive_nodes
    from computer.actors._placement import nodes_holding
    from computer.actors.naming import workspace_file

    conf = computer.init(data_dir=small_disk / "data", shell_pool_size=0, python_pool_size=0)
    names = [f"full-disk-left-{kib}" for kib in range(96, 192, 16)]
    refused = 0
    try:
        async with computer.get_workspace("full-disk-seed") as ws:  # the data directory, its directory
            await ws.fs.write_file("/keep", b"kept")
        for kib, name in zip(range(96, 192, 16), names, strict=True):
            filler = fill(small_disk, leave=kib * 1024)
            try:
                async with computer.get_workspace(name) as ws:
                    await ws.fs.write_file("/f", b"made")
            except OSError as exc:
                assert_enospc(exc)
                refused += 1
                path = workspace_file(conf, name)
                assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name)) == []
                directory = open_directory(conf)
                try:
                    assert directory.get(name) is None
                finally:
                    directory.close()
                assert nodes_holding(conf, name, alive_nodes()) == {}
            filler.unlink()
            async with computer.get_workspace(name) as ws:  # space back: made, or a new workspace
                assert await ws.fs.ls("/") in (["/f"], [])
        assert refused  # the window was hit at least once
    finally:
        await kill_awake_owners(("full-disk-seed", *names), conf)
        computer.init(data_dir=tmp_path / "data")
