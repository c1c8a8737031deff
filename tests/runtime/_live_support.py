"""Helpers of the live-sandbox tests (shell and python): bounded polling, and host processes by their
command line."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    """Poll ``check`` until true, within a bound."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {within} s")
        await asyncio.sleep(0.05)


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (this process left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read().replace(b"\0", b" "):
                        found.append(int(entry))
            except OSError:
                pass
    return [p for p in found if p != os.getpid()]
