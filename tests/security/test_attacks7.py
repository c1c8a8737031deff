"""Attacks on the exec layer's newer surfaces (session 65's hunt): the processes listing, the tools.

A listing's cost: a process's command line is its own to make up to 6 MiB (``ulimit -s unlimited``)
and the children it forks share its pages, so one sandbox holds hundreds of processes of one huge
command line for ~6 MB of its memory. The init read every one of them whole for every ``ps`` page:
200 such processes made one ``processes()`` take 8-10 s of the init (its replies bounded by 10 s: a
slower page failed the listing) and 723 MB of its memory (of the sandbox's 1 GiB).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re

import pytest

import computer
from computer.runtime import _live_parts

# Readers of a pipe nobody writes to, forked (no exec) by one ``sh`` of a command line of ~90 % of
# ARG_MAX (up to 6 MiB with the stack unlimited), so each shares its command line.
_SHARED_HUGE_COMMAND_LINE = r"""
ulimit -s unlimited 2>/dev/null || ulimit -s "$(ulimit -H -s)"
count=$(( $(getconf ARG_MAX) * 9 / 10 / 120002 ))
big=$(python3 -c 'print("\u00e9" * 60000)')
set --; i=0; while [ $i -lt $count ]; do set -- "$@" "$big"; i=$((i+1)); done
(sleep 1000 | sh -c 'exec 3<&0; i=0; while [ $i -lt 60 ]; do read x <&3 & i=$((i+1)); done; wait' huge "$@") &
echo started $count
"""


async def test_a_listing_of_processes_sharing_a_huge_command_line_reads_a_bounded_part(
    ws: computer.Workspace,
) -> None:
    started = await (await ws.runtime.exec(_SHARED_HUGE_COMMAND_LINE, backend="shell")).result()
    assert started.stdout.startswith("started"), started
    huge = []
    for _ in range(300):  # bounded: the 60 readers show in the listing within 30 s
        huge = [
            p for p in await ws.runtime.processes(backend="shell") if p.command.startswith("sh -c exec 3<&0")
        ]
        if len(huge) >= 60:
            break
        await asyncio.sleep(0.1)
    assert len(huge) >= 60, len(huge)
    assert all(p.command.endswith("\u2026") for p in huge)  # cut: a listing shows its start
    memory = await (await ws.runtime.exec("grep VmHWM /proc/1/status", backend="shell")).result()
    peak = re.search(r"VmHWM:\s+(\d+) kB", memory.stdout)
    assert peak is not None, memory
    # The init's memory at its peak: ~13 MB at rest; reading every command line whole, 60 x 5.8 MB
    # (x2: bytes, then text) where the stack may be unlimited, 60 x 1.9 MB where not.
    assert int(peak.group(1)) < 96 * 1024, f"the sandbox's init peaked at {int(peak.group(1)) // 1024} MB"
    await ws.runtime.end_sandbox("shell")


def test_the_drain_of_an_exited_commands_pipe_stops_at_what_the_pipe_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command's background writers that keep its pipe full (``yes &`` on other cores, faster than
    the owner reads) made the drain after its exit read on and on, on the owner's loop, into memory
    (no deterministic race here: the writers are a ``read`` that always finds a full pipe)."""
    read, write = os.pipe()
    try:
        os.set_blocking(read, False)
        capacity = fcntl.fcntl(read, getattr(fcntl, "F_GETPIPE_SZ", 1032))
        taken = [0]

        def endless(fd: int, n: int) -> bytes:
            if fd != read:
                return real_read(fd, n)
            taken[0] += n
            if taken[0] > 64 * capacity:
                raise RuntimeError("the drain read on")
            return b"y" * n

        real_read = os.read
        monkeypatch.setattr(_live_parts.os, "read", endless)
        chunks = _live_parts.drain(read, "stdout")
        monkeypatch.undo()
        assert sum(len(c.data) for c in chunks) <= capacity
    finally:
        os.close(read)
        os.close(write)
