"""A program cannot take the host's CPU from every other workspace by multiplying sessions.

The kernel's autogroups give each session the weight of one: without a cpu cgroup of the run's own,
64 busy loops each started with ``setsid`` in one live sandbox weighed like 64 host sessions, and
the event loop serving every workspace of the process lagged ~50 ms (median; ~0.7 before), another
workspace's ``echo`` took 171 ms instead of 8 (figures in ``computer/runtime/_cgroups.py``). Now a
run's processes, in whatever sessions, are in one cpu group of its own: one entity for the scheduler.
Checked by where they are, not by timing them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._cgroups import cgroup_writable

pytestmark = pytest.mark.skipif(
    not cgroup_writable("cpu"), reason="no writable cgroup v1 cpu controller here"
)

# The run's own cpu group, then the one of a process in a session of its own (``setsid``).
_SHELL = "grep ':cpu:' /proc/self/cgroup; /usr/bin/setsid -w /usr/bin/grep ':cpu:' /proc/self/cgroup"
_PYTHON = """
import subprocess
print(next(line for line in open("/proc/self/cgroup").read().splitlines() if ":cpu:" in line))
print(subprocess.run(["/usr/bin/setsid", "-w", "/usr/bin/grep", ":cpu:", "/proc/self/cgroup"],
                     capture_output=True, text=True, check=True).stdout, end="")
"""


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
@pytest.mark.parametrize(
    "make, source", [(ShellBackend, _SHELL), (PythonBackend, _PYTHON)], ids=["shell", "python"]
)
async def test_a_runs_processes_in_new_sessions_share_one_cpu_group(
    tmp_path: Path, make: Callable[..., ShellBackend | PythonBackend], source: str, live: bool
) -> None:
    backend = make(live=live)
    if live and not backend.live:
        pytest.skip("no live sandboxes here")
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        result = await (await ws.runtime.exec(source, timeout=60)).result()
    assert result.status == "completed", result.stderr
    own, in_session = result.stdout.splitlines()
    assert "/computer-exec/run-" in own, result.stdout  # before: "1:cpu:/", the host's root group
    assert in_session == own, result.stdout
