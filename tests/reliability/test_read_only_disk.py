"""A data directory on a disk mounted read-only for a while (an admin's remount, a filesystem the kernel
made read-only), then writable again: a clear EROFS meanwhile, nothing lost, everything back after.

Before: an owner host started during the outage opened the embedded directory, SQLite opened it
read-only for good, and the host refused every lease with EROFS for as long as it lived (it never
idles out while clients keep calling), though the disk was writable again.

Also a data directory whose disk went away altogether (unmounted under the running cluster).
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from owner_models import kill_awake_owners, kill_owner

import computer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def mount_tmpfs(path: Path) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)], check=True)


def unmount(path: Path, *, check: bool = True) -> None:
    subprocess.run(["umount", "-l", str(path)], check=check, capture_output=True)


def remount(disk: Path, flag: str) -> None:
    """``mount -o remount,<flag>``; going read-only waits (bounded) for files written a moment ago to
    be closed by processes that are exiting (a killed owner)."""
    for _ in range(100):
        done = subprocess.run(["mount", "-o", f"remount,{flag}", str(disk)], capture_output=True, text=True)
        if done.returncode == 0:
            return
        time.sleep(0.1)  # a killed process still closing its files: nothing to await
    raise AssertionError(f"remount,{flag} failed: {done.stderr}")


async def test_a_data_directory_read_only_for_a_while_is_erofs_then_works_again(
    ray_session: Any, disk: Path, tmp_path: Path
) -> None:
    conf = computer.init(data_dir=disk / "data")
    ws = await computer.get_workspace("ro-disk-a")
    try:
        await ws.fs.write_file("/kept", b"kept")
        await kill_owner(ws._conn.handle)  # no process has a file of the disk open for writing
        remount(disk, "ro")
        try:
            with pytest.raises(OSError) as read:
                await ws.fs.read_file("/kept")  # its owner cannot take its lease: said, not hidden
            assert read.value.errno == errno.EROFS, repr(read.value)
            with pytest.raises(OSError) as new:
                async with computer.get_workspace("ro-disk-b"):
                    pass
            assert new.value.errno == errno.EROFS, repr(new.value)  # was EIO "unable to open"
        finally:
            remount(disk, "rw")
        assert await ws.fs.read_file("/kept") == b"kept"
        await ws.fs.write_file("/after", b"after")
        async with computer.get_workspace("ro-disk-b") as other:
            await other.fs.write_file("/b", b"b")
            assert await other.fs.read_file("/b") == b"b"
        await kill_owner(ws._conn.handle)
        async with computer.get_workspace("ro-disk-a") as again:
            assert await again.fs.read_file("/kept") == b"kept"
            assert await again.fs.read_file("/after") == b"after"
    finally:
        await ws.close()
        await kill_awake_owners(("ro-disk-a", "ro-disk-b"), conf)
        computer.init(data_dir=tmp_path / "data")


async def test_a_data_directory_whose_disk_is_gone_is_estale_never_new_and_empty(
    ray_session: Any, tmp_path: Path
) -> None:
    """The disk holding the data directory goes away under the running cluster (unmounted). Before: the
    next process made an empty ``directory.sqlite`` on the disk below, knew no workspace, and every
    name opened as a new, empty workspace (the client saw its files gone; what it wrote went to the
    disk below, lost again once the disk came back). Now the directory made anew is refused (ESTALE),
    on every call, by every process."""
    import errno

    data = tmp_path / "data"
    data.mkdir()
    mount_tmpfs(data)
    conf = computer.init(data_dir=data)
    try:
        ws = await computer.get_workspace("gone-disk-a")
        await ws.fs.write_file("/kept", b"kept")
        await kill_owner(ws._conn.handle)
        unmount(data)  # lazily, as a lost disk: the processes holding its files keep them
        for _ in range(2):  # a client's next call, then a new client: the same answer, nothing made
            with pytest.raises(OSError) as gone:
                await ws.fs.read_file("/kept")
            assert gone.value.errno == errno.ESTALE, repr(gone.value)
            assert "not mounted" in str(gone.value)
        with pytest.raises(OSError) as new:
            await computer.get_workspace("gone-disk-a")
        assert new.value.errno == errno.ESTALE, repr(new.value)
        assert not (data / "workspaces" / "gone-disk-a.sqlite").exists()
        await ws.close()
    finally:
        await kill_awake_owners(("gone-disk-a",), conf)
        unmount(data, check=False)
        computer.init(data_dir=tmp_path / "other")
