"""What a pull of many empty files costs the host process in memory, and what of it stays.

A live shell run makes ``--files`` empty files (``mkdir d && cd d && seq N | xargs touch``); the
process's RSS is printed split as the kernel counts it (``RssAnon``: the heap, Python's objects and
glibc's arenas; ``RssFile``: pages of mapped files, the store's SQLite file mapped with ``mmap``,
page cache the kernel may drop) at each stage: before, after the pull, after the next run, after
``gc.collect()`` (every row is taken after one), after ``malloc_trim(0)``, after runs removing and
making the files again (a high-water mark, not a leak), after the workspace's close (the backend keeps
the warm mirror: its per-path state is printed too), after the backend is dropped, 2 s later (the warm
mirror's tree removed), after ``malloc_trim(0)``. Then, with ``--lanes``, how
many threads ``offload`` lanes start when ``--owners`` owners each have one blocking call in flight
(a live sandbox's freeze or a mirror's write on a slow disk).

    .venv/bin/python benchmarks/memory_bench.py                 # 100,000 files
    .venv/bin/python benchmarks/memory_bench.py --files 20000 --lanes --owners 1000
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import sys
import tempfile
import threading

import computer
from computer.runtime import ShellBackend, offload
from computer.runtime._mirror import Mirror


def _status() -> dict[str, float]:
    """The process's RSS fields, MB."""
    out: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out


def _deep(obj: object, seen: set[int]) -> int:
    """Bytes of ``obj`` and the containers and scalars it holds (not other objects' attributes)."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep(k, seen) + _deep(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(_deep(v, seen) for v in obj)
    return size


class _Rows:
    def __init__(self) -> None:
        gc.collect()
        self.base = _status()
        print(f"{'stage':<28}{'RSS':>8}{'+RSS':>8}{'+anon':>8}{'+file':>8}  (MB)")

    def row(self, stage: str) -> None:
        gc.collect()
        now = _status()
        plus = {k: now[k] - self.base[k] for k in now}
        print(
            f"{stage:<28}{now['VmRSS']:8.0f}{plus['VmRSS']:8.0f}{plus['RssAnon']:8.0f}{plus['RssFile']:8.0f}",
            flush=True,
        )


def _print_warm_state() -> None:
    """The warm mirrors' per-path state (a function of its own: no local outlives it)."""
    for mirror in [o for o in gc.get_objects() if isinstance(o, Mirror)]:
        paths, size = len(mirror.state), _deep(mirror.state, set())
        print(
            f"  warm mirror: {paths:,} paths, state {size / 2**20:.1f} MB ({size / max(1, paths):.0f} B a path)"
        )


async def pull_cost(files: int) -> None:
    print(f"== a live run making {files:,} empty files")
    scratch = tempfile.TemporaryDirectory()
    backend: ShellBackend | None = ShellBackend()
    ws: computer.Workspace | None = computer.Workspace(f"{scratch.name}/ws.sqlite", backends=[backend])
    assert ws is not None
    async with ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        rows = _Rows()
        result = await (await ws.runtime.exec(f"mkdir d && cd d && seq {files} | xargs touch")).result()
        if result.status != "completed":
            raise RuntimeError(f"the run ended {result.status}: {result.stderr[-500:]}")
        del result
        rows.row("after the pull")
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        rows.row("after malloc_trim(0)")
        await (await ws.runtime.exec("true")).result()
        rows.row("after the next run")
        for again in (1, 2):
            await (await ws.runtime.exec("rm -rf d")).result()
            await (await ws.runtime.exec(f"mkdir d && cd d && seq {files} | xargs touch")).result()
            rows.row(f"after rm and pull again ({again})")
    rows.row("after the close")
    _print_warm_state()
    del ws, backend
    rows.row("after dropping the backend")
    await asyncio.sleep(2)  # the warm mirror's tree is removed by a thread of its own
    rows.row("2 s later")
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rows.row("after malloc_trim(0)")
    scratch.cleanup()


async def lane_threads(owners: int) -> None:
    print(f"== {owners} owners, one blocking call each in flight")
    release = threading.Event()
    before, rss = threading.active_count(), _status()["VmRSS"]
    keys = [object() for _ in range(owners)]
    calls = [asyncio.ensure_future(offload(key, release.wait, 30)) for key in keys]
    await asyncio.sleep(0.5)
    peak, grown = threading.active_count() - before, _status()["VmRSS"] - rss
    release.set()
    await asyncio.gather(*calls)
    print(
        f"  lane threads at once: {peak}, RSS +{grown:.0f} MB ({grown * 1024 / max(1, peak):.0f} KB a thread)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--lanes", action="store_true", help="also count the lanes' threads")
    parser.add_argument("--owners", type=int, default=1000)
    args = parser.parse_args()
    if args.files:
        await pull_cost(args.files)
    if args.lanes:
        await lane_threads(args.owners)


if __name__ == "__main__":
    asyncio.run(main())
