"""The seccomp filter's cost (``computer/runtime/_seccomp.py``): a sandbox's start with and without it.

Each round measures both settings, in alternating order (the first setting of a round flips each
round, so a machine's drift falls on both alike):

1. bare bubblewrap ``true``: the backend's own command line, with ``--seccomp FD`` and without;
2. a per-call shell run of ``true`` (``ShellBackend(live=False, warm_sandboxes=0)``: the call spawns
   its sandbox);
3. a live sandbox's first run of ``true`` (a fresh workspace each time: the sandbox starts in the call);
4. a warm run in a live sandbox, one started with the filter and one without (what the filter costs
   the program's own calls).

Also the filter's compile (once per process). Medians and quartiles in ms.

Usage: ``python benchmarks/seccomp_bench.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable

import computer
from computer.runtime import ShellBackend
from computer.runtime._seccomp import SeccompFilter, compiled, filter_fd

OFF = SeccompFilter(None, missing="off for the benchmark")


def _bare(backend: ShellBackend, on: bool) -> float:
    program = compiled().program
    fd = filter_fd(program) if on and program is not None else None
    try:
        argv = backend.sandbox.argv(["/bin/true"], seccomp_fd=fd)
        start = time.perf_counter()
        subprocess.run(argv, check=True, pass_fds=() if fd is None else (fd,))
        return (time.perf_counter() - start) * 1000
    finally:
        if fd is not None:
            os.close(fd)


async def _timed(ws: computer.Workspace) -> float:
    start = time.perf_counter()
    result = await (await ws.runtime.exec("true")).result()
    elapsed = (time.perf_counter() - start) * 1000
    assert result.status == "completed", result
    return elapsed


async def main(rounds: int) -> None:
    t0 = time.perf_counter()
    filt = compiled()
    print(
        f"compile: {(time.perf_counter() - t0) * 1000:.2f} ms, {len(filt.program or b'') // 8} BPF instructions"
    )
    per_call, live = ShellBackend(live=False, warm_sandboxes=0), ShellBackend(live=True)
    print("isolation:", per_call.sandbox.isolation)
    samples: dict[tuple[str, bool], list[float]] = {}

    def setting(on: bool) -> None:
        for backend in (per_call, live):
            backend.sandbox.seccomp = filt if on else OFF

    async def first_live_run() -> float:
        async with computer.Workspace(backends=[live]) as ws:
            await ws.fs.mkdir("/workspace")
            return await _timed(ws)

    warm = {True: ShellBackend(live=True), False: ShellBackend(live=True)}  # a live sandbox each
    warm[False].sandbox.seccomp = OFF
    async with (
        computer.Workspace(backends=[per_call]) as ws_call,
        computer.Workspace(backends=[warm[True]]) as ws_on,
        computer.Workspace(backends=[warm[False]]) as ws_off,
    ):
        for ws in (ws_call, ws_on, ws_off):
            await ws.fs.mkdir("/workspace")
        cases: list[tuple[str, Callable[[bool], Awaitable[float]]]] = [
            ("bare bwrap true", lambda on: asyncio.to_thread(_bare, per_call, on)),
            ("per-call run", lambda on: _timed(ws_call)),
            ("live first run", lambda on: first_live_run()),
            ("live warm run", lambda on: _timed(ws_on if on else ws_off)),
        ]
        for round_ in range(rounds):
            for on in (True, False) if round_ % 2 else (False, True):
                setting(on)
                for name, case in cases:
                    await asyncio.sleep(0.05)  # as after an agent's turn
                    samples.setdefault((name, on), []).append(await case(on))
        setting(True)
    print(f"{'case':<18} {'with filter (p25/p50/p75)':>28} {'without':>24} {'median diff':>12}")
    for name in ("bare bwrap true", "per-call run", "live first run", "live warm run"):
        on, off = samples[(name, True)], samples[(name, False)]
        q_on, q_off = statistics.quantiles(on, n=4), statistics.quantiles(off, n=4)
        print(
            f"{name:<18} {q_on[0]:8.2f} {q_on[1]:8.2f} {q_on[2]:8.2f}   {q_off[0]:7.2f} {q_off[1]:7.2f} {q_off[2]:7.2f}"
            f" {q_on[1] - q_off[1]:+10.2f}"
        )
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
