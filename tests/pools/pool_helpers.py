"""Helpers of the pool tests: worker stats by name, host processes by command line."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

from computer.actors import NAMESPACE
from computer.actors._pool_registry import named_workers


async def worker_stats(backend: str, size: int = 0) -> list[dict[str, Any]]:
    """The stats of every live worker of a pool (elastic: ``size`` is no longer needed, nor used)."""
    import ray
    from ray.exceptions import RayActorError

    out = []
    for name, (kind, _) in sorted(named_workers().items(), key=lambda item: item[1]):
        if kind != backend:
            continue
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
            out.append(await handle.stats.remote())
        except (ValueError, RayActorError):
            continue  # removed by the control loop meanwhile
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


async def wait_until(condition: Callable[[], bool], *, within: float = 20.0) -> None:
    """Poll a host condition nothing can be awaited for (a process appearing or going away)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within} s")
        await asyncio.sleep(0.05)


def unique_sleep() -> str:
    """A ``sleep`` duration no other test uses, to find that one process on the host."""
    return f"{500 + secrets.randbelow(400)}.{secrets.randbelow(10**6):06d}"
