"""Helpers of the live-sandbox tests (shell and python): bounded polling, and host processes by their
command line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

# The default bound of the polls below: what a loaded machine (CI's 2 cores under the suite's own load)
# can delay by seconds, a sandbox's process showing or its sync coming. A poll that comes true returns
# at once: the bound costs nothing then.
BOUND = 30.0


async def eventually(check: Callable[[], Awaitable[bool]], within: float = BOUND) -> None:
    """Poll ``check`` until true, within a bound."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {within} s")
        await asyncio.sleep(0.05)


def settles(mirror: Any, paced: bool = False, within: float = BOUND) -> bool:
    """Whether ``mirror.quiet(paced)`` comes true within a bound. The cheap look says "cannot tell"
    (not quiet) while the process's inotify reader holds the shared lock or other mirrors' events
    fill the queue (the full suite's sandboxes): a moment later it can tell. Events of ``mirror``'s
    own stay until drained, so a real change keeps it false for the whole bound."""
    deadline = time.monotonic() + within
    while not mirror.quiet(paced):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def ticks_on(ws: Any, path: str = "tick", within: float = BOUND) -> None:
    """A sandbox's background loop rewriting ``path`` goes on: a later run reads another value (polled:
    one look 0.2 s later counted on a loaded machine running the loop in time). The first value is
    polled for too: a loop started by the call before may not have written ``path`` yet on a loaded
    machine (CI read it missing once, right after the sandbox was thawed); a loop that never runs
    still fails, at the bound."""

    async def read() -> str:
        return str((await (await ws.runtime.exec(f"cat {path}")).result()).stdout)

    deadline = time.monotonic() + within
    while not (before := await read()):
        assert time.monotonic() < deadline, f"{path} stays missing or empty: the sandbox's loop never ran"
        await asyncio.sleep(0.1)
    while await read() == before:
        assert time.monotonic() < deadline, f"the sandbox's loop stands still ({path} stays {before!r})"
        await asyncio.sleep(0.1)


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


def runs_itself(marker: str) -> bool:
    """Whether a host process runs ``marker`` itself (its command line is that): the run's shell has
    gone past what comes before it (``host_pids_with`` matches that shell's own command line too)."""
    for pid in host_pids_with(marker):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read().split(b"\0")[:-1] == marker.encode().split():
                return True
    return False


def kill_all(marker: str) -> None:
    """SIGKILL every host process whose command line holds ``marker`` (a test's leftovers)."""
    for pid in host_pids_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


async def host_shows(marker: str, within: float = BOUND) -> None:
    """Wait until a host process runs ``sleep marker``: a call may return before its background child
    has exec'd ``sleep`` (the fork is done, the exec not yet)."""

    async def shows() -> bool:
        return bool(host_pids_with(f"sleep {marker}"))

    await eventually(shows, within=within)


async def kill_after_the_loop_wrote(ws: Any, source: str, *, backend: str | None = None) -> None:
    """Run ``source`` (it writes f1..f50 with each one's number, prints ``wrote``, then sleeps), kill
    it once it printed, and check the 50 files are in the workspace: kill keeps what was written, and
    the killed run's ``pulled`` lists them (it was empty: the backend's result never reached the
    runtime after a kill)."""
    handle = await ws.runtime.exec(source, **({"backend": backend} if backend else {}))
    async for snapshot in handle:
        if "wrote" in snapshot.stdout:
            break
    await handle.kill()
    result = await handle.result()
    assert (result.status, result.exit_code, result.error) == ("cancelled", 137, "killed")
    assert {f"/workspace/f{i}" for i in range(1, 51)} <= set(result.pulled), result.pulled
    names = {e.name for e in await ws.fs.readdir("/workspace")}
    assert {f"f{i}" for i in range(1, 51)} <= names
    assert (await ws.fs.read_text("/workspace/f50")).strip() == "50"
