"""``computer status``: the Ray cluster (nodes, resources), the exec pools, the owners (dedicated
actors, and owner hosts with their workspaces and memory), the directory.

It joins the cluster named by ``--address`` or ``RAY_ADDRESS`` (``auto``: the one Ray finds on this
machine) and never starts one. With none named it joins none (``_not_joined``).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._context import (
    ANSWER_TIMEOUT,
    GlobalOptions,
    check_reachable,
    join_bounded,
    local_settings,
    watch_cluster,
)
from .display import plain_text

__all__ = ["STATUS_WAIT", "show_status"]

# Seconds each of status's GCS calls (nodes, named actors, one actor's lookup) may wait: half the
# watcher's bound, so that a silent GCS ends status with the call that went unanswered named.
STATUS_WAIT = ANSWER_TIMEOUT / 2


def show_status(options: GlobalOptions, console: Console) -> None:
    """Decision: a cluster that was named (``--address``, ``RAY_ADDRESS``) and does not answer is a
    failure (exit 1, before anything is printed), as for every other command; with none named,
    ``status`` joins none and says so (exit 0, ``_not_joined``)."""
    if not options.local:
        check_reachable(
            options.address or os.environ.get("RAY_ADDRESS"),
            alone="status then shows the data directory alone",
        )
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
    console.print(sandbox_line(), soft_wrap=True)
    _directory_summary(options, console)
    _cluster(options, console, config.data_dir)


def sandbox_line() -> str:
    """Whether this machine's exec runs get their namespaces, in one line.

    Decision: where bubblewrap is missing (the README's first command installs no system package)
    or cannot start, every program an agent runs runs as this host user, and only
    ``BackendInfo.isolation`` said so, which no command printed: a user found out by reading the
    code. Probed as the backends probe it (``bwrap_works``, remembered per machine state)."""
    from ..runtime import bwrap_works

    if bwrap_works():
        return "exec sandbox (this machine): bubblewrap: namespaces of its own, no network unless asked"
    return (
        "exec sandbox (this machine): NO namespace isolation: bubblewrap is missing or cannot start "
        "here, so a program an agent runs runs as this host user (apt-get install bubblewrap)"
    )


def _directory_summary(options: GlobalOptions, console: Console) -> None:
    from ._ls import list_workspaces

    rows = list_workspaces(options)
    states = Counter(row.state for row in rows)
    detail = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
    console.print(f"workspaces: {len(rows)}" + (f" ({detail})" if detail else ""))


def _not_joined(console: Console) -> None:
    """What ``status`` says with no cluster named: that it joined none, and the clusters it sees on
    this machine (not joined), with how to show one.

    Decision: no ``--address`` and no ``RAY_ADDRESS`` joins no cluster. ``status`` used Ray's ``auto``,
    which takes the cluster the last ``ray start`` recorded and else any ``gcs_server`` process
    running here: another user's or another project's (a test session's) cluster was shown as if it
    were this CLI's, while every other command with no cluster named works in its own process and
    never uses it. Naming the cluster (``--address auto`` included) joins it as before."""
    console.print(
        "Ray: no cluster named (--address, RAY_ADDRESS), none joined: commands work in this process on "
        "the data directory, without Ray (`computer demo` starts a Ray of its own)",
        soft_wrap=True,
    )
    recorded, running = _clusters_here()
    if recorded:
        console.print(
            f"Ray: `ray start` recorded a cluster on this machine at {recorded} (not joined): "
            f"`computer --address {recorded} status` shows it",
            soft_wrap=True,
            markup=False,
        )
    others = sorted(set(running) - {recorded})
    if others:
        shown = ", ".join(others[:3]) + (f" (+{len(others) - 3})" if len(others) > 3 else "")
        console.print(
            f"Ray: {len(others)} {'other ' if recorded else ''}cluster(s) run on this machine (not joined): "
            f"{shown}; pass --address HOST:PORT to show one",
            soft_wrap=True,
            markup=False,
        )


def _clusters_here() -> tuple[str | None, list[str]]:
    """The cluster the last ``ray start`` on this machine recorded, and the GCS addresses of the Ray
    clusters running here (Ray's ``auto`` picks from both); nothing when Ray cannot tell (its
    functions are private: only these hints depend on them)."""
    try:
        from ray._private.services import find_bootstrap_address, find_gcs_addresses

        recorded = find_bootstrap_address(None)
    except Exception:
        return None, []
    try:
        running = [str(address) for address in find_gcs_addresses()]  # type: ignore[no-untyped-call]
    except Exception:  # psutil missing, a process gone meanwhile
        running = []
    return (str(recorded) if recorded else None), running


def _cluster(options: GlobalOptions, console: Console, data_dir: Path) -> None:
    if options.local:
        _not_joined(console)
        return
    import ray

    address = options.address or os.environ.get("RAY_ADDRESS") or "auto"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ..actors.raycompat import quiet_driver_messages

    def join() -> None:
        quiet_driver_messages()
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)

    check_reachable(address)
    join_bounded(address, join)  # a cluster that does not answer in time ends the command (exit 1)
    try:
        with watch_cluster(
            address, name_silence=True
        ):  # nor may it stop answering after (`ray.nodes()` waits forever)
            _show_cluster(console, address, data_dir)
    finally:
        ray.shutdown()


def _show_cluster(console: Console, address: str, data_dir: Path) -> None:
    """The cluster's part of ``status``. Every GCS call goes through the library's bounded helpers
    (``computer/actors/_nodes.py``), each waited :data:`STATUS_WAIT`: a silent GCS raises
    ``ClusterSilentError``, which ``watch_cluster`` turns into one line naming the call and the
    cluster (exit 1). Before, ``ray.nodes()`` waited forever and ``list_named_actors``/``get_actor``
    60 s each, the watcher's generic "stopped answering" after 20 s the only way out."""
    import ray

    from ..actors import listed_nodes, named_actors
    from ..actors.naming import HOST_PREFIX, OWNER_PREFIX, data_dir_key

    joined = str(ray.get_runtime_context().gcs_address)
    named = address if address == joined else f"{joined} ({address})"  # `auto`, a host name
    nodes = [n for n in listed_nodes(STATUS_WAIT) if n.get("Alive")]
    table = Table(title=f"Ray cluster at {named}: {len(nodes)} node(s)")
    for column in ("node", "address", "CPU", "memory"):
        table.add_column(column)
    for node in nodes:
        resources = node.get("Resources", {})
        memory = resources.get("memory", 0) / 2**30
        table.add_row(str(node["NodeID"])[:12], str(node.get("NodeManagerAddress")),
                      f"{resources.get('CPU', 0):g}", f"{memory:.1f} GiB")  # fmt: skip
    console.print(table)
    actors = named_actors(STATUS_WAIT)
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


def _hosts(console: Console, names: list[str], others: int) -> None:
    """Owner hosts (``owners="hosted"``) of this data directory: node, process, memory, workspaces."""
    import ray

    from ..actors import ClusterSilentError, named_actor
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
            host = named_actor(name, NAMESPACE, STATUS_WAIT)
            answer: Any = ray.get(host.host_stats.remote(), timeout=15)
        except ClusterSilentError:
            raise  # the GCS, not this host: the next lookups would wait as long
        except Exception as exc:  # exited meanwhile, or not answering
            table.add_row(name.rsplit(":", 1)[-1], name.split(":")[3], "-", "-", "-", type(exc).__name__)
            continue
        total += len(answer["workspaces"])
        table.add_row(*host_row(name, answer))
    console.print(table)
    console.print(f"hosted workspaces awake: {total}")


def host_row(name: str, stats: dict[str, Any]) -> tuple[str | Text, ...]:
    """One owner host's row of :func:`_hosts`: its actor's last name part, node, pid, memory, how many
    workspaces are awake and the first four of their names, shown as they are (a workspace's name is
    chosen by a user or a model: no rich markup read in it, control characters escaped)."""
    awake: list[str] = stats["workspaces"]
    rss = stats.get("rss_bytes")
    shown = ", ".join(awake[:4]) + (f", ... (+{len(awake) - 4})" if len(awake) > 4 else "")
    return (
        name.rsplit(":", 1)[-1],
        str(stats["node"])[:12],
        str(stats["pid"]),
        "-" if rss is None else f"{rss / 2**20:.0f} MiB",
        str(len(awake)),
        plain_text(shown or "-"),
    )


def _pools(console: Console) -> None:
    """The pools' control loop: workers per node, queue, waits, runs/s, its latest decisions."""
    import ray

    from ..actors import SCALER_NAME, ClusterSilentError, named_actor
    from ..actors.naming import NAMESPACE

    try:
        scaler = named_actor(SCALER_NAME, NAMESPACE, STATUS_WAIT)
        answer: Any = ray.get(scaler.status.remote(), timeout=15)
    except ClusterSilentError:
        raise  # the GCS, not the control loop: status ends saying so (``watch_cluster``)
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
