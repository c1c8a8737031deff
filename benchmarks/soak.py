"""Soak: many agents on their own workspaces plus workers sharing one, every tool and exec, for minutes.

Run: ``.venv/bin/python benchmarks/soak.py [--minutes 5] [--agents 50] [--shared-workers 8] [--json out.json]``.

Each agent drives the tools of its own workspace through a client (``get_workspace`` + ``create_tools``)
with a random mix of read, ls, find, grep, write, edit, delete, exec (shell and python), and logs what
each acknowledged mutation left behind. The shared workers increment one counter under the workspace's
locks and write files of their own there. At the end every workspace is read back and compared with
the logs: a file that is missing, different, or present after an acknowledged delete is a lost write
(must be 0), and the shared counter must equal the number of acknowledged increments.

Prints (and with ``--json`` writes) ops/s, p50/p99 latency per tool, errors by kind, and lost writes.
Starts its own local Ray and data directory; needs no Redis.

``--faults``: instead, the fault-injection workload of ``tests/reliability/_faults.py`` for
``--minutes``: clients in two processes (``--clients`` each) on one workspace, owners, shell pool
workers and a Redis of its own killed at random every 1-3 s, every history checked by the
linearizability-style checker. Prints operations, faults injected and anomalies (target: zero);
exits 1 on any anomaly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray

import computer
from computer.actors import NAMESPACE, actor_name
from computer.tools import create_tools

WORDS = ["alpha", "beta", "gamma", "delta", "kappa", "omega", "sigma", "theta"]


class Log:
    """Latencies per tool, errors by kind, and the expected final state of each workspace."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[str] = Counter()
        self.ops = 0

    def note(self, tool: str, seconds: float, result: Any) -> None:
        self.ops += 1
        self.latency[tool].append(seconds)
        if isinstance(result, dict) and ("error" in result or result.get("status") == "failed"):
            kind = str(result.get("error") or f"run failed: {result.get('stderr', '')[-60:]}").split(":")[0]
            self.errors[f"{tool}: {kind[:60]}"] += 1


async def timed(log: Log, tool: str, call: Any) -> Any:
    start = time.perf_counter()
    try:
        result = await call
    except Exception as exc:  # an exception from a tool is itself a finding: tools never raise
        log.errors[f"{tool}: raised {type(exc).__name__}"] += 1
        log.latency[tool].append(time.perf_counter() - start)
        log.ops += 1
        return None
    log.note(tool, time.perf_counter() - start, result)
    return result


def _text(rng: random.Random, lines: int) -> str:
    return "".join(f"{rng.choice(WORDS)} {rng.randrange(10**6)}\n" for _ in range(lines))


async def agent(index: int, until: float, log: Log) -> dict[str, str | None]:
    """One agent on workspace ``soak-<index>``; returns its model: path -> content (None = deleted)."""
    rng = random.Random(index)
    model: dict[str, str | None] = {}
    async with computer.get_workspace(f"soak-{index}") as ws:
        tools = create_tools(ws)
        while time.monotonic() < until:
            roll = rng.random()
            path = f"/workspace/src/f{rng.randrange(12)}.txt"
            if roll < 0.22:
                content = _text(rng, rng.randrange(1, 40))
                result = await timed(log, "write", tools["write"].run({"path": path, "content": content}))
                if isinstance(result, dict) and "error" not in result:
                    model[path] = content
            elif roll < 0.34 and model.get(path):
                old = model[path] or ""
                line = old.splitlines(keepends=True)[0]
                new_line = f"edited {rng.randrange(10**9)}\n"
                args: dict[str, Any] = {"path": path, "edits": [{"oldText": line, "newText": new_line}]}
                result = await timed(log, "edit", tools["edit"].run(args))
                if isinstance(result, dict) and "error" not in result:
                    model[path] = old.replace(line, new_line, 1)
            elif roll < 0.40:
                result = await timed(log, "delete", tools["delete"].run({"path": path}))
                if isinstance(result, dict) and "error" not in result:
                    model[path] = None
            elif roll < 0.60:
                present = sorted(p for p, c in model.items() if c is not None)
                if present:  # reads of files the agent knows exist: any error is a finding
                    await timed(log, "read", tools["read"].run({"path": rng.choice(present)}))
            elif roll < 0.70:
                await timed(log, "ls", tools["ls"].run({"path": "/workspace/src"}))
            elif roll < 0.78:
                await timed(log, "find", tools["find"].run({"path": "/workspace", "pattern": "**/*.txt"}))
            elif roll < 0.88:
                await timed(
                    log, "grep", tools["grep"].run({"path": "/workspace", "query": rng.choice(WORDS)})
                )
            elif roll < 0.95:
                out = f"/workspace/out/e{rng.randrange(4)}.txt"
                stamp = str(rng.randrange(10**9))
                cmd = f"mkdir -p out && ls src | wc -l > /dev/null && echo {stamp} > {out}"
                result = await timed(
                    log, "exec:shell", tools["exec"].run({"backend": "shell", "command": cmd})
                )
                if isinstance(result, dict) and result.get("status") == "completed":
                    model[out] = f"{stamp}\n"
            else:
                code = "def main(input):\n    return sum(range(input['n']))\n"
                args = {"backend": "python", "command": code, "input": {"n": rng.randrange(1000)}}
                await timed(log, "exec:python", tools["exec"].run(args))
    return model


async def shared_worker(worker: int, until: float, log: Log) -> tuple[int, dict[str, str]]:
    """Increment the shared counter under the lock table and write files of its own."""
    increments = 0
    written: dict[str, str] = {}
    rng = random.Random(1000 + worker)
    async with computer.get_workspace("soak-shared") as ws:
        tools = create_tools(ws)
        while time.monotonic() < until:
            start = time.perf_counter()
            try:
                async with ws.locks.hold(["/counter"]):
                    value = int(await ws.fs.read_text("/counter"))
                    await ws.fs.write_file("/counter", str(value + 1))
                increments += 1
                log.note("shared:increment", time.perf_counter() - start, None)
            except Exception as exc:
                log.errors[f"shared:increment: raised {type(exc).__name__}"] += 1
            path = f"/workspace/w{worker}/{rng.randrange(8)}.txt"
            content = _text(rng, 3)
            result = await timed(log, "shared:write", tools["write"].run({"path": path, "content": content}))
            if isinstance(result, dict) and "error" not in result:
                written[path] = content
    return increments, written


async def verify(
    models: list[dict[str, str | None]], shared: list[tuple[int, dict[str, str]]]
) -> dict[str, Any]:
    lost: list[str] = []
    checked = 0
    for index, model in enumerate(models):
        async with computer.get_workspace(f"soak-{index}") as ws:
            for path, content in model.items():
                checked += 1
                if content is None:
                    if await ws.fs.exists(path):
                        lost.append(f"soak-{index}:{path} (deleted, yet present)")
                elif not await ws.fs.exists(path) or await ws.fs.read_text(path) != content:
                    lost.append(f"soak-{index}:{path}")
    async with computer.get_workspace("soak-shared") as ws:
        counter = int(await ws.fs.read_text("/counter"))
        for _, written in shared:
            for path, content in written.items():
                checked += 1
                if not await ws.fs.exists(path) or await ws.fs.read_text(path) != content:
                    lost.append(f"soak-shared:{path}")
    increments = sum(n for n, _ in shared)
    if counter != increments:
        lost.append(f"soak-shared:/counter is {counter}, {increments} increments were acknowledged")
    return {"checked_writes": checked, "lost_writes": len(lost), "lost": lost[:20], "increments": increments}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def soak(minutes: float, agents: int, workers: int) -> dict[str, Any]:
    log = Log()
    async with computer.get_workspace("soak-shared") as ws:
        await ws.fs.write_file("/counter", "0")
    # Open every owner first, so the timed window measures work, not actor start-up.
    for i in range(agents):
        async with computer.get_workspace(f"soak-{i}") as ws:
            await ws.fs.mkdir("/workspace/src", recursive=True)
    start = time.monotonic()
    until = start + minutes * 60
    agent_tasks = [asyncio.create_task(agent(i, until, log)) for i in range(agents)]
    worker_tasks = [asyncio.create_task(shared_worker(w, until, log)) for w in range(workers)]
    models = await asyncio.gather(*agent_tasks)
    shared = await asyncio.gather(*worker_tasks)
    elapsed = time.monotonic() - start
    check = await verify(list(models), list(shared))
    per_tool = {
        tool: {
            "count": len(values),
            "p50_ms": round(statistics.median(values) * 1000, 1),
            "p99_ms": round(_percentile(values, 0.99) * 1000, 1),
        }
        for tool, values in sorted(log.latency.items())
    }
    everything = [v for values in log.latency.values() for v in values]
    return {
        "minutes": round(elapsed / 60, 2),
        "agents": agents,
        "shared_workers": workers,
        "ops": log.ops,
        "ops_per_s": round(log.ops / elapsed, 1),
        "p50_ms": round(statistics.median(everything) * 1000, 1) if everything else None,
        "p99_ms": round(_percentile(everything, 0.99) * 1000, 1) if everything else None,
        "per_tool": per_tool,
        "errors": dict(log.errors.most_common()),
        **check,
    }


def _print(report: dict[str, Any]) -> None:
    print(
        f"soak: {report['agents']} agents + {report['shared_workers']} shared workers for {report['minutes']} min: "
        f"{report['ops']} ops, {report['ops_per_s']} ops/s, p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms"
    )
    print(f"{'tool':<18}{'count':>8}{'p50 ms':>10}{'p99 ms':>10}")
    for tool, row in report["per_tool"].items():
        print(f"{tool:<18}{row['count']:>8}{row['p50_ms']:>10}{row['p99_ms']:>10}")
    print(f"errors: {report['errors'] or 'none'}")
    print(f"checked writes: {report['checked_writes']}, lost writes: {report['lost_writes']}")
    for line in report["lost"]:
        print(f"  LOST {line}")


def fault_tools() -> tuple[Any, Any]:
    """The fault-injection workload and the Redis server class, from the test suite: its root and its
    ``tests`` folder (where the suite's shared modules such as ``owner_models`` live, as pytest puts
    them on the path) go on ``sys.path``."""
    import sys

    root = Path(__file__).resolve().parents[1]
    for folder in (root / "tests", root):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    from tests.reliability._faults import run
    from tests.reliability.test_redis_restart import RedisProcess

    return run, RedisProcess


def faults(minutes: float, clients: int, data_dir: Path, exec_share: float) -> dict[str, Any]:
    """The fault-injection run (see ``--faults``), with a Redis of its own on a loopback port."""
    run, RedisProcess = fault_tools()
    redis = RedisProcess(data_dir, persistent=True)
    redis.start()
    try:
        computer.init(data_dir=data_dir / "data", redis_url=redis.url, lock_lease=3.0, shell_pool_size=1)
        started = time.monotonic()
        report = asyncio.run(
            run(
                seconds=minutes * 60,
                clients_per_process=clients,
                every=(1.0, 3.0),
                redis=redis,
                exec_share=exec_share,
            )
        ).as_dict()
        report["seconds"] = round(time.monotonic() - started, 1)
    finally:
        if redis.proc is not None:
            redis.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--shared-workers", type=int, default=8)
    parser.add_argument("--faults", action="store_true", help="run the fault-injection workload instead")
    parser.add_argument("--clients", type=int, default=3, help="--faults: clients per process")
    parser.add_argument("--exec-share", type=float, default=0.03, help="--faults: share of shell runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="soak-"))
    if args.faults:
        ray.init(
            include_dashboard=False,
            object_store_memory=256 * 1024 * 1024,
            _temp_dir=tempfile.mkdtemp(prefix="rs-", dir="/tmp"),
            log_to_driver=False,
        )
        try:
            result = faults(args.minutes, args.clients, data_dir, args.exec_share)
        finally:
            ray.shutdown()
        print(json.dumps(result, indent=2))
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=2))
        raise SystemExit(1 if result["anomalies"] else 0)
    ray.init(
        include_dashboard=False,
        object_store_memory=256 * 1024 * 1024,
        _temp_dir=tempfile.mkdtemp(prefix="rs-", dir="/tmp"),
        log_to_driver=False,
    )
    try:
        computer.init(data_dir=data_dir, shell_pool_size=2, python_pool_size=2)
        report = asyncio.run(soak(args.minutes, args.agents, args.shared_workers))
        for name in [f"soak-{i}" for i in range(args.agents)] + ["soak-shared"]:
            try:
                ray.kill(ray.get_actor(actor_name(name), namespace=NAMESPACE))
            except ValueError:
                pass
    finally:
        ray.shutdown()
    _print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    raise SystemExit(1 if report["lost_writes"] else 0)


if __name__ == "__main__":
    main()
