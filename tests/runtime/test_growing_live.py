"""A large file a live program keeps writing, deferred by the ticks (``_growing``), meets the workspace:
writes, removals and renames through ``ws.fs`` keep the pull's conflict rules (the workspace's version
wins and ``skipped`` says so; a rename follows the program's open file, nothing of it lost), the
workspace's end and reopen, and hard links (never spaced out). The spacing itself, on a mirror with
its own clock: test_growing.py. Every wait is for an event (a count reached), bounded at 30 s+."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend, _growing
from computer.runtime._mirror import Mirror

from ._live_support import eventually

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")

BLOCK = 65536


def writer(name: str = "big.log", link: str = "") -> str:
    """A program appending 64 KiB blocks (block i all of byte i % 251) every 20 ms to ``name`` until
    ``stop`` exists (``link``: a second name of the file, made after its first block); prints the count."""
    ln = f"    os.link('{name}', '{link}')\n" if link else ""
    return (
        'python3 -c "import os, time\n'
        f"with open('{name}', 'ab') as f:\n"
        "    f.write(bytes([0]) * 65536); f.flush()\n"
        f"{ln}"
        "    i = 1\n"
        "    while not os.path.exists('stop') and i < 5000:\n"
        "        f.write(bytes([i % 251]) * 65536); f.flush(); i += 1; time.sleep(0.02)\n"
        'print(i)"'
    )


def starts_with(path: Path, head: bytes) -> bool:
    with open(path, "rb") as f:
        return f.read(len(head)) == head


def blocks(count: int) -> bytes:
    return b"".join(bytes([i % 251]) * BLOCK for i in range(count))


@pytest.fixture(autouse=True)
def spaced_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once spaced out, the file waits for good: every tick after that leaves it out (with the real
    waits, a change lands in a tick that pulls the file now and then, by timing alone)."""
    monkeypatch.setattr(_growing, "FIRST_WAIT", 3600.0)
    monkeypatch.setattr(_growing, "MAX_WAIT", 3600.0)


@pytest.fixture
async def live() -> AsyncIterator[tuple[computer.Workspace, ShellBackend]]:
    backend = ShellBackend(live=True)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        yield ws, backend


def mirror_of(ws: computer.Workspace, backend: ShellBackend) -> Mirror:
    return backend._lives._live[ws.fs.instance].mirror  # type: ignore[no-any-return]


async def deferring(ws: computer.Workspace, backend: ShellBackend, times: int = 2) -> Mirror:
    """Wait until the live sandbox's ticks left the growing file out ``times`` times (each tick from
    now on: ``spaced_for_good``)."""

    async def spaced() -> bool:
        live = backend._lives._live.get(ws.fs.instance)
        return live is not None and live.mirror.growing.deferred >= times

    await eventually(spaced, within=60.0)
    return mirror_of(ws, backend)


async def sandbox_sha(ws: computer.Workspace, name: str) -> str:
    """What the live sandbox holds at ``name`` (its sha256, or ``absent``)."""
    result = await (
        await ws.runtime.exec(f"if [ -e {name} ]; then sha256sum < {name}; else echo absent; fi")
    ).result()
    return str(result.stdout).split()[0]


async def workspace_sha(ws: computer.Workspace, name: str) -> str:
    path = f"/workspace/{name}"
    if not await ws.fs.exists(path):
        return "absent"
    return hashlib.sha256(await ws.fs.read_file(path)).hexdigest()


@pytest.mark.parametrize("op", ["write", "remove", "rename", "rename-dir"])
async def test_a_workspace_change_to_a_deferred_file_keeps_the_conflict_rules(
    live: tuple[computer.Workspace, ShellBackend], op: str
) -> None:
    """Before (s65): a write left ``skipped`` empty, and a rename dropped the program's file and fetched
    the workspace's older copy, the program writing on into an unlinked file (97 of 455 blocks lost)."""
    ws, backend = live
    handle = await ws.runtime.exec("mkdir d && " + writer("d/big.log" if op == "rename-dir" else "big.log"))
    await deferring(ws, backend)
    if op == "write":
        await ws.fs.write_file("/workspace/big.log", b"WORKSPACE\n")
        await ws.fs.write_file("/workspace/other.txt", b"a different path\n")
    elif op == "remove":
        await ws.fs.rm("/workspace/big.log")
    elif op == "rename":
        await ws.fs.rename("/workspace/big.log", "/workspace/moved.log")
    else:  # a directory above it
        await ws.fs.rename("/workspace/d", "/workspace/e")
    directory = mirror_of(ws, backend).directory

    async def pushed() -> bool:  # the tick that met the change is past; the program still writes
        if op == "write":
            return starts_with(directory / "big.log", b"WORKSPACE\n")
        if op == "remove":
            return not (directory / "big.log").exists()
        return (directory / ("moved.log" if op == "rename" else "e")).exists()

    await eventually(pushed, within=60.0)
    await ws.fs.write_file("/workspace/stop", "")
    result = await handle.result()
    assert result.status == "completed", result
    written = int(result.stdout)
    if op.startswith("rename"):  # the program's file followed the rename: all it wrote is there
        old, new = ("big.log", "moved.log") if op == "rename" else ("d/big.log", "e/big.log")
        assert not await ws.fs.exists(f"/workspace/{old}")
        assert await workspace_sha(ws, new) == hashlib.sha256(blocks(written)).hexdigest()
        assert not result.skipped, result.skipped
    else:  # the workspace's version kept, and said so
        assert "/workspace/big.log" in result.skipped, result.skipped
        if op == "write":
            data = await ws.fs.read_file("/workspace/big.log")
            assert data.startswith(b"WORKSPACE\n"), data[:20]
            assert await ws.fs.read_text("/workspace/other.txt") == "a different path\n"
        else:
            assert not await ws.fs.exists("/workspace/big.log")
    for name in ("big.log", "moved.log", "d/big.log", "e/big.log"):  # the mirror and the workspace agree
        assert await sandbox_sha(ws, name) == await workspace_sha(ws, name), name


async def test_a_deferred_file_is_whole_after_the_workspace_ends_and_in_the_next_sandbox(
    tmp_path: Path,
) -> None:
    """The live sandbox ends with its workspace (its writer killed): its final pull takes the deferred
    file whole, and a fresh sandbox after the reopen starts from it."""
    db = f"{tmp_path}/ws.db"
    backend = ShellBackend(live=True)
    async with computer.Workspace(db, backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await (await ws.runtime.exec(f"setsid {writer()} > /dev/null 2>&1 &")).result()
        assert started.status == "completed"
        await deferring(ws, backend)
        await ws.fs.write_file("/workspace/other.txt", b"a different path\n")  # a push meanwhile
        await deferring(ws, backend, times=mirror_of(ws, backend).growing.deferred + 2)
    async with computer.Workspace(db, backends=[ShellBackend(live=True)]) as ws:
        data = await ws.fs.read_file("/workspace/big.log")
        assert len(data) % BLOCK == 0 and len(data) >= 8 * BLOCK
        assert data == blocks(len(data) // BLOCK)
        assert await ws.fs.read_text("/workspace/other.txt") == "a different path\n"
        assert await sandbox_sha(ws, "big.log") == hashlib.sha256(data).hexdigest()


async def test_a_killed_writer_of_a_deferred_file_keeps_all_it_wrote(
    live: tuple[computer.Workspace, ShellBackend],
) -> None:
    ws, backend = live
    handle = await ws.runtime.exec(writer())
    await deferring(ws, backend)
    await ws.fs.write_file("/workspace/other.txt", b"a different path\n")
    await handle.kill()
    result = await handle.result()
    assert result.status == "cancelled"
    data = await ws.fs.read_file("/workspace/big.log")
    assert len(data) % BLOCK == 0 and data == blocks(len(data) // BLOCK)
    assert await sandbox_sha(ws, "big.log") == hashlib.sha256(data).hexdigest()
    assert await ws.fs.read_text("/workspace/other.txt") == "a different path\n"


async def test_a_hard_linked_growing_file_is_pulled_at_every_tick_under_both_names(
    live: tuple[computer.Workspace, ShellBackend],
) -> None:
    """Decision (s65, ``_growing``): a file with two names is never spaced out; both names end with
    the program's whole content, in the workspace and in the sandbox."""
    ws, backend = live
    handle = await ws.runtime.exec(writer(link="big.link"))

    async def grown() -> bool:
        return (
            await ws.fs.exists("/workspace/big.link")
            and (await ws.fs.stat("/workspace/big.link")).size >= 40 * BLOCK
        )

    await eventually(grown, within=60.0)
    assert mirror_of(ws, backend).growing.deferred == 0
    await ws.fs.write_file("/workspace/stop", "")
    result = await handle.result()
    assert result.status == "completed"
    expected = hashlib.sha256(blocks(int(result.stdout))).hexdigest()
    for name in ("big.log", "big.link"):
        assert await workspace_sha(ws, name) == expected, name
        assert await sandbox_sha(ws, name) == expected, name
