"""``computer status``: the Ray cluster (nodes, resources), the exec pools and owners, the directory.

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

from ._context import CliError, GlobalOptions, check_reachable, local_settings

__all__ = ["show_status"]


def show_status(options: GlobalOptions, console: Console) -> None:
    config = local_settings(options)
    console.print(f"data directory: {config.data_dir}", soft_wrap=True)
    console.print(f"directory: {'Redis ' + config.redis_url if config.redis_url else 'SQLite (embedded)'}")
    console.print(
        f"pool sizes: shell {config.shell_pool_size}, python {config.python_pool_size}; "
        f"hibernate after {config.hibernate_after:g} s"
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

    from ..actors.naming import OWNER_PREFIX, data_dir_key

    address = options.address or os.environ.get("RAY_ADDRESS") or "auto"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ..actors.raycompat import quiet_driver_messages

    try:
        check_reachable(address)
        quiet_driver_messages()
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (CliError, ConnectionError, RuntimeError) as exc:
        console.print(
            f"Ray: no running cluster at {address} ({exc}); commands start a local one for their lifetime"
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
        for actor in actors:
            name = str(actor.get("name", "")) if isinstance(actor, dict) else str(actor)
            if name.startswith("computer:pool:"):
                pools[name.split(":")[2]] += 1
            elif name.startswith(OWNER_PREFIX):
                owners += 1
                ours += name.startswith(here)
        pool_text = ", ".join(f"{backend} {count} worker(s)" for backend, count in sorted(pools.items()))
        console.print(f"exec pools: {pool_text or 'none started yet (they start with the first exec)'}")
        console.print(f"live workspace owners: {owners} ({ours} of this data directory)")
    finally:
        ray.shutdown()
