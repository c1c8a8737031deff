"""The pool tests' host-process helpers (no Ray): a process is found by what it is, waited for."""

from __future__ import annotations

import asyncio
import subprocess

from .pool_helpers import found, processes_with, sleepers, unique_sleep, wait_until


async def test_a_shell_holding_the_marker_is_no_sleeper_and_the_sleeper_is_waited_for() -> None:
    """A shell whose command line holds ``sleep <marker>`` (a run's, or a child of it between fork and
    exec) matches ``processes_with``, then goes away or becomes another process; a test that took the
    first match and looked it up again failed (``IndexError`` in ``sandbox_worker``). ``sleepers``
    lists only the ``sleep`` itself, and ``found`` waits for it (bounded)."""
    marker = unique_sleep()
    shell = await asyncio.create_subprocess_exec(
        "sh", "-c", f"read go; exec sleep {marker}", stdin=subprocess.PIPE
    )
    assert shell.stdin is not None
    try:
        await wait_until(lambda: shell.pid in processes_with(f"sleep {marker}"))  # the shell, not yet it
        assert sleepers(marker) == []
        looking = asyncio.ensure_future(found(lambda: next(iter(sleepers(marker)), None)))
        await asyncio.sleep(0.2)  # (no timing asserted: the shell waits for its line however long)
        assert not looking.done()
        shell.stdin.write(b"go\n")
        await shell.stdin.drain()
        assert await asyncio.wait_for(looking, 30) == shell.pid  # the shell became the sleep
    finally:
        shell.kill()
        await shell.wait()
