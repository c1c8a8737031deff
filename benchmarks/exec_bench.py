"""Exec runtime benchmark: latency, sync cost and a shell-level fs benchmark through the shell backend.

Every figure is printed next to a baseline measured in the same run on the same machine:

1. ``true``: median latency through the embedded shell backend (push, sandbox, pull, journal) next to
   bare ``bash -c true`` and bare bubblewrap with the same sandbox arguments, and through a warm pool
   and a client (``get_workspace``) on a 1,000-file workspace (Ray is started for it; ``--no-pool``
   skips it). Runs are timed back to back and each after a pause (``--pause``, untimed: an agent's
   runs are separated by its model's turns, and the shell backend prepares the next run's sandbox
   once a run is over).
   Also python ``print(1)`` through the embedded python backend, with and without a guest
   interpreter started ahead (``warm_guests``), back to back and after a pause of at least 0.3 s (a
   guest takes ~60 ms to start).
2. Sync cost of a run that changes one file, in a 100-file and a 10,000-file workspace (target: the
   10,000-file run costs at most 1.5x the 100-file run).
3. The shell-level fs benchmark (create/stat/rm 1000 files, mkdir -p 10x10x10, find, dd 64 MiB, read,
   copy, overwrite), each step one exec including its sync bracket, against the same commands run by
   bare bash in a tmpfs directory, each step of both after the same untimed pause; Cloudflare's
   published ratios are printed alongside.

Usage: ``python benchmarks/exec_bench.py [--runs N] [--pause S] [--no-pool] [--scratch DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pool_bench

import computer
from computer.runtime import PythonBackend, ShellBackend

CLOUDFLARE = {
    "create": 6.7,
    "stat": 1.49,
    "rm": 2.56,
    "mkdir": 1.01,
    "find": 1.00,
    "write": 4.87,
    "read": 19.3,
    "copy": 27.8,
    "overwrite": 32.9,
}

TMPFS = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())

FS_STEPS = [
    ("create", "mkdir -p bench && cd bench && for i in $(seq 1000); do echo $i > f$i; done"),
    ("stat", "cd bench && for i in $(seq 1000); do [ -f f$i ] || exit 1; done"),
    ("rm", "cd bench && rm f{1..1000}"),
    ("mkdir", "mkdir -p tree/d{0..9}/{0..9}/{0..9}"),
    ("find", "find . > /dev/null"),
    ("write", "dd if=/dev/zero of=big bs=1M count=64 status=none"),
    ("read", "cat big > /dev/null"),
    ("copy", "cp big big2"),
    ("overwrite", "dd if=/dev/urandom of=big bs=1M count=64 conv=notrunc status=none"),
]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(fn: Callable[[], Awaitable[object]], runs: int, pause: float = 0.0) -> float:
    samples = []
    for _ in range(runs):
        await asyncio.sleep(pause)
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def timed_sync(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


async def run_ok(ws: computer.Workspace, source: str) -> computer.ExecResult:
    result = await (await ws.runtime.exec(source)).result()
    if result.status != "completed":
        raise RuntimeError(f"{source!r} ended {result.status}: {result.stderr[-500:]}")
    return result


async def latency(backend: ShellBackend, runs: int, pause: float, pool: bool) -> None:
    print("== 1. latency of `true` (median of", runs, "runs)")
    bash = timed_sync(lambda: subprocess.run(["bash", "-c", "true"], check=True), runs)
    argv = backend.sandbox.argv(["/bin/bash", "-c", "true"])
    bwrap = timed_sync(lambda: subprocess.run(argv, check=True), runs)
    print(f"  bare bash -c true                       {bash:8.2f} ms   1.00x")
    print(f"  bare bwrap bash -c true                 {bwrap:8.2f} ms   {bwrap / bash:5.2f}x bash")
    if pool:
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(pool_bench)  # its actor class travels to Ray's workers
        computer.init(data_dir=tempfile.mkdtemp(prefix="exec-bench-"))
    for gap, label in ((0.0, "back to back"), (pause, f"after {pause * 1000:.0f} ms")):
        async with computer.Workspace(backends=[backend]) as ws:
            await ws.fs.mkdir("/workspace")
            await run_ok(ws, "true")
            embedded = await timed(lambda ws=ws: run_ok(ws, "true"), runs, gap)
        print(
            f"  shell backend, embedded, {label:14s}{embedded:8.2f} ms   {embedded / bash:5.2f}x bash, "
            f"{embedded / bwrap:5.2f}x bwrap"
        )
        if pool:
            client, _, _, _ = await pool_bench.pool_latency(runs, gap)
            met = "met" if client < pool_bench.TARGET_MS else "NOT met"
            print(
                f"  warm pool via a client, {label:15s}{client:8.2f} ms   {client / bash:5.2f}x bash "
                f"(1,000-file workspace; target < {pool_bench.TARGET_MS:.0f} ms: {met})"
            )


async def sync_cost(backend: ShellBackend, runs: int) -> None:
    print("== 2. a run changing 1 file (median of", runs, "runs; sizes interleaved so load hits both alike)")
    sizes = (100, 10_000)
    workspaces = {n: computer.Workspace(backends=[backend]) for n in sizes}
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for count, ws in workspaces.items():
            writes: dict[str, bytes | None] = {
                f"/workspace/d{i // 100}/f{i}.txt": b"%d\n" % i for i in range(count)
            }
            ws.fs.commit_batch(writes, mkdirs=["/workspace"])
            await run_ok(ws, "true")  # first run: full push
        for _ in range(runs):
            for count, ws in workspaces.items():
                start = time.perf_counter()
                await run_ok(ws, "echo x >> d0/f0.txt")
                samples[count].append(time.perf_counter() - start)
        for count, ws in workspaces.items():
            pushed = (await run_ok(ws, "cat d0/f0.txt > /dev/null")).pushed
            print(f"  {count:6d} files: {median_ms(samples[count]):8.2f} ms (next run pushed {pushed} files)")
    finally:
        for ws in workspaces.values():
            await ws.close()
    ratio = median_ms(samples[10_000]) / median_ms(samples[100])
    print(f"  ratio 10,000 / 100 files: {ratio:.2f}x (target <= 1.5x) {'OK' if ratio <= 1.5 else 'OVER'}")


async def fs_bench(backend: ShellBackend, repeats: int, pause: float) -> None:
    print(
        "== 3. shell fs benchmark: each step one exec incl. sync bracket vs bare bash on tmpfs "
        f"(each step of both after an untimed {pause * 1000:.0f} ms pause)"
    )
    shm = TMPFS
    ours: dict[str, list[float]] = {name: [] for name, _ in FS_STEPS}
    base: dict[str, list[float]] = {name: [] for name, _ in FS_STEPS}
    for _ in range(repeats):
        directory = Path(tempfile.mkdtemp(dir=shm, prefix="exec-bench-"))
        try:
            for name, script in FS_STEPS:
                await asyncio.sleep(pause)
                start = time.perf_counter()
                subprocess.run(["bash", "-c", script], cwd=directory, check=True)  # noqa: ASYNC221 - the baseline
                base[name].append(time.perf_counter() - start)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        async with computer.Workspace(backends=[backend]) as ws:
            await ws.fs.mkdir("/workspace")
            await run_ok(ws, "true")
            for name, script in FS_STEPS:
                await asyncio.sleep(pause)
                start = time.perf_counter()
                await run_ok(ws, script)
                ours[name].append(time.perf_counter() - start)
    print(f"  {'step':10s} {'tmpfs bash':>11s} {'shell exec':>11s} {'ratio':>7s} {'cloudflare':>11s}")
    for name, _ in FS_STEPS:
        b, o = median_ms(base[name]), median_ms(ours[name])
        print(f"  {name:10s} {b:9.2f}ms {o:9.2f}ms {o / b:6.2f}x {CLOUDFLARE[name]:10.2f}x")


async def python_latency(runs: int, pause: float) -> None:
    print("== 1b. latency of python `print(1)` (median of", runs, "runs)")
    bare = timed_sync(
        lambda: subprocess.run([sys.executable, "-I", "-c", "print(1)"], check=True, capture_output=True),
        runs,
    )
    print(f"  bare python -I -c 'print(1)'            {bare:8.2f} ms   1.00x")
    for gap, label in ((0.0, "back to back"), (pause, f"after {pause * 1000:.0f} ms")):
        figures = []
        for warm in (0, 1):
            async with computer.Workspace(backends=[PythonBackend(warm_guests=warm)]) as ws:
                await ws.fs.mkdir("/workspace")
                await run_ok(ws, "pass")
                figures.append(await timed(lambda ws=ws: run_ok(ws, "print(1)"), runs, gap))
        cold, warm_ms = figures
        print(f"  no guest ahead, {label:23s}{cold:8.2f} ms   {cold / bare:5.2f}x bare")
        print(
            f"  a guest started ahead, {label:16s}{warm_ms:8.2f} ms   {warm_ms / bare:5.2f}x bare, "
            f"{warm_ms / cold:5.2f}x no guest"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="samples per latency/sync figure")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the fs benchmark")
    parser.add_argument("--scratch", default=None, help="where the shell backend keeps its mirrors")
    parser.add_argument("--pause", type=float, default=0.05, help="untimed seconds before a paused run")
    parser.add_argument("--no-pool", action="store_true", help="skip the warm-pool latency (no Ray)")
    args = parser.parse_args()
    backend = ShellBackend(scratch_dir=args.scratch)
    print(f"shell backend: startup {backend.info.startup_ms} ms; mirrors in {backend.scratch}")
    print(f"isolation: {backend.info.isolation}")
    await latency(backend, args.runs, args.pause, not args.no_pool)
    await python_latency(args.runs, max(args.pause, 0.3))
    await sync_cost(backend, args.runs)
    await fs_bench(backend, args.repeats, args.pause)


if __name__ == "__main__":
    asyncio.run(main())
