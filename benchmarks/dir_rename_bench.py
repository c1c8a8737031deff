"""``mv`` of a directory of many files, per call and live: time, and what the store writes.

A workspace holds ``small/`` (10 files) and ``big/`` (``--files`` files). One call each renames
``small`` then ``big`` (timed, and the workspace's change-log rows since the call's start counted:
a rename the store took as one is a few rows, a tree sent again whole is two per file); then a storm
of renames ending at a new name, and one ending where it started (a -> b -> a: net nothing). Live
only: a storm of renames (``mv big3 s; mv s big3``) left running in the background for ``--storm``
seconds, the owner's CPU meanwhile (this process's time over the wall time), the rows written and
the mirrors' whole-tree walks (``Mirror.scan``, counted). The baseline, in the same process: bare ``mv`` of the same trees on the
host's tmpfs (``/dev/shm``). Prints ms, ratios against the 10-file rename, and row counts.

    .venv/bin/python benchmarks/dir_rename_bench.py --files 20000 --storm 10 [--shed-for 0]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time

import computer
from computer.runtime import ShellBackend, _mirror_watch

WALKS = [0]  # the mirrors' whole-tree walks (``Mirror.scan``), counted
_walk = _mirror_watch.walk


def _counted(*args, **kwargs):  # type: ignore[no-untyped-def]
    WALKS[0] += 1
    return _walk(*args, **kwargs)


_mirror_watch.walk = _counted  # type: ignore[assignment]

MAKE = "mkdir big small && (cd big && seq 1 {n} | xargs touch) && (cd small && seq 1 10 | xargs touch)"
STEPS = [
    ("mv small small2", "mv small small2"),
    ("mv big big2", "mv big big2"),
    ("150 renames, ends at big3", "for i in $(seq 50); do mv big2 x; mv x y; mv y big2; done; mv big2 big3"),
    ("100 renames, a->b->a", "for i in $(seq 50); do mv big3 z; mv z big3; done"),
]


def bare(files: int) -> dict[str, float]:
    where = tempfile.mkdtemp(dir="/dev/shm")
    try:
        subprocess.run(["bash", "-c", MAKE.format(n=files)], cwd=where, check=True)
        took = {}
        for name, cmd in STEPS:
            t = time.perf_counter()
            subprocess.run(["bash", "-c", cmd], cwd=where, check=True)
            took[name] = (time.perf_counter() - t) * 1000
        return took
    finally:
        shutil.rmtree(where)


async def calls(files: int, live: bool, storm: float) -> None:
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        made = await (await ws.runtime.exec(MAKE.format(n=files), timeout=600)).result()
        assert made.status == "completed", made
        base = bare(files)
        small = 0.0
        for name, cmd in STEPS:
            rev, walks = ws.fs.rev, WALKS[0]
            t = time.perf_counter()
            result = await (await ws.runtime.exec(cmd, timeout=600)).result()
            took = (time.perf_counter() - t) * 1000
            assert result.status == "completed", result
            rows = len(ws.fs.changes_since(rev, "/workspace").changes)
            small = small or took
            print(
                f"live={live} {name}: {took:.0f} ms ({took / small:.1f}x the 10-file mv; bare {base[name]:.1f} ms),"
                f" {rows:,} change-log rows, {WALKS[0] - walks} whole-tree walks"
            )
        assert len(await ws.fs.readdir("/workspace/big3")) == files
        if live and storm:  # a background job the call leaves running; the ticks pull what it does
            rev, walks = ws.fs.rev, WALKS[0]
            start = "(while :; do mv big3 s; mv s big3; done) >/dev/null 2>&1 & echo $! > .storm"
            assert (await (await ws.runtime.exec(start)).result()).status == "completed"
            cpu, t = time.process_time(), time.perf_counter()
            await asyncio.sleep(storm)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - t
            stop = "kill $(cat .storm); rm .storm; sleep 0.5; ls"
            result = await (await ws.runtime.exec(stop)).result()
            rows = len(ws.fs.changes_since(rev, "/workspace").changes)
            print(
                f"live storm for {storm:.0f} s in the background: owner CPU {cpu / wall:.0%} of a core,"
                f" {rows:,} change-log rows, {WALKS[0] - walks} whole-tree walks ({result.status})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--storm", type=float, default=10.0)
    parser.add_argument(
        "--shed-for",
        type=float,
        default=_mirror_watch.SHED_FOR,
        help="seconds a mirror whose watch was shed is walked (the make's 20,000 files flood the queue:"
        " the steps after it then walk whatever they do; 0 measures the watch)",
    )
    args = parser.parse_args()
    _mirror_watch.SHED_FOR = args.shed_for
    for live in (False, True):
        asyncio.run(calls(args.files, live, args.storm))


if __name__ == "__main__":
    main()
