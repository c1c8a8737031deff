"""Helpers of the pool tests: worker stats by name, host processes by command line."""

from __future__ import annotations

import os
from typing import Any

from computer.actors import NAMESPACE
from computer.actors._pool_registry import worker_name


async def worker_stats(backend: str, size: int) -> list[dict[str, Any]]:
    """The stats of the live workers ``0..size-1`` of a pool (missing ones are left out)."""
    import ray

    out = []
    for i in range(size):
        try:
            handle = ray.get_actor(worker_name(backend, i), namespace=NAMESPACE)
        except ValueError:
            continue
        out.append(await handle.stats.remote())
    return out


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (sandboxed processes are visible from the host)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            pids.append(int(entry))
    return pids
