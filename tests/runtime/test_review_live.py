"""Review of issue 18's live sandboxes: what its other tests leave out.

- The maximum lifetime (``live_lifetime``): a sandbox whose background process never ends is still
  ended once its lifetime is reached (idle time alone would keep it forever), its processes are gone
  from the host, what they wrote stays in the workspace, and the next run gets a fresh sandbox.
- A run's ``ExecResult.pulled`` lists what changed while it ran, not what an earlier run changed.
- A background process's log (``/.computer/output/<exec id>.background.log``) is capped: its last
  MiB, headed by how many bytes were dropped.
"""

from __future__ import annotations

import os
import time

import pytest

import computer
from computer.runtime import ShellBackend

from ._live_support import eventually, host_pids_with, host_shows

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


async def test_a_sandbox_with_a_process_still_running_ends_at_its_maximum_lifetime() -> None:
    # The idle end never comes (a process runs, and the idle time is long): only the lifetime ends it.
    backend = ShellBackend(live_idle=600.0, live_lifetime=2.0)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        marker = f"{500 + os.getpid() % 200}.{time.time_ns() % 10**6:06d}"
        started = await run(ws, f"setsid sh -c 'echo kept > kept.txt; exec sleep {marker}' & sleep 0.2")
        assert started.status == "completed"
        await host_shows(marker)
        assert backend.live_sandboxes() == 1

        # Bounded poll: the sandbox checks its end every ~100 ms; the machine may be loaded.
        async def gone() -> bool:
            return not host_pids_with(f"sleep {marker}")

        await eventually(gone, within=30.0)
        assert await ws.runtime.processes() == []
        assert backend.live_sandboxes() == 0
        assert await ws.fs.read_text("/workspace/kept.txt") == "kept\n"

        again = await run(ws, "cat kept.txt")
        assert (again.status, again.stdout) == ("completed", "kept\n")
        assert backend.live_sandboxes() == 1


async def test_a_later_run_that_changes_nothing_pulls_nothing() -> None:
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await run(ws, "echo one > one.txt; mkdir d; echo two > d/two.txt")
        assert set(first.pulled) >= {"/workspace/one.txt", "/workspace/d/two.txt"}
        second = await run(ws, "cat one.txt d/two.txt")
        assert (second.status, second.stdout) == ("completed", "one\ntwo\n")
        assert second.pulled == [] and second.skipped == []
        third = await run(ws, "rm one.txt")
        assert third.pulled == ["/workspace/one.txt"]
        assert not await ws.fs.exists("/workspace/one.txt")


async def test_a_background_processs_log_keeps_its_last_mebibyte_and_says_what_it_dropped() -> None:
    lines = 300_000  # "line 0000000\n" is 13 bytes: 3.9 MB in all, well over the 1 MiB kept
    program = (
        "import sys, time; time.sleep(0.5); "
        f"sys.stdout.write(''.join(f'line {{i:07d}}\\n' for i in range({lines}))); "
        "print('the end', flush=True); time.sleep(60)"
    )
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(ws, f'python3 -c "{program}" & echo started')
        assert started.stdout == "started\n"
        log = f"/.computer/output/{started.id}.background.log"

        async def ended() -> bool:
            return await ws.fs.exists(log) and (await ws.fs.read_file(log)).endswith(b"the end\n")

        await eventually(ended, within=30.0)
        data = await ws.fs.read_file(log)
        head, _, kept = data.partition(b"\n")
        assert head.startswith(b"[... ") and head.endswith(b" earlier bytes dropped]"), head[:80]
        dropped = int(head.split()[1])
        assert len(kept) == 1 << 20
        assert dropped + len(kept) == lines * 13 + len(b"the end\n")
        assert kept.endswith(f"line {lines - 1:07d}\nthe end\n".encode())
        await ws.runtime.end_sandbox()
