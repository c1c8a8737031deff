"""A file a program keeps growing, in a live sandbox (with and without ``_growing``'s spacing of its
pulls), in a sandbox per call, and bare on the host's tmpfs (``/dev/shm``), in the same process.

Two writers: ``dd if=/dev/urandom bs=1M count=N`` (as fast as it goes) and a python program appending
4 MiB every 50 ms until it wrote ``--mib`` MiB (a download, a build artifact: several seconds of ticks
while it grows). Prints each call's wall time (median of ``--rounds``), its ratio to bare, and the bytes
the pulls read of the mirror's files (``BeneathReader.chunks``/``read``) per MiB written. Before s64
every tick read the whole file again: a 2 GiB ``dd`` took 56 s live, 24 s a call.

    .venv/bin/python benchmarks/grow_bench.py --mib 384 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import computer
from computer.runtime import ShellBackend, _beneath, _growing

WRITERS = {
    "dd": "dd if=/dev/urandom of=grow.bin bs=1M count={mib} status=none",
    "zero": "dd if=/dev/zero of=grow.bin bs=1M count={mib} status=none",  # (every chunk alike: holes?)
    "paced": (
        'python3 -c "import os, time\n'
        "block = os.urandom(4 << 20)\n"
        "with open('grow.bin', 'wb') as f:\n"
        "    for _ in range({mib} // 4):\n"
        '        f.write(block); f.flush(); time.sleep(0.05)"'
    ),
}

read_bytes = 0


def count_reads() -> None:
    """Count the bytes every pull reads of the mirror's files (chunks of large files, small files)."""
    chunks, read = _beneath.BeneathReader.chunks, _beneath.BeneathReader.read

    def counted_chunks(self: Any, rel: str) -> Iterator[Any]:
        global read_bytes
        for piece in chunks(self, rel):
            read_bytes += len(piece)
            yield piece

    def counted_read(self: Any, rel: str) -> bytes:
        global read_bytes
        data: bytes = read(self, rel)
        read_bytes += len(data)
        return data

    _beneath.BeneathReader.chunks = counted_chunks  # type: ignore[method-assign]
    _beneath.BeneathReader.read = counted_read  # type: ignore[method-assign]


def bare(script: str, rounds: int) -> list[float]:
    where = tempfile.mkdtemp(dir="/dev/shm")
    try:
        took = []
        for _ in range(rounds):
            t = time.perf_counter()
            subprocess.run(["bash", "-c", script], cwd=where, check=True)
            took.append(time.perf_counter() - t)
            (subprocess.run(["rm", "-f", "grow.bin"], cwd=where, check=True))
        return took
    finally:
        shutil.rmtree(where)


async def sandboxed(script: str, rounds: int, live: bool) -> tuple[list[float], int]:
    global read_bytes
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        took, read = [], 0
        for _ in range(rounds):
            read_bytes = 0
            t = time.perf_counter()
            result = await (await ws.runtime.exec(script, timeout=600)).result()
            took.append(time.perf_counter() - t)
            read += read_bytes
            assert result.status == "completed", result
            assert (await (await ws.runtime.exec("rm grow.bin")).result()).status == "completed"
        return took, read // rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writer", choices=[*WRITERS, "both"], default="both")
    args = parser.parse_args()
    count_reads()
    spaced = _growing.Growing.defer
    for name in WRITERS if args.writer == "both" else [args.writer]:
        script = WRITERS[name].format(mib=args.mib)
        base = statistics.median(bare(script, args.rounds))
        rows = []
        for label, live, spacing in [
            ("live", True, True),
            ("live, every tick", True, False),
            ("a call", False, True),
        ]:
            _growing.Growing.defer = spaced if spacing else (lambda *a, **k: set())  # type: ignore[method-assign]
            took, read = asyncio.run(sandboxed(script, args.rounds, live))
            rows.append((label, statistics.median(took), read))
        _growing.Growing.defer = spaced  # type: ignore[method-assign]
        print(f"{name} writer, {args.mib} MiB: bare {base:.2f} s")
        for label, took, read in rows:
            print(
                f"  {label:17} {took:6.2f} s  {took / base:5.2f}x bare  pulls read {read / (1 << 20):8.0f} MiB"
                f" ({read / (args.mib << 20):.1f}x the file)"
            )


if __name__ == "__main__":
    main()
