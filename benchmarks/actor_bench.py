"""Owner actors and clients: latency per operation, throughput, owner memory, hibernation reclaim.

Run: ``.venv/bin/python benchmarks/actor_bench.py [--iterations 300] [--touch 40]``. Prints absolute
numbers and ratios against baselines measured in the same run:
- latency of each operation through a client (stat, small read, small write, every core tool) next to
  a no-op call on an async Ray actor (target: within 1.5x, i.e. one round trip per operation);
- aggregate throughput of 8 concurrent clients on 8 workspaces and on 1 shared workspace;
- resident memory of one active owner;
- memory in use after touching ``--touch`` workspaces once and waiting past the hibernation timeout,
  against the memory in use before (target: back within 10%).
Exec pools are turned off (pool sizes 0) so the numbers are those of owners and clients alone.

``--models`` (issue 20) instead compares the owner models in one run, ``dedicated`` (an actor process
per awake workspace) against ``hosted`` (owner hosts, here one per node so that neighbours share it):
- awake workspaces per GiB of machine memory (``--awake`` hosted workspaces, ``--awake-dedicated``
  dedicated ones: each costs a process; target hosted >= 300/GiB);
- cold wake through a client (``get_workspace`` + one ``stat`` of a workspace whose owner closed it),
  p50 and p99 (target hosted p50 <= 20 ms);
- a small op's latency through a client (stat, 100 B read, 100 B write), hosted / dedicated (target
  <= 1.1x), measured for both models in alternating turns in one window (a shared machine's load
  drifts), and the stat's while a neighbour writes 64 MiB again and again (target p99 <= 5 ms).
Hosted is measured in the same turns with small calls inline on the host's loop (the default) and
with every call handed to the workspace's thread (``OwnerHost.inline_small_calls(False)``), and that
hand-over alone in process (a stat on a ``LoopThread``, no Ray).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from computer.actors import NAMESPACE, actor_name
from computer.tools import create_tools


@ray.remote(num_cpus=0)
class Noop:
    async def noop(self) -> None:
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    for _ in range(min(20, n)):  # warm up
        await fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cluster_mem_mib() -> float:
    """Proportional memory of this process and every process it started (the local Ray cluster).

    The machine is shared with other work, so system-wide numbers would measure that too.
    """
    tree, total, todo = _children(), 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += _pss_kib(pid)
        todo.extend(tree.get(pid, []))
    return total / 1024


async def settled_mem_mib(limit: float = 30.0) -> float:
    """Cluster memory once it stops falling (Ray reaps idle workers a few seconds after they exit)."""
    deadline = time.monotonic() + limit
    last = cluster_mem_mib()
    while time.monotonic() < deadline:
        await asyncio.sleep(2.0)
        now = cluster_mem_mib()
        if now > last - 5:
            return min(now, last)
        last = now
    return last


async def in_process_medians(n: int) -> dict[str, float]:
    """The same fs operations on an embedded Workspace (no Ray): the owner's own share of a call."""
    with tempfile.TemporaryDirectory() as tmp:
        async with computer.Workspace(f"{tmp}/local.sqlite") as ws:
            await ws.fs.mkdir("/workspace")
            await ws.fs.write_file("/workspace/small.txt", b"x" * 100)
            ops = {
                "fs.stat": lambda: ws.fs.stat("/workspace/small.txt"),
                "fs.read_file (100 B)": lambda: ws.fs.read_file("/workspace/small.txt"),
                "fs.write_file (100 B)": lambda: ws.fs.write_file("/workspace/w.txt", b"y" * 100),
            }
            return {label: statistics.median(await timed(fn, n)) for label, fn in ops.items()}


class ClientSide:
    """A client's surface without ``run_tool``: tools over it run client-side (the path before forwarding)."""

    def __init__(self, ws: Any) -> None:
        self.id, self.fs, self.locks, self.runtime, self.assets = (
            ws.id,
            ws.fs,
            ws.locks,
            ws.runtime,
            ws.assets,
        )

    async def close(self) -> None:
        return None


async def tool_rows(
    kind: str, tools: dict[str, Any], ws: Any, n: int, base_med: float, setup_med: float
) -> None:
    """One line per core tool; edit and delete need a fresh file each time (the setup write is subtracted)."""
    counter = iter(range(10**9))
    ops: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("read", lambda: tools["read"].run({"path": "/workspace/notes.md"})),
        ("ls", lambda: tools["ls"].run({"path": "/workspace"})),
        ("find", lambda: tools["find"].run({"path": "/workspace", "pattern": "*.md"})),
        ("grep", lambda: tools["grep"].run({"path": "/workspace", "query": "beta"})),
        ("write", lambda: tools["write"].run({"path": "/workspace/t.txt", "content": "hello\n"})),
    ]
    for label, fn in ops:
        samples = await timed(fn, n)
        med = statistics.median(samples)
        print(
            f"{'tool ' + label + ' (' + kind + ')':<36}{med:>9.3f}{percentile(samples, 0.99):>9.3f}{med / base_med:>9.2f}"
        )

    async def edit_once() -> Any:
        i = next(counter)
        await ws.fs.write_file("/workspace/e.txt", f"v{i}\n")
        return await tools["edit"].run(
            {"path": "/workspace/e.txt", "edits": [{"oldText": f"v{i}", "newText": "z"}]}
        )

    async def delete_once() -> Any:
        await ws.fs.write_file("/workspace/d.txt", b"d")
        return await tools["delete"].run({"path": "/workspace/d.txt"})

    for label, fn in (("edit", edit_once), ("delete", delete_once)):
        samples = await timed(fn, n)
        med = statistics.median(samples) - setup_med
        p99 = percentile(samples, 0.99) - setup_med
        print(
            f"{'tool ' + label + ' (' + kind + ', -setup)':<36}{med:>9.3f}{p99:>9.3f}{med / base_med:>9.2f}"
        )


async def latency(n: int) -> None:
    noop = Noop.remote()  # type: ignore[attr-defined]
    base = await timed(lambda: noop.noop.remote(), n)
    base_med = statistics.median(base)
    print(f"\n== latency, {n} calls each (ms) ==")
    print(f"{'operation':<36}{'median':>9}{'p99':>9}{'x noop':>9}")
    print(f"{'no-op async actor call':<36}{base_med:>9.3f}{percentile(base, 0.99):>9.3f}{1.0:>9.2f}")
    async with computer.get_workspace("bench-latency") as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        await ws.fs.write_file("/workspace/small.txt", b"x" * 100)
        await ws.fs.write_file("/workspace/notes.md", "alpha\nbeta\ngamma\n")
        setup = await timed(lambda: ws.fs.write_file("/workspace/e.txt", b"v\n"), n)
        setup_med = statistics.median(setup)
        local = await in_process_medians(n)
        for label, fs_op in (
            ("fs.stat", lambda: ws.fs.stat("/workspace/small.txt")),
            ("fs.read_file (100 B)", lambda: ws.fs.read_file("/workspace/small.txt")),
            ("fs.write_file (100 B)", lambda: ws.fs.write_file("/workspace/w.txt", b"y" * 100)),
        ):
            samples = await timed(fs_op, n)
            med = statistics.median(samples)
            # What the call costs beyond the owner's own work, in no-op round trips.
            beyond = (med - local[label]) / base_med
            print(
                f"{label:<36}{med:>9.3f}{percentile(samples, 0.99):>9.3f}{med / base_med:>9.2f}"
                f"   in-process {local[label]:.3f} ms; beyond it {beyond:.2f}x noop"
            )
        # create_tools(client) forwards each file tool call whole to the owner (one round trip); the
        # same tools over a surface without run_tool run client-side, one round trip per fs/lock step.
        for kind, tools in (
            ("forwarded", create_tools(ws)),
            ("client-side", create_tools(ClientSide(ws))),
        ):
            await tool_rows(kind, tools, ws, n, base_med, setup_med)
        assert "error" not in await create_tools(ws)["read"].run({"path": "/workspace/notes.md"})
    ray.kill(noop)


async def throughput(seconds: float) -> None:
    print(f"\n== throughput, 8 concurrent clients, {seconds:.0f} s each (small write + read per op) ==")

    async def worker(ws: Any, path: str, stop: float) -> int:
        done = 0
        while time.monotonic() < stop:
            await ws.fs.write_file(path, b"z" * 64)
            await ws.fs.read_file(path)
            done += 1
        return done

    results = {}
    for label, names in (
        ("8 workspaces", [f"bench-tp-{i}" for i in range(8)]),
        ("1 shared workspace", ["bench-tp-shared"] * 8),
    ):
        clients = [await computer.get_workspace(n) for n in names]
        # Warm up: new owners make Ray start replacement workers, which compete for the CPU a while.
        await asyncio.gather(*[worker(c, f"/f{i}", time.monotonic() + 3.0) for i, c in enumerate(clients)])
        stop = time.monotonic() + seconds
        counts = await asyncio.gather(*[worker(c, f"/f{i}", stop) for i, c in enumerate(clients)])
        rate = sum(counts) / seconds
        results[label] = rate
        print(f"{label:<22}{rate:>10.0f} ops/s ({2 * rate:.0f} calls/s)")
        for c in clients:
            await c.close()
    print(f"shared / separate: {results['1 shared workspace'] / results['8 workspaces']:.2f}x")


async def owner_memory() -> None:
    handle = computer.workspace_actor("bench-tp-shared")
    stats = await handle.stats.remote()
    print(f"\n== one active owner ==\nRSS {stats['rss_bytes'] / 2**20:.1f} MiB (pid {stats['pid']})")


def owner_alive(name: str) -> bool:
    try:
        ray.get_actor(actor_name(name), namespace=NAMESPACE)
    except ValueError:
        return False
    return True


async def wait_hibernated(names: list[str], limit: float) -> None:
    deadline = time.monotonic() + limit
    while any(owner_alive(n) for n in names) and time.monotonic() < deadline:  # noqa: ASYNC110 (remote state)
        await asyncio.sleep(0.5)


async def touch_one(name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/touched", b"1")


async def hibernation(touch: int, hibernate_after: float) -> None:
    print(f"\n== memory: touch {touch} workspaces once, wait past hibernate_after={hibernate_after:.0f} s ==")
    await touch_one("bench-idle-warm")  # Ray's worker pool warm, then back to rest
    await wait_hibernated(["bench-idle-warm"], hibernate_after + 60)
    before = await settled_mem_mib()
    names = [f"bench-idle-{i}" for i in range(touch)]
    start = time.monotonic()
    for batch in range(0, touch, 8):
        await asyncio.gather(*[touch_one(n) for n in names[batch : batch + 8]])
    touched = time.monotonic() - start
    peak = cluster_mem_mib()
    await wait_hibernated(names, hibernate_after + 120)
    after = await settled_mem_mib()
    alive = sum(owner_alive(n) for n in names)
    print(f"touching took {touched:.1f} s ({touch / touched:.1f} workspaces/s)")
    print(
        f"cluster memory (PSS of driver + Ray processes): before {before:.0f} MiB, "
        f"all touched {peak:.0f} MiB (+{(peak - before) / touch:.1f} MiB per awake owner)"
    )
    print(
        f"after hibernation: {after:.0f} MiB = {after / before:.3f}x before (target <= 1.10); owners alive: {alive}"
    )


async def _settled_open(names: list[str]) -> list[Any]:
    clients = []
    for batch in range(0, len(names), 16):
        clients += await asyncio.gather(*[computer.get_workspace(n) for n in names[batch : batch + 16]])
    await asyncio.gather(*[c.fs.write_file("/f", b"1") for c in clients])
    return clients


async def _close_owner(client: Any) -> None:
    """Make ``client``'s workspace asleep: closed inside its host, or its dedicated owner killed."""
    from computer.actors._hosts import HostedHandle

    handle = client.handle
    if isinstance(handle, HostedHandle):
        await handle.host.close_workspace.remote(handle.name)
        return
    ray.kill(handle)
    for _ in range(200):
        try:
            await handle.stats.remote()
        except ray.exceptions.RayActorError:
            return
        await asyncio.sleep(0.05)


async def one_model(owners: str, awake: int, wakes: int, big_writes: float) -> tuple[dict[str, Any], Any]:
    """Memory, cold wakes and the neighbour test of one model; returns its results and a client kept
    open (every other owner stopped) for the small-op latencies, measured for both models in turns."""
    data_dir = tempfile.mkdtemp(prefix=f"cbench-{owners}-")
    conf = computer.init(
        data_dir=data_dir,
        owners=owners,
        owner_hosts_per_node=1,
        hibernate_after=3600.0,
        shell_pool_size=0,
        python_pool_size=0,
    )
    out: dict[str, Any] = {}
    base = await settled_mem_mib(20.0)
    anchor = await computer.get_workspace(f"anchor-{owners}")  # the host stays up (hosted)
    await anchor.fs.write_file("/f", b"1")
    before = await settled_mem_mib(20.0)
    start = time.monotonic()
    clients = await _settled_open([f"awake-{owners}-{i}" for i in range(awake)])
    opened = time.monotonic() - start
    peak = await settled_mem_mib(20.0)
    per = (peak - before) / awake
    out["awake"] = awake
    out["mib_per_workspace"] = per
    out["per_gib"] = 1024 / per if per > 0 else float("inf")
    whole = (peak - base) / (awake + 1)  # with the anchor and, hosted, the host process itself
    out["per_gib_whole"] = 1024 / whole if whole > 0 else float("inf")
    out["open_rate"] = awake / opened
    print(
        f"{owners}: {awake} awake workspaces opened in {opened:.1f} s ({awake / opened:.0f}/s); memory "
        f"{base:.0f} (none) -> {before:.0f} (one) -> {peak:.0f} MiB: {per:.2f} MiB each beyond the first, "
        f"{out['per_gib']:.0f} awake workspaces per GiB; {whole:.2f} MiB each counting the first "
        f"(and its host): {out['per_gib_whole']:.0f} per GiB"
    )
    # Cold wake: the owner closed (its file and the host stay), then a client's first call.
    sleepers = clients[:wakes]
    for c in sleepers:
        await _close_owner(c)
        await c.close()
    samples = []
    for c in sleepers:
        t = time.perf_counter()
        async with computer.get_workspace(c.name) as ws:
            await ws.fs.stat("/f")
        samples.append((time.perf_counter() - t) * 1000)
    out["wake_p50"], out["wake_p99"] = statistics.median(samples), percentile(samples, 0.99)
    print(
        f"{owners}: cold wake through a client, {wakes} wakes: p50 {out['wake_p50']:.1f} ms, p99 {out['wake_p99']:.1f} ms"
    )
    ws = clients[-1]
    await ws.fs.write_file("/small", b"x" * 100)
    # A neighbour (same host when hosted) writes 64 MiB again and again meanwhile. Hosted, in turns
    # with small calls inline on the host's loop (the default) and without (every call crossing to
    # the workspace's thread, as before): both in one window.
    big = clients[-2]
    payload = os.urandom(64 * 2**20)
    stop = time.monotonic() + big_writes
    writes = 0

    async def writer() -> None:
        nonlocal writes
        while time.monotonic() < stop:
            await big.fs.write_file("/big", payload)
            writes += 1

    # "noop": in the same turns, a no-op call to an async actor of its own (no workspace, no owner):
    # the floor any call pays on this machine while the neighbour's client and owner use the CPUs.
    floor = Noop.remote()
    await floor.noop.remote()
    paths: list[bool | str | None] = [True, False, "noop"] if owners == "hosted" else [None, "noop"]
    during: dict[bool | str | None, list[float]] = {p: [] for p in paths}
    task = asyncio.create_task(writer())
    turn = 0
    while not task.done():
        inline = paths[turn % len(paths)]
        if isinstance(inline, bool):
            await ws.handle.host.inline_small_calls.remote(inline)
        turn_end = time.monotonic() + 0.5
        while not task.done() and time.monotonic() < turn_end:
            t = time.perf_counter()
            if inline == "noop":
                await floor.noop.remote()
            else:
                await ws.fs.stat("/small")
            during[inline].append((time.perf_counter() - t) * 1000)
        turn += 1
    await task
    if owners == "hosted":
        await ws.handle.host.inline_small_calls.remote(True)
    same = (await big.handle.stats.remote())["pid"] == (await ws.handle.stats.remote())["pid"]
    ray.kill(floor)
    for inline, got in during.items():
        key = {None: "neighbour", True: "neighbour", False: "neighbour_crossing", "noop": "neighbour_floor"}[
            inline
        ]
        out[key] = (statistics.median(got), percentile(got, 0.99), max(got))
        if inline == "noop":
            print(
                f"{owners}: a no-op call to an actor of its own meanwhile (the floor): p50 {out[key][0]:.3f} ms, "
                f"p99 {out[key][1]:.3f} ms, max {out[key][2]:.1f} ms ({len(got)} calls)"
            )
            continue
        how = {None: "", True: " (small calls inline)", False: " (every call crossing to its thread)"}[inline]
        print(
            f"{owners}{how}: stat while a neighbour ({'same' if same else 'another'} process) wrote 64 MiB "
            f"x{writes}: p50 {out[key][0]:.3f} ms, p99 {out[key][1]:.3f} ms, max {out[key][2]:.1f} ms "
            f"({len(got)} stats)"
        )
    for c in [*clients[:-1], anchor]:
        await c.close()
        if owners == "hosted":
            await c.handle.host.close_workspace.remote(c.name)
        else:
            with contextlib.suppress(ValueError):  # asleep already
                ray.kill(ray.get_actor(actor_name(c.name, conf), namespace=NAMESPACE))
    return out, ws


async def small_ops(models: dict[str, Any], n: int, rounds: int = 6) -> dict[str, dict[str, Any]]:
    """A small op's latency through a client of each model, ``n`` calls per op and model, measured
    in ``rounds`` alternating turns (on a loaded machine, load drifts: turns share it fairly).
    ``"hosted, crossing"`` is the hosted client with small calls handed to the workspace's thread
    like every call (``OwnerHost.inline_small_calls(False)``): the code before they ran inline."""
    ops = {
        "stat": lambda ws: ws.fs.stat("/small"),
        "read 100 B": lambda ws: ws.fs.read_file("/small"),
        "write 100 B": lambda ws: ws.fs.write_file("/w", b"y" * 100),
    }
    samples: dict[str, dict[str, list[float]]] = {m: {label: [] for label in ops} for m in models}
    for turn in range(rounds):
        for model in models if turn % 2 == 0 else reversed(list(models)):
            ws = models[model]
            if model.startswith("hosted"):
                await ws.handle.host.inline_small_calls.remote(model == "hosted")
            for label, op in ops.items():
                samples[model][label] += await timed(lambda ws=ws, op=op: op(ws), max(1, n // rounds))
    for model in models:
        if model.startswith("hosted"):
            await models[model].handle.host.inline_small_calls.remote(True)
    out: dict[str, dict[str, Any]] = {m: {} for m in models}
    for model, by_op in samples.items():
        for label, got in by_op.items():
            out[model][label] = (statistics.median(got), percentile(got, 0.99))
            print(
                f"{model}: {label:<12} p50 {out[model][label][0]:.3f} ms, p99 {out[model][label][1]:.3f} ms"
            )
    return out


async def hand_over_in_process(n: int, rounds: int = 10) -> tuple[float, float]:
    """The hop a hosted call makes from the host's loop to its workspace's loop thread and back, in
    this process (no Ray, no client: the difference alone): a ``stat`` of a workspace open on a
    ``LoopThread``, run inline (the default for small calls) and handed over, in alternating turns.
    Returns the medians in µs."""
    from computer.actors._loop_thread import LoopThread, SharedThreadPool
    from computer.workspace import Workspace

    pool = SharedThreadPool(2, thread_name_prefix="bench-io")
    thread = LoopThread("bench", pool)
    path = os.path.join(tempfile.mkdtemp(prefix="cbench-hop-"), "w.sqlite")

    async def open_it() -> Workspace:
        return Workspace(path)

    ws = await thread.run(open_it())
    await thread.run(ws.fs.write_file("/small", b"x" * 100))
    got: dict[bool, list[float]] = {True: [], False: []}
    for turn in range(2 * rounds):
        inline = turn % 2 == 0
        small = (lambda: True) if inline else None
        for _ in range(max(1, n // rounds)):
            t = time.perf_counter()
            await thread.run(ws.fs.stat("/small"), inline=small)
            got[inline].append((time.perf_counter() - t) * 1e6)
    await thread.run(ws.close())
    thread.stop()
    thread.thread.join(10)
    pool.close()
    return statistics.median(got[True]), statistics.median(got[False])


async def _stop(ws: Any) -> None:
    await ws.close()
    await _close_owner(ws)


async def owner_models(args: argparse.Namespace) -> None:
    print(f"\n== owner models (issue 20), {args.iterations} calls per latency ==")
    dedicated, dedicated_ws = await one_model("dedicated", args.awake_dedicated, args.wakes, args.big_seconds)
    hosted, hosted_ws = await one_model("hosted", args.awake, args.wakes, args.big_seconds)
    latencies = await small_ops(
        {"dedicated": dedicated_ws, "hosted": hosted_ws, "hosted, crossing": hosted_ws},
        args.iterations,
        args.rounds,
    )
    dedicated.update(latencies["dedicated"])
    hosted.update(latencies["hosted"])
    for ws in (dedicated_ws, hosted_ws):
        await _stop(ws)
    inline_us, crossing_us = await hand_over_in_process(10 * args.iterations)
    print(
        f"in process, a stat of a hosted workspace: inline {inline_us:.0f} µs, handed to its thread and "
        f"back {crossing_us:.0f} µs (p50; {crossing_us - inline_us:.0f} µs saved per small call)"
    )
    print("\n== hosted vs dedicated ==")
    print(
        f"awake workspaces per GiB counting the host process: hosted {hosted['per_gib_whole']:.0f} "
        f"({args.awake} awake), dedicated {dedicated['per_gib_whole']:.0f} ({args.awake_dedicated} awake)"
    )
    print(
        f"awake workspaces per GiB: hosted {hosted['per_gib']:.0f}, dedicated {dedicated['per_gib']:.0f} "
        f"({hosted['per_gib'] / dedicated['per_gib']:.1f}x; target hosted >= 300)"
    )
    print(
        f"cold wake p50: hosted {hosted['wake_p50']:.1f} ms, dedicated {dedicated['wake_p50']:.1f} ms "
        f"({dedicated['wake_p50'] / hosted['wake_p50']:.1f}x faster; target hosted <= 20 ms)"
    )
    crossing = latencies["hosted, crossing"]
    for label in ("stat", "read 100 B", "write 100 B"):
        print(
            f"{label:<12} p50 hosted / dedicated: {hosted[label][0] / dedicated[label][0]:.2f}x (target <= 1.1x); "
            f"every call crossing to its thread: {crossing[label][0] / dedicated[label][0]:.2f}x"
        )
    print(
        f"stat p99 next to 64 MiB writes: hosted {hosted['neighbour'][1]:.2f} ms (every call crossing: "
        f"{hosted['neighbour_crossing'][1]:.2f} ms), dedicated {dedicated['neighbour'][1]:.2f} ms "
        "(target hosted <= 5 ms)"
    )
    print(
        f"the floor meanwhile, a no-op call to an actor of its own: p99 {hosted['neighbour_floor'][1]:.2f} ms "
        f"(hosted turns), {dedicated['neighbour_floor'][1]:.2f} ms (dedicated turns); hosted stat p99 / floor "
        f"{hosted['neighbour'][1] / hosted['neighbour_floor'][1]:.2f}x"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--touch", type=int, default=40, help="workspaces touched for the memory test (spec: 500)"
    )
    parser.add_argument("--hibernate-after", type=float, default=5.0)
    parser.add_argument("--models", action="store_true", help="compare the owner models (issue 20) only")
    parser.add_argument(
        "--awake", type=int, default=200, help="--models: awake hosted workspaces (issue: 2,000)"
    )
    parser.add_argument("--awake-dedicated", type=int, default=30, help="--models: awake dedicated ones")
    parser.add_argument("--wakes", type=int, default=20, help="--models: cold wakes measured per model")
    parser.add_argument("--rounds", type=int, default=6, help="--models: alternating turns of small ops")
    parser.add_argument(
        "--big-seconds", type=float, default=6.0, help="--models: neighbour 64 MiB writes for"
    )
    args = parser.parse_args()
    if args.models:
        from computer.actors.raycompat import quiet_driver_messages

        quiet_driver_messages()  # Ray's advice about starting many workers is not a result
        # A cluster of its own (never one another process started): its memory is what is measured.
        ray.init(
            address="local", include_dashboard=False, object_store_memory=512 * 2**20, log_to_driver=False
        )
        print(f"ray {ray.__version__}; {os.cpu_count()} cores")
        await owner_models(args)
        return
    data_dir = tempfile.mkdtemp(prefix="cbench-")
    computer.init(
        data_dir=data_dir, hibernate_after=args.hibernate_after, shell_pool_size=0, python_pool_size=0
    )
    print(f"data dir {data_dir}; ray {ray.__version__}; {os.cpu_count()} cores")
    await hibernation(args.touch, args.hibernate_after)  # first: from a cluster at rest
    await latency(args.iterations)
    await throughput(args.seconds)
    await owner_memory()


if __name__ == "__main__":
    asyncio.run(main())
