"""A program appending to a file of many names (hard links), against a neighbour in the same process.

Workspace H's live sandbox holds a file of ``--names`` names (made first, their pull awaited), then a
background ``echo x >> f`` every 50 ms for ``--seconds``; meanwhile workspace V runs small live execs
and a task measures the event loop's lag (a 10 ms sleep, how late it wakes: ``neighbor_bench``'s
probes). Prints the loop's lag (p50/p99/max, ms, and the share of the time it was late: the sum of
the lags over the phase), V's exec latency (p50/p90/p99, ms) and the change-log rows H's syncs wrote,
first with H quiet (the baseline of the same run), then appending. Before the in-place pull write
each sync of the append committed one link per name (two log rows each).

    .venv/bin/python benchmarks/link_append_bench.py --names 20000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import time

from neighbor_bench import heartbeat, pct, victim

import computer
from computer.runtime import ShellBackend


async def measure(v: computer.Workspace, seconds: float) -> tuple[list[float], list[float], float]:
    lat: list[float] = []
    lags: list[float] = []
    errors: list[str] = []
    stop = asyncio.Event()
    t = time.monotonic()
    tasks = [
        asyncio.create_task(heartbeat(None, lags, stop)),
        asyncio.create_task(victim(v, lat, stop, errors)),
    ]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return lat, lags, time.monotonic() - t


def line(name: str, lat: list[float], lags: list[float], wall: float, rows: int) -> str:
    held = sum(max(0.0, lag) for lag in lags) / 1000 / wall
    return (
        f"{name:9} lag p50 {pct(lags, 0.5):6.1f} p99 {pct(lags, 0.99):6.1f} max {max(lags):6.1f} ms,"
        f" late {held:5.1%} | V exec n={len(lat):4} p50 {pct(lat, 0.5):6.1f} p90 {pct(lat, 0.9):6.1f}"
        f" p99 {pct(lat, 0.99):6.1f} ms | H log rows {rows}"
    )


async def main(names: int, seconds: float) -> None:
    v = computer.Workspace(backends=[ShellBackend()])
    h = computer.Workspace(backends=[ShellBackend()])
    for ws in (v, h):
        await ws.__aenter__()
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
    made = f"echo a > f && python3 -c \"import os\nfor i in range({names}): os.link('f', 'l%d' % i)\""
    assert (await (await h.runtime.exec(made, timeout=600)).result()).status == "completed"
    rev = h.fs.rev
    lat, lags, wall = await measure(v, seconds)
    print(line("quiet", lat, lags, wall, len(h.fs.changes_since(rev).changes)), flush=True)
    rev = h.fs.rev
    loop = f"timeout {seconds + 2} bash -c 'while :; do echo x >> f; sleep 0.05; done' >/dev/null 2>&1 &"
    await (await h.runtime.exec(loop)).result()
    lat, lags, wall = await measure(v, seconds)
    print(line("appending", lat, lags, wall, len(h.fs.changes_since(rev).changes)), flush=True)
    await (await h.runtime.exec("sleep 3")).result()
    f, last = await h.fs.stat("/workspace/f"), await h.fs.stat(f"/workspace/l{names - 1}")
    print(f"f and l{names - 1}: one file {f.ino == last.ino}, {f.nlink} names, {f.size} bytes")
    for ws in (h, v):
        await ws.__aexit__(None, None, None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.names, args.seconds))
