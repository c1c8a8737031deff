"""``computer status``: the Ray cluster (nodes, resources), the exec pools, the owners (dedicated
actors, and owner hosts with their workspaces and memory), the directory.

It joins a running cluster (``--address``, ``RAY_ADDRESS``, else ``auto``: one started with
``ray start`` on this machine) and never starts one.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ._context import GlobalOptions, check_reachable, join_bounded, local_settings

__all__ = ["show_status"]


def show_status(options: GlobalOptions, console: Console) -> None:
    """Decision: a cluster that was named (``--address``, ``RAY_ADDRESS``) and does not answer is a
    failure (exit 1, before anything is printed), as for every other command; with none named, no
    cluster running on this machine is a state to report (exit 0)."""
    if not options.local:
        check_reachable(options.address or os.environ.get("RAY_ADDRESS"))
    config = local_settings(options)
    console.print(f"data directory: {config.data_dir}", soft_wrap=True)
    console.print(f"directory: {'Redis ' + config.redis_url if config.redis_url else 'SQLite (embedded)'}")

    def bounds(low: int, high: int | None) -> str:
        return f"{low}..{'elastic' if high is None else max(low, high)}"

    console.print(
        f"pool workers (min..max): shell {bounds(config.shell_pool_size, config.shell_pool_max)}, "
        f"python {bounds(config.python_pool_size, config.python_pool_max)}; each reserves "
        f"{config.pool_worker_cpus:g} CPU, runs {config.pool_runs_per_cpu:g} per CPU at once, goes after "
        f"{config.pool_idle_after:g} s idle; hibernate after {config.hibernate_after:g} s"
    )
    _directory_summary(options, console)
    _cluster(options, console, config.data_dir)


def _directory_summary(options: GlobalOptions, console: Console) -> None:
    from ._ls import list_workspaces

    rows = list_workspaces(options)
    states = Counter(row.state for row in rows)
    detail = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
    console.print(f"workspaces: {len(rows)}" + (f" ({detail})" if detail else ""))


def _cluster(options: GlobalOptions, console: Console, data_dir: Path) -> None:
    import ray

    from ..actors.naming import HOST_PREFIX, OWNER_PREFIX, data_dir_key

    address = options.address or os.environ.get("RAY_ADDRESS") or "auto"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ..actors.raycompat import quiet_driver_messages

    none_found: list[Exception] = []

    def join() -> None:
        quiet_driver_messages()
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError) as exc:
            if not options.local:
                raise
            none_found.append(exc)  # `auto` found no cluster on this machine: a state to report

    check_reachable(address)
    join_bounded(address, join)  # a cluster that does not answer in time ends the command (exit 1)
    if none_found:
        console.print(
            "Ray: no cluster runs on this machine (`ray start --head` starts one); without --address, "
            "commands work in their own process without Ray, and `computer demo` starts a Ray of its own"
        )
        return
    try:
        nodes: list[dict[str, Any]] = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        table = Table(title=f"Ray cluster at {address}: {len(nodes)} node(s)")
        for column in ("node", "address", "CPU", "memory"):
            table.add_column(column)
        for node in nodes:
            resources = node.get("Resources", {})
            memory = resources.get("memory", 0) / 2**30
            table.add_row(str(node["NodeID"])[:12], str(node.get("NodeManagerAddress")),
                          f"{resources.get('CPU', 0):g}", f"{memory:.1f} GiB")  # fmt: skip
        console.print(table)
        actors = ray.util.list_named_actors(all_namespaces=True)
        pools: Counter[str] = Counter()
        owners = ours = 0
        here = f"{OWNER_PREFIX}{data_dir_key(data_dir)}:"  # owners are named per data directory
        hosts_here = f"{HOST_PREFIX}{data_dir_key(data_dir)}:"
        hosts: list[str] = []
        other_hosts = 0
        for actor in actors:
            name = str(actor.get("name", "")) if isinstance(actor, dict) else str(actor)
            if name.startswith("computer:pool:"):
                pools[name.split(":")[2]] += 1
            elif name.startswith(OWNER_PREFIX):
                owners += 1
                ours += name.startswith(here)
            elif name.startswith(hosts_here):
                hosts.append(name)
            elif name.startswith(HOST_PREFIX):
                other_hosts += 1
        pool_text = ", ".join(f"{backend} {count} worker(s)" for backend, count in sorted(pools.items()))
        console.print(f"exec pools: {pool_text or 'none started yet (they start with the first exec)'}")
        _pools(console)
        console.print(f"dedicated workspace owners: {owners} ({ours} of this data directory)")
        _hosts(console, sorted(hosts), other_hosts)
    finally:
        ray.shutdown()


def _hosts(console: Console, names: list[str], others: int) -> None:
    """Owner hosts (``owners="hosted"``) of this data directory: node, process, memory, workspaces."""
    import ray

    from ..actors.naming import NAMESPACE

    suffix = f" (+{others} of other data directories)" if others else ""
    if not names:
        console.print(f"owner hosts: none awake{suffix}")
        return
    table = Table(title=f"owner hosts: {len(names)}{suffix}")
    for column in ("host", "node", "pid", "memory", "workspaces", "awake"):
        table.add_column(column, justify="right" if column in ("pid", "memory", "workspaces") else "left")
    total = 0
    for name in names:
        try:
            answer: Any = ray.get(ray.get_actor(name, namespace=NAMESPACE).host_stats.remote(), timeout=15)
        except Exception as exc:  # exited meanwhile, or not answering
            table.add_row(name.rsplit(":", 1)[-1], name.split(":")[3], "-", "-", "-", type(exc).__name__)
            continue
        stats: dict[str, Any] = answer
        awake: list[str] = stats["workspaces"]
        total += len(awake)
        rss = stats.get("rss_bytes")
        shown = ", ".join(awake[:4]) + (f", ... (+{len(awake) - 4})" if len(awake) > 4 else "")
        table.add_row(
            name.rsplit(":", 1)[-1],
            str(stats["node"])[:12],
            str(stats["pid"]),
            "-" if rss is None else f"{rss / 2**20:.0f} MiB",
            str(len(awake)),
            shown or "-",
        )
    console.print(table)
    console.print(f"hosted workspaces awake: {total}")


def _pools(console: Console) -> None:
    """The pools' control loop: workers per node, queue, waits, runs/s, its latest decisions."""
    import ray

    from ..actors import SCALER_NAME
    from ..actors.naming import NAMESPACE

    try:
        scaler = ray.get_actor(SCALER_NAME, namespace=NAMESPACE)
        answer: Any = ray.get(scaler.status.remote(), timeout=15)
    except Exception as exc:  # not started yet (no exec so far), or restarting
        console.print(f"pool control loop: not answering ({type(exc).__name__})")
        return
    state: dict[str, Any] = answer
    window = f"last {state['window']:g} s"
    table = Table(
        title=f"exec pools (control loop: {state['rounds']} rounds; waits and runs/s over the {window})"
    )
    for column in (
        "pool",
        "min..max",
        "workers per node",
        "running",
        "queued",
        "p50 wait",
        "p99 wait",
        "runs/s",
    ):
        table.add_column(column)
    decisions: list[str] = []
    for backend, pool in sorted(state["pools"].items()):
        per_node: dict[str, Counter[str]] = {}
        for worker in pool["workers"]:
            node = (worker["node_id"] or "unplaced")[:12]
            per_node.setdefault(node, Counter())[worker["state"]] += 1
        nodes = "; ".join(
            f"{node}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
            for node, counts in sorted(per_node.items())
        )
        table.add_row(
            backend,
            _size(pool),
            nodes or "none",
            str(pool["running"]),
            str(pool["queued"]),
            _seconds(pool["wait_p50"]),
            _seconds(pool["wait_p99"]),
            f"{pool['runs_per_s']:.1f}",
        )
        decisions += [f"{backend}: {what}" for _, what in pool["decisions"][-5:]]
    console.print(table)
    if decisions:
        console.print("latest decisions:\n  " + "\n  ".join(decisions), soft_wrap=True)


def _size(pool: dict[str, Any]) -> str:
    """A pool's size column: ``off`` for a pool turned off (maximum 0), else ``min..max``, elastic when
    the maximum is above the minimum (``auto``: a maximum not set follows the cluster's CPUs)."""
    if not pool["max"]:
        return "off"
    size = f"{pool['min']}..{pool['max']}"
    if pool["max"] > pool["min"]:
        size += " (elastic, auto)" if pool["max_setting"] is None else " (elastic)"
    return size


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.0f} s"
