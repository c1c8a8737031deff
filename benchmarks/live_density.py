"""How many live sandboxes one process holds, and what each costs.

Starts ``--count`` workspaces (each with a live shell sandbox holding ``sleep 1000 &``) in one process,
one after another, and prints the start time of the Nth sandbox against the first's (the baseline,
measured in the same run), the host descriptors, threads and RSS each one adds, how fast a sample of
them still syncs both ways once all run, and what is left on the host once all are closed.

    .venv/bin/python benchmarks/live_density.py              # 150 sandboxes, one backend each
    .venv/bin/python benchmarks/live_density.py --shared     # one backend for all of them
    .venv/bin/python benchmarks/live_density.py --count 40
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import resource
import statistics
import time

import computer
from computer.runtime import ShellBackend


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def _groups() -> int:
    return len(glob.glob(f"/sys/fs/cgroup/*/computer-exec/run-{os.getpid()}-*"))


def _children() -> int:
    me, count = str(os.getpid()), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    count += f.read().rsplit(")", 1)[1].split()[1] == me
            except OSError:
                pass
    return count


async def _until(ws: computer.Workspace, path: str, since: float) -> float:
    while not await ws.fs.exists(path):
        if time.monotonic() - since > 10:
            return float("inf")
        await asyncio.sleep(0.005)
    return (time.monotonic() - since) * 1000


async def _sync_ms(ws: computer.Workspace) -> tuple[float, float]:
    """(a background process's file reaching the workspace, a workspace file reaching a background
    process and its copy coming back), in ms."""
    await (await ws.runtime.exec("(sleep 0.3; echo bg > bg.txt) > /dev/null 2>&1 &")).result()
    out = await _until(ws, "/workspace/bg.txt", time.monotonic() + 0.3)
    waiter = "for i in $(seq 1000); do [ -f in.txt ] && { cp in.txt seen.txt; break; }; sleep 0.01; done"
    await (await ws.runtime.exec(f"({waiter}) > /dev/null 2>&1 &")).result()
    await asyncio.sleep(0.2)
    since = time.monotonic()
    await ws.fs.write_file("/workspace/in.txt", "x")
    return out, await _until(ws, "/workspace/seen.txt", since)


async def main(count: int, shared: bool) -> None:
    print(
        f"descriptor limit {resource.getrlimit(resource.RLIMIT_NOFILE)}, {count} sandboxes, shared={shared}"
    )
    one = ShellBackend()
    base = (_fds(), _threads(), _rss_mib())
    spaces: list[computer.Workspace] = []
    starts: list[float] = []
    for i in range(count):
        ws = computer.Workspace(backends=[one if shared else ShellBackend()])
        await ws.__aenter__()
        spaces.append(ws)
        await ws.fs.mkdir("/workspace")
        t = time.monotonic()
        result = await (await ws.runtime.exec("sleep 1000 & echo up")).result()
        starts.append((time.monotonic() - t) * 1000)
        if result.stdout != "up\n":
            print(f"sandbox {i + 1}: {result.status} {result.error}")
    first = starts[0]
    for n in sorted({1, 10, 64, 128, 129, count} & set(range(1, count + 1))):
        print(f"start of sandbox {n:4}: {starts[n - 1]:6.1f} ms ({starts[n - 1] / first:.2f}x the first)")
    print(f"start median {statistics.median(starts):.1f} ms, p90 {sorted(starts)[int(count * 0.9)]:.1f} ms")
    fds, threads, rss = _fds() - base[0], _threads() - base[1], _rss_mib() - base[2]
    print(
        f"per sandbox: {fds / count:.1f} descriptors, {threads / count:.2f} threads, {rss / count:.2f} MiB RSS"
    )
    for k in sorted({0, count // 2, count - 1}):
        out, back = await _sync_ms(spaces[k])
        print(
            f"sandbox {k + 1}: background file in {out:.0f} ms, workspace file there and back in {back:.0f} ms"
        )
    t = time.monotonic()
    for ws in spaces:
        await ws.__aexit__(None, None, None)
    print(f"closed all in {time.monotonic() - t:.2f} s")
    await asyncio.sleep(1)
    print(f"left: {_children()} child processes, {_groups()} cgroups, {_fds() - base[0]} descriptors")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=150)
    parser.add_argument("--shared", action="store_true", help="one backend for every workspace")
    args = parser.parse_args()
    asyncio.run(main(args.count, args.shared))
