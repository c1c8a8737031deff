"""What a flood of empty entries in one workspace costs the process that serves every workspace.

A run makes N empty files (or directories, or symlinks) in a new directory of the mirror; the script
prints the run's time, the event loop's longest stall meanwhile (a 10 ms ticker), the process's
memory (VmHWM / VmRSS, MB), what was pulled and skipped, the store's size on disk, the next run's time,
and the first run after a reopen (a full push). See "Entry cap" in computer/runtime/README.md.

    .venv/bin/python benchmarks/entries_bench.py 300000                    # live, files
    .venv/bin/python benchmarks/entries_bench.py 1000000 --per-call --kind dirs
    .venv/bin/python benchmarks/entries_bench.py 1000000 --max-entries none  # no cap (before s62)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from typing import Any

import computer
from computer.runtime import ShellBackend

SOURCES = {
    "files": "mkdir big && cd big && seq {n} | xargs touch",
    "dirs": "mkdir big && cd big && python3 -c \"import os\nfor i in range({n}): os.mkdir('d%d' % i)\"",
    "symlinks": "mkdir big && cd big && python3 -c \"import os\nfor i in range({n}): os.symlink('t', 's%d' % i)\"",
}


def memory() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) // 1024
    return out


def store_size(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))


async def ticker(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(0.01)
        lags.append(time.monotonic() - t - 0.01)


async def timed(ws: computer.Workspace, source: str) -> tuple[Any, float, float]:
    """A run's result, its time and the loop's longest stall meanwhile (s)."""
    lags: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(ticker(lags, stop))
    t = time.monotonic()
    result = await (await ws.runtime.exec(source, timeout=900)).result()
    took = time.monotonic() - t
    stop.set()
    await task
    return result, took, max(lags, default=0.0)


async def main(n: int, kind: str, live: bool, cap: int | None) -> None:
    directory = tempfile.mkdtemp()
    path = os.path.join(directory, "ws.db")

    def backend() -> ShellBackend:
        return ShellBackend(memory_mb=4096, live=live, max_entries=cap)

    try:
        async with computer.Workspace(path, backends=[backend()]) as ws:
            await (await ws.runtime.exec("true")).result()
            print("start", memory(), flush=True)
            r, took, lag = await timed(ws, SOURCES[kind].format(n=n))
            print(
                f"run {kind} n={n} live={live} cap={cap}: {r.status} {took:.1f}s stall {lag * 1000:.0f}ms "
                f"pulled={len(r.pulled)} skipped={len(r.skipped)}",
                memory(),
                flush=True,
            )
            for p in r.skipped[:2]:
                print("  skipped", p, r.skipped_reasons.get(p, "")[:120])
            size = store_size(directory)
            print(f"store {size / 1e6:.1f} MB")
            r, took, lag = await timed(ws, "ls big | wc -l")
            print(f"next run {took:.1f}s stall {lag * 1000:.0f}ms: {r.stdout.strip()} entries", memory())
        async with computer.Workspace(path, backends=[backend()]) as ws:
            r, took, lag = await timed(ws, "ls big | wc -l")
            print(f"reopen's first run {took:.1f}s stall {lag * 1000:.0f}ms: {r.stdout.strip()}", memory())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int)
    parser.add_argument("--kind", choices=sorted(SOURCES), default="files")
    parser.add_argument("--per-call", action="store_true")
    parser.add_argument("--max-entries", default="500000")
    args = parser.parse_args()
    cap = None if args.max_entries == "none" else int(args.max_entries)
    asyncio.run(main(args.n, args.kind, not args.per_call, cap))
