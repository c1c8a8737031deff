"""Crash safety: a process killed mid-write loses nothing acknowledged and shows no partial file."""

from __future__ import annotations

import asyncio
import hashlib
import sys
import textwrap
from pathlib import Path

import pytest

from computer.storage import FileSystem

CHILD = textwrap.dedent(
    """
    import asyncio, hashlib, os, sys
    from computer.storage import FileSystem

    def content(i):
        seed = hashlib.sha256(str(i).encode()).digest()
        return seed * (1 + (i % 7) * 5000)  # up to ~1 MiB, several chunks for some

    async def main(path, mode):
        fs = FileSystem.open(path)
        await fs.mkdir("/w", recursive=True)
        for i in range(60):
            await fs.write_file(f"/w/{i}", content(i))
            print("ack", i, flush=True)
        await fs.write_file("/w/0", b"overwritten")
        print("ack overwrite", flush=True)

        def pieces():
            for n in range(5):
                yield os.urandom(300 * 1024)
                if n == 3:
                    os._exit(3)

        async def apieces():
            for piece in pieces():
                yield piece
                await asyncio.sleep(0)

        if mode == "async":
            await fs.write_file("/w/partial", apieces())
        else:
            await fs.write_file("/w/partial", pieces())
        print("unreachable", flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def _content(i: int) -> bytes:
    seed = hashlib.sha256(str(i).encode()).digest()
    return seed * (1 + (i % 7) * 5000)


@pytest.mark.parametrize("mode", ["async", "sync"])
async def test_killed_writer_keeps_acknowledged_writes_and_no_partial_file(tmp_path: Path, mode: str) -> None:
    db = str(tmp_path / "crash.sqlite")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, db, mode, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 3, err.decode()
    stdout = out.decode()
    acked = [line.split()[1] for line in stdout.splitlines() if line.startswith("ack")]
    assert acked[-1] == "overwrite" and len(acked) == 61
    assert "unreachable" not in stdout

    fs = FileSystem.open(db)
    try:
        assert await fs.read_file("/w/0") == b"overwritten"
        for i in range(1, 60):
            assert await fs.read_file(f"/w/{i}") == _content(i), i
        assert not await fs.exists("/w/partial")
        # The staged chunks of the interrupted write were collected when the store reopened.
        contents = [_content(i) for i in range(1, 60)] + [b"overwritten"]
        distinct = {c[o : o + 524288] for c in contents for o in range(0, len(c), 524288)}
        assert fs.stats()["chunks"] == len(distinct)
        await fs.write_file("/w/after", b"still writable")
        assert await fs.read_file("/w/after") == b"still writable"
    finally:
        fs.close()
