"""Fault injection with a linearizability-style checker (issue 25 item 7), shared by the slow test in
``test_fault_injection.py`` (a short run) and ``benchmarks/soak.py --faults`` (a long one).

Clients in two processes (the driver and a Ray task) work on one workspace: register writes and reads
on a few keys (every value unique), increments of one counter under a lock (read, then write n + 1),
and now and then a shell run that writes a key. Meanwhile an injector kills, at random moments, the
owner (SIGKILL: restarted in place; ``ray.kill``: re-created), an exec pool worker, and Redis (stopped,
then started again on the same port). Every operation is logged with its start, end and outcome:
``ok``, ``failed`` (definitely not applied: a write refused under a lost lock, an upload lost with its
owner), or ``unknown`` (cut by a death; a shell run that did not complete cleanly, since a killed run
keeps what it wrote).

The checker, per key (values are unique, so a read names the write it saw):
- a read returns the initial value or a value of a write that was not ``failed`` and had started
  before the read ended (no failed write visible, nothing from the future);
- a read is not stale: no write that was acknowledged before the read started came after the write
  whose value it returned (after = started after that write had ended);
- the final value obeys the same rule against every acknowledged write;
- counter: no two acknowledged increments wrote the same number (no lost update), every acknowledged
  increment's number is in the chain, and the final number lies between the acknowledged increments
  and those plus the unknown ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

KEYS = [f"/workspace/k{i}" for i in range(4)]
COUNTER = "/workspace/counter"
INITIAL = "init"


@dataclass
class Op:
    client: str
    kind: str  # write | read | incr | exec
    key: str
    value: str | None  # written value; for a read, the value seen
    start: float
    end: float = 0.0
    outcome: str = "ok"  # ok | failed | unknown
    error: str = ""


@dataclass
class Report:
    operations: int = 0
    by_outcome: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
    counter_acknowledged: int = 0
    counter_unknown: int = 0
    counter_final: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    # For each anomaly, the writes of its key from the stale value's write to the read, and the
    # faults injected meanwhile (times relative to the stale write's start): printed on failure.
    evidence: list[list[str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _outcome(exc: BaseException) -> str:
    """``failed`` only when the write certainly did not apply; ``unknown`` otherwise."""
    from computer.actors import OutcomeUnknownError, UploadLostError
    from computer.storage.errors import LockLostError

    if isinstance(exc, LockLostError | UploadLostError):
        return "failed"
    if isinstance(exc, OutcomeUnknownError):
        return "unknown"
    if isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
        return "unknown"  # unavailable: conservatively unknown
    if isinstance(exc, OSError):
        return "failed"  # an fs error from the owner: the write's transaction did not commit
    return "unknown"


async def client_loop(
    name: str, client: str, until: float, seed: int, exec_share: float
) -> list[dict[str, Any]]:
    """One client's operations until ``until``; returns its history."""
    import computer

    rng = random.Random(seed)
    history: list[Op] = []
    seq = 0
    ws = None
    while time.time() < until:
        if ws is None:
            try:
                ws = await computer.get_workspace(name)
            except Exception:
                await asyncio.sleep(0.2)
                continue
        roll = rng.random()
        key = rng.choice(KEYS)
        seq += 1
        value = f"{client}:{seq}"
        if roll < exec_share:
            op = Op(client, "exec", key, value, time.time())
            try:
                # Written aside and renamed: the key never holds a half-written value. A run that did
                # not complete may still have been pulled (a killed run keeps what it wrote), and a
                # skipped path is left as the workspace had it: either way, the outcome is unknown.
                tmp = f"{key}.{client}.tmp"
                command = f"printf %s {value} > {tmp} && mv {tmp} {key}"
                result = await (await ws.runtime.exec(command, backend="shell", timeout=60)).result()
                if result.status != "completed" or key in result.skipped:
                    op.outcome = "unknown"
                    op.error = f"exec {result.status}" + (" (skipped)" if key in result.skipped else "")
            except Exception as exc:
                op.outcome, op.error = "unknown", type(exc).__name__
        elif roll < 0.45:
            op = Op(client, "write", key, value, time.time())
            try:
                await ws.fs.write_file(key, value.encode())
            except Exception as exc:
                op.outcome, op.error = _outcome(exc), type(exc).__name__
        elif roll < 0.8:
            op = Op(client, "read", key, None, time.time())
            try:
                op.value = (await ws.fs.read_file(key)).decode()
            except Exception as exc:
                op.outcome, op.error = "failed", type(exc).__name__
        else:
            op = Op(client, "incr", COUNTER, None, time.time())
            try:
                async with ws.locks.hold([COUNTER]):
                    current = int((await ws.fs.read_file(COUNTER)).decode().split()[0])
                    op.value = f"{current + 1} {value}"
                    try:
                        await ws.fs.write_file(COUNTER, op.value.encode())
                    except Exception as exc:
                        op.outcome, op.error = _outcome(exc), type(exc).__name__
            except Exception as exc:  # the lock or the read failed: nothing was written
                if op.value is None or op.outcome == "ok":
                    op.outcome = "failed" if op.value is None else "ok"
                op.error = op.error or type(exc).__name__
        op.end = time.time()
        history.append(op)
    if ws is not None:
        with contextlib.suppress(Exception):
            await ws.close()
    return [asdict(op) for op in history]


def run_in_task(
    name: str, clients: list[str], until: float, seed: int, exec_share: float
) -> list[dict[str, Any]]:
    """The second process: a Ray task running its own clients."""

    async def run() -> list[dict[str, Any]]:
        parts = await asyncio.gather(
            *(client_loop(name, c, until, seed + i, exec_share) for i, c in enumerate(clients))
        )
        return [op for part in parts for op in part]

    return asyncio.run(run())


class Injector:
    """Kills things at random moments; counts what it injected."""

    def __init__(self, name: str, rng: random.Random, redis: Any | None) -> None:
        self.name = name
        self.rng = rng
        self.redis = redis
        self.faults: dict[str, int] = {}
        self.when: list[tuple[float, str]] = []  # (time, fault): an anomaly's evidence

    def _count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.when.append((time.time(), fault))

    async def _owner(self) -> Any:
        """The process owning the workspace now (its host, or its dedicated actor); None asleep."""
        from owner_models import awake_owner

        from computer.actors import cluster_settings

        return await awake_owner(self.name, cluster_settings())

    async def sigkill_owner(self) -> None:
        from owner_models import process_pid

        owner = await self._owner()
        if owner is None:
            return
        with contextlib.suppress(Exception):
            pid = await asyncio.wait_for(process_pid(owner), 5)
            os.kill(pid, signal.SIGKILL)
            self._count("owner SIGKILL (restarted in place)")

    async def ray_kill_owner(self) -> None:
        import ray

        owner = await self._owner()
        if owner is not None:
            ray.kill(owner)
            self._count("owner ray.kill (re-created)")

    async def kill_pool_worker(self) -> None:
        import ray

        names = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if str(a["name"]).startswith("computer:pool:shell:")
        ]
        if not names:
            return
        from computer.actors import NAMESPACE

        with contextlib.suppress(Exception):
            worker = ray.get_actor(self.rng.choice(names), namespace=NAMESPACE)
            if self.rng.random() < 0.5:
                ray.kill(worker, no_restart=False)
                self._count("shell pool worker ray.kill")
            else:
                pid = int((await asyncio.wait_for(worker.stats.remote(), 5))["pid"])
                os.kill(pid, signal.SIGKILL)
                self._count("shell pool worker SIGKILL")

    async def restart_redis(self) -> None:
        if self.redis is None:
            return
        await asyncio.to_thread(self.redis.stop)
        await asyncio.sleep(self.rng.uniform(0.2, 1.5))
        await asyncio.to_thread(self.redis.start)
        self._count("Redis stopped and started")

    async def run(self, until: float, every: tuple[float, float]) -> None:
        choices: list[Callable[[], Any]] = [self.sigkill_owner, self.ray_kill_owner, self.kill_pool_worker]
        if self.redis is not None:
            choices.append(self.restart_redis)
        while True:
            delay = self.rng.uniform(*every)
            await asyncio.sleep(max(min(delay, until - time.time()), 0.0))
            if time.time() >= until:
                return
            await self.rng.choice(choices)()


def check(history: list[dict[str, Any]], final: dict[str, str]) -> Report:
    """The checker (see the module docstring); ``final`` maps each key to the value read at the end."""
    ops = [Op(**o) for o in history]
    report = Report(operations=len(ops))
    for op in ops:
        report.by_outcome[f"{op.kind}:{op.outcome}"] = report.by_outcome.get(f"{op.kind}:{op.outcome}", 0) + 1
        if op.error:
            report.errors[op.error] = report.errors.get(op.error, 0) + 1
    writes = [o for o in ops if o.kind in ("write", "exec") and o.value is not None]
    by_value = {w.value: w for w in writes}

    def judge(key: str, seen: str | None, start: float, end: float, what: str) -> None:
        if seen is None:
            return
        if seen == INITIAL:
            source_end = -1.0
        else:
            w = by_value.get(seen)
            if w is None or w.key != key:
                report.anomalies.append(f"{what}: {key} holds {seen!r}, which no write of that key wrote")
                return
            if w.outcome == "failed":
                report.anomalies.append(f"{what}: {key} holds {seen!r} from a write reported failed")
                return
            if w.start > end:
                report.anomalies.append(f"{what}: {key} holds {seen!r} before it was written")
                return
            source_end = w.end
        for w2 in writes:
            if w2.key == key and w2.outcome == "ok" and w2.end < start and w2.start > source_end:
                report.anomalies.append(
                    f"{what}: {key} holds {seen!r}, superseded by acknowledged {w2.value!r}"
                )
                origin = by_value[seen].start if seen in by_value else start - 5.0
                around = [o for o in writes if o.key == key and origin - 1.0 <= o.start <= end][:80]
                report.evidence.append(
                    [f"read {start - origin:+.3f}..{end - origin:+.3f}"]
                    + [
                        f"{o.kind} {o.value} {o.start - origin:+.3f}..{o.end - origin:+.3f} {o.outcome} {o.error}"
                        for o in around
                    ]
                )
                return

    for op in ops:
        if op.kind == "read" and op.outcome == "ok":
            judge(op.key, op.value, op.start, op.end, f"read by {op.client}")
    horizon = max((o.end for o in ops), default=0.0) + 1.0
    for key in KEYS:
        judge(key, final.get(key), horizon, horizon, "final state")

    incs = [o for o in ops if o.kind == "incr" and o.value is not None]
    acked = [o for o in incs if o.outcome == "ok"]
    numbers = [int(o.value.split()[0]) for o in acked if o.value]
    duplicates = sorted({n for n in numbers if numbers.count(n) > 1})
    if duplicates:
        report.anomalies.append(f"counter: lost update, acknowledged increments wrote {duplicates} twice")
    report.counter_acknowledged = len(acked)
    report.counter_unknown = sum(1 for o in incs if o.outcome == "unknown")
    final_counter = final.get(COUNTER, "0")
    report.counter_final = int(final_counter.split()[0])
    tag = final_counter.split()[1] if " " in final_counter else None
    if tag is not None:
        last = next((o for o in incs if o.value == final_counter), None)
        if last is None or last.outcome == "failed":
            report.anomalies.append(f"counter: final value {final_counter!r} from a failed or unknown writer")
    if not report.counter_acknowledged <= report.counter_final <= len(acked) + report.counter_unknown:
        report.anomalies.append(
            f"counter: {report.counter_final} after {len(acked)} acknowledged "
            f"and {report.counter_unknown} unknown increments"
        )
    return report


async def run(
    *,
    seconds: float,
    clients_per_process: int,
    every: tuple[float, float],
    redis: Any | None = None,
    seed: int | None = None,
    exec_share: float = 0.03,
) -> Report:
    """One fault-injection run over an already initialised ``computer`` (and Ray)."""
    import ray

    import computer

    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    name = f"faults-{uuid.uuid4().hex[:10]}"
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        for key in KEYS:
            await ws.fs.write_file(key, INITIAL.encode())
        await ws.fs.write_file(COUNTER, b"0")
    until = time.time() + seconds
    # The second process cannot import this test module by name: ship its code by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    task = ray.remote(num_cpus=0)(run_in_task).remote(
        name, [f"p2c{i}" for i in range(clients_per_process)], until, seed + 100, exec_share
    )
    injector = Injector(name, rng, redis)
    local = [client_loop(name, f"p1c{i}", until, seed + i, exec_share) for i in range(clients_per_process)]
    parts = await asyncio.gather(injector.run(until, every), *local)
    history: list[dict[str, Any]] = [op for part in parts[1:] for op in part]
    history += await asyncio.wrap_future(task.future())
    final: dict[str, str] = {}
    async with computer.get_workspace(name) as ws:
        for key in [*KEYS, COUNTER]:
            for attempt in range(100):
                try:
                    final[key] = (await ws.fs.read_file(key)).decode()
                    break
                except OSError:
                    if attempt == 99:
                        raise
                    await asyncio.sleep(0.2)
    with contextlib.suppress(Exception):
        from owner_models import owner_process

        ray.kill(owner_process(computer.workspace_actor(name)))
    report = check(history, final)
    report.faults = injector.faults
    for lines, ops in zip(report.evidence, _origins(report, history), strict=False):
        lines += [f"fault {fault} {at - ops:+.3f}" for at, fault in injector.when if ops - 1.0 <= at]
    return report


def _origins(report: Report, history: list[dict[str, Any]]) -> list[float]:
    """Each anomaly's stale write's start (its evidence's time zero)."""
    start = {o["value"]: o["start"] for o in history if o["kind"] in ("write", "exec")}
    found = []
    for anomaly in report.anomalies:
        if "superseded" in anomaly:
            found.append(start.get(anomaly.split(" holds ")[1].split("'")[1], 0.0))
    return found
