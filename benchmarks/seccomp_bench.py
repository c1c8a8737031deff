"""The seccomp filter's cost (``computer/runtime/_seccomp.py``): a sandbox's start with and without it.

Each round measures both settings, in alternating order (the first setting of a round flips each
round, so a machine's drift falls on both alike):

1. bare bubblewrap ``true``: the backend's own command line, with ``--seccomp FD`` and without;
2. a per-call shell run of ``true`` (``ShellBackend(live=False, warm_sandboxes=0)``: the call spawns
   its sandbox);
3. a live sandbox's first run of ``true`` (a fresh workspace each time: the sandbox starts in the call);
4. a warm run in a live sandbox, one started with the filter and one without (what the filter costs
   the program's own calls);
5. thread start: ``python3`` in bare bubblewrap starting and joining 2,000 threads, microseconds per
   thread (under the filter glibc's ``pthread_create`` tries ``clone3``, is told ``ENOSYS`` and uses
   ``clone``: what that fallback costs).

Also the filter's compile (once per process). Medians and quartiles in ms (thread start: µs).

Before/after a change of the filter: ``--dump FILE`` writes this tree's compiled filter (run with
``PYTHONPATH`` at the tree before the change), ``--against FILE`` measures "without" as that filter
instead of none.

Usage: ``python benchmarks/seccomp_bench.py [--rounds N] [--dump FILE | --against FILE]``.
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
_OTHER = [OFF]  # the "without" setting: no filter, or the one ``--against`` names


def _program(on: bool) -> bytes | None:
    return compiled().program if on else _OTHER[0].program


def _bare(backend: ShellBackend, on: bool) -> float:
    program = _program(on)
    fd = filter_fd(program) if program is not None else None
    try:
        argv = backend.sandbox.argv(["/bin/true"], seccomp_fd=fd)
        start = time.perf_counter()
        subprocess.run(argv, check=True, pass_fds=() if fd is None else (fd,))
        return (time.perf_counter() - start) * 1000
    finally:
        if fd is not None:
            os.close(fd)


_THREADS = (
    "import threading, time\n"
    "start = time.perf_counter()\n"
    "for _ in range(2000):\n"
    "    t = threading.Thread(target=int)\n"
    "    t.start()\n"
    "    t.join()\n"
    "print((time.perf_counter() - start) / 2000 * 1e6)\n"
)


def _threads(backend: ShellBackend, on: bool) -> float:
    """Microseconds per thread started and joined, inside bare bubblewrap (the interpreter's start
    not counted)."""
    program = _program(on)
    fd = filter_fd(program) if program is not None else None
    try:
        argv = backend.sandbox.argv(["python3", "-c", _THREADS], seccomp_fd=fd)
        run = subprocess.run(
            argv, check=True, capture_output=True, text=True, pass_fds=() if fd is None else (fd,)
        )
        return float(run.stdout)
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
        f"compile: {(time.perf_counter() - t0) * 1000:.2f} ms, {len(filt.program or b'') // 8} BPF instructions,"
        f" user namespace rules: {getattr(filt, 'no_userns', False)}"
    )
    per_call, live = ShellBackend(live=False, warm_sandboxes=0), ShellBackend(live=True)
    print("isolation:", per_call.sandbox.isolation)
    samples: dict[tuple[str, bool], list[float]] = {}

    def setting(on: bool) -> None:
        for backend in (per_call, live):
            backend.sandbox.seccomp = filt if on else _OTHER[0]

    async def first_live_run() -> float:
        async with computer.Workspace(backends=[live]) as ws:
            await ws.fs.mkdir("/workspace")
            return await _timed(ws)

    warm = {True: ShellBackend(live=True), False: ShellBackend(live=True)}  # a live sandbox each
    warm[False].sandbox.seccomp = _OTHER[0]
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
            ("thread start, us", lambda on: asyncio.to_thread(_threads, per_call, on)),
        ]
        for round_ in range(rounds):
            for on in (True, False) if round_ % 2 else (False, True):
                setting(on)
                for name, case in cases:
                    await asyncio.sleep(0.05)  # as after an agent's turn
                    samples.setdefault((name, on), []).append(await case(on))
        setting(True)
    other = "without" if _OTHER[0] is OFF else "against"
    print(f"{'case':<18} {'with filter (p25/p50/p75)':>28} {other:>24} {'median diff':>12}")
    for name in ("bare bwrap true", "per-call run", "live first run", "live warm run", "thread start, us"):
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
    parser.add_argument("--dump", help="write this tree's compiled filter to this file and stop")
    parser.add_argument("--against", help="a filter --dump wrote: measured in place of no filter")
    args = parser.parse_args()
    if args.dump:
        with open(args.dump, "wb") as f:
            f.write(compiled().program or b"")
    else:
        if args.against:
            with open(args.against, "rb") as f:
                _OTHER[0] = SeccompFilter(f.read(), missing="")
            print(f"against: {args.against}, {len(_OTHER[0].program or b'') // 8} BPF instructions")
        asyncio.run(main(args.rounds))
