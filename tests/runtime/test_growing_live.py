"""A large file a live program keeps writing, deferred by the ticks (``_growing``), meets the workspace:
writes, removals and renames through ``ws.fs`` keep the pull's conflict rules (the workspace's version
wins and ``skipped`` says so; a rename follows the program's open file, nothing of it lost), the
workspace's end and reopen, and hard links (never spaced out). The spacing itself, on a mirror with
its own clock: test_growing.py. Every wait is for an event (a count reached), bounded at 30 s+."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, rule

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


class WorkspaceMeetsAGrowingFile(RuleBasedStateMachine):
    """A live program appending to a deferred file while the workspace writes it, renames it (the
    program's open file follows) and writes another path, in any order. At the run's end: the mirror
    and the workspace agree, a workspace write is in ``skipped``, and the file holds the workspace's
    last write followed only by the program's later blocks, in order (nothing resurrected, none of
    them lost); with no workspace write, every block the program wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.backend = ShellBackend(live=True)
        self.workspace = computer.Workspace(backends=[self.backend])
        self.ws = self.run(self.workspace.__aenter__())
        self.run(self.ws.fs.mkdir("/workspace"))
        self.handle = self.run(self.ws.runtime.exec(writer()))
        self.run(deferring(self.ws, self.backend))
        self.name, self.other = "big.log", "moved.log"
        self.wrote: bytes | None = None  # the workspace's last write of the file
        self.texts = 0

    def run(self, step: Any) -> Any:
        return self.loop.run_until_complete(step)

    @rule()
    def write_the_file(self) -> None:
        self.texts += 1
        self.wrote = b"WORKSPACE %d\n" % self.texts
        self.run(self.ws.fs.write_file(f"/workspace/{self.name}", self.wrote))

    @rule()
    def rename_the_file(self) -> None:
        self.run(self.ws.fs.rename(f"/workspace/{self.name}", f"/workspace/{self.other}"))
        self.name, self.other = self.other, self.name

    @rule()
    def write_another_path(self) -> None:
        self.texts += 1
        self.run(self.ws.fs.write_file("/workspace/other.txt", b"other %d\n" % self.texts))

    @rule()
    def ticks_pass(self) -> None:
        """Some ticks (how many does not matter to the checks: no event to wait for, as a write in a
        chain of renames leaves the program writing a file no name holds, which then grows no more)."""
        self.run(asyncio.sleep(0.3))

    def teardown(self) -> None:
        try:
            self.run(self.ws.fs.write_file("/workspace/stop", ""))
            result = self.run(self.handle.result())
            assert result.status == "completed", result
            whole = blocks(int(result.stdout))
            data = self.run(self.ws.fs.read_file(f"/workspace/{self.name}"))
            assert not self.run(self.ws.fs.exists(f"/workspace/{self.other}"))
            if self.wrote is None:
                assert data == whole
            else:
                assert data.startswith(self.wrote), data[:20]
                rest = data[len(self.wrote) :]
                assert len(rest) % BLOCK == 0 and (not rest or whole.endswith(rest))
                # The program wrote on into the file the workspace wrote: the conflict is said (a
                # write in a chain of renames gets a new file, the program's no name: as every tick).
                assert result.skipped or not rest, result
            for name in (self.name, self.other, "other.txt"):
                assert self.run(sandbox_sha(self.ws, name)) == self.run(workspace_sha(self.ws, name)), name
        finally:
            self.run(self.workspace.__aexit__(None, None, None))
            self.loop.close()


@pytest.mark.usefixtures("spaced_for_good")
class TestWorkspaceMeetsAGrowingFile(WorkspaceMeetsAGrowingFile.TestCase):  # type: ignore[misc,name-defined]
    settings = settings(
        max_examples=4, stateful_step_count=5, deadline=None, suppress_health_check=list(HealthCheck)
    )
