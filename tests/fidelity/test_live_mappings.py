"""A live sandbox's background program writing a file through a shared memory mapping (``mmap``,
``numpy.memmap``, LMDB): on the mirror's tmpfs only the first write after the mapping moves the
file's times, and no write raises an inotify event, so the pulls that go by events and ``lstat`` took
nothing after the first (the workspace kept ``v1`` for good, also after the sandbox ended)."""

from __future__ import annotations

from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import ROOT, ok, opened, sandbox_view, until, workspace_view

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")

# Writes v1 through its mapping, then each next value once the workspace says ``go<n>``, and names
# each value it wrote in ``wrote<n>`` (an ordinary file) right after.
MAPPER = """
import mmap, os, time
fd = os.open("shared.bin", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 8192)
m = mmap.mmap(fd, 8192)
m[0:2] = b"v1"
m[4096:4098] = b"v1"
open("wrote1", "w").close()
for n in (2, 3):
    while not os.path.exists(f"go{n}"):
        time.sleep(0.02)
    m[0:2] = b"v%d" % n
    m[4096:4098] = b"v%d" % n
    open(f"wrote{n}", "w").close()
time.sleep(120)
"""


async def test_writes_through_a_shared_mapping_reach_the_workspace_while_it_runs_and_at_the_end(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ws.sqlite"
    async with opened(db, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/mapper.py", MAPPER)
        await ok(ws, "(python3 mapper.py > /dev/null 2>&1 &)")

        async def holds(value: bytes) -> bool:
            if not await ws.fs.exists(f"{ROOT}/shared.bin"):
                return False
            data = await ws.fs.read_file(f"{ROOT}/shared.bin")
            return data[0:2] == value and data[4096:4098] == value

        await until(lambda: ws.fs.exists(f"{ROOT}/wrote1"), within=30)
        await until(lambda: holds(b"v1"), within=30)
        await ws.fs.write_file(f"{ROOT}/go2", b"")
        await until(lambda: ws.fs.exists(f"{ROOT}/wrote2"), within=30)
        await until(lambda: holds(b"v2"), within=10)  # a later tick's, the program still running
        seen = await ok(ws, "head -c2 shared.bin")
        assert seen.stdout == "v2"
        await ws.fs.write_file(f"{ROOT}/go3", b"")
        await until(lambda: ws.fs.exists(f"{ROOT}/wrote3"), within=30)
        await ws.runtime.end_sandbox()  # the end's pull, its processes killed
        assert await holds(b"v3")
    async with opened(db, python=False) as ws:
        assert (await ws.fs.read_file(f"{ROOT}/shared.bin"))[:2] == b"v3"
        assert await sandbox_view(ws) == await workspace_view(ws)
