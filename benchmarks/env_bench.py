"""What a run's environment of many variables costs, per call and live (s63).

For each count N, a run with N variables prints the CPU time its process used up to its command's first
line (``/proc/$$/stat``: utime + stime survive an ``exec``, so a per-call run's count holds the standby's
stub bash and helper before it), then the CPU of the first program its bash starts (bash builds the
program's environment once), and the run's wall time. CPU, not wall, is the figure to compare on a
shared machine. See "Standby sandboxes" in computer/runtime/README.md.

    .venv/bin/python benchmarks/env_bench.py                          # 1,000 to 20,000, both modes
    .venv/bin/python benchmarks/env_bench.py --counts 5000,40000 --live
"""

from __future__ import annotations

import argparse
import asyncio
import time

import computer
from computer.runtime import ShellBackend

# Own CPU (ticks) at the first line; then after ``/bin/true`` (bash made the environment).
SOURCE = (
    "read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ < /proc/$$/stat; a=$((u + s)); /bin/true;"
    " read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ < /proc/$$/stat; echo $a $((u + s - a))"
)


async def measure(live: bool, counts: list[int]) -> None:
    tick_ms = 10  # USER_HZ
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        await (await ws.runtime.exec("true")).result()
        for n in counts:
            env = {f"V{i}": f"value{i}" for i in range(n)}
            started = time.perf_counter()
            try:
                result = await (await ws.runtime.exec(SOURCE, env=env, timeout=600)).result()
            except ValueError as refused:  # past ``ENV_MAX_VARIABLES``
                print(f"{'live' if live else 'per call':8} {n:>6,} variables: refused: {refused}")
                continue
            wall = (time.perf_counter() - started) * 1000
            if result.status != "completed":
                print(f"{'live' if live else 'per call'} {n:>6,}: {result.status} {result.stderr[:200]}")
                continue
            before, program = (int(x) * tick_ms for x in result.stdout.split())
            print(
                f"{'live' if live else 'per call':8} {n:>6,} variables: {before:>6,} ms of CPU before the first"
                f" line, {program:>6,} ms for bash's first program, run {wall:>7,.0f} ms",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", default="1000,5000,10000,20000", help="comma-separated variable counts")
    parser.add_argument("--live", action="store_true", help="only live")
    parser.add_argument("--per-call", action="store_true", help="only a sandbox per call")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    for live in (False, True):
        if (live and args.per_call) or (not live and args.live):
            continue
        asyncio.run(measure(live, counts))


if __name__ == "__main__":
    main()
