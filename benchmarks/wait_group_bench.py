"""What the owner's wait group (``_owner.WAIT_GROUP``) costs a call, dedicated and hosted owners.

Run: ``.venv/bin/python benchmarks/wait_group_bench.py [--iterations 150] [--rounds 8]``. Two clients of
one workspace, in alternating rounds in one process (a shared machine's load drifts): one as clients
are (the calls that wait for others on the owner's wait group), one sent the old way (its connection's
``wait_group`` cleared: every call on the default group). Per model, the median of the rounds'
medians of:
- an ordinary call (a 100 B read): the same path for both (target: equal);
- a lock ``hold`` (acquire and release, uncontended) and a mutating ``run_tool`` (a small ``write``):
  on the wait group, a hop to the owner's loop and back (target: a fraction of a round trip).
Exec pools are off (pool sizes 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray

import computer


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    """The median milliseconds of ``n`` sequential calls (after a few to warm up)."""
    for _ in range(min(10, n)):
        await fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def operations(ws: Any) -> dict[str, Callable[[], Awaitable[Any]]]:
    async def hold() -> None:
        async with ws.locks.hold(["/l"]):
            pass

    return {
        "read 100 B (ordinary)": lambda: ws.fs.read_file("/a"),
        "lock hold (acquire+release)": hold,
        "run_tool write": lambda: ws.run_tool("write", {"path": "/t", "content": "z"}),
    }


async def one_model(owners: str, data_dir: str, n: int, rounds: int) -> None:
    computer.init(data_dir=data_dir, owners=owners, shell_pool_size=0, python_pool_size=0)
    name = f"bench-{owners}"
    waits = await computer.get_workspace(name)
    old = await computer.get_workspace(name)
    old._conn.wait_group = None  # every call on the default group, as before the wait group
    assert waits._conn.wait_group is not None, "this owner has no wait group"
    await waits.fs.write_file("/a", b"x" * 100)
    medians: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(rounds):
            for label, ws in (("wait group", waits), ("default only", old)):
                for op, fn in operations(ws).items():
                    medians.setdefault((op, label), []).append(await timed(fn, n))
    finally:
        await waits.close()
        await old.close()
    for op in operations(waits):
        now = statistics.median(medians[(op, "wait group")])
        before = statistics.median(medians[(op, "default only")])
        print(
            f"{owners:9s} {op:28s} wait group {now:6.3f} ms, default only {before:6.3f} ms, "
            f"difference {now - before:+.3f} ms ({now / before:.2f}x)"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    # A cluster of its own (never one another process started).
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    print(f"ray {ray.__version__}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    data = tempfile.mkdtemp(prefix="wbench-")
    for owners in ("dedicated", "hosted"):
        await one_model(owners, os.path.join(data, owners), args.iterations, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
