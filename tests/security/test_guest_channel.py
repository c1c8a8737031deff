"""The python guest's channel cannot be reached from outside its interpreter (issue 17, item 4).

Frames are not authenticated (``computer/runtime/_codec.py`` says why: a per-run secret would sit in
memory the guest's own code reads); what stops a forgery from elsewhere is that no *other* process can
open the channel: the guest makes itself non-dumpable before it reads its first frame, so its
``/proc/<pid>/fd`` belongs to root and neither a child of the run nor a background process an earlier
run left in the live sandbox (same uid) can read the host's frames or write a result of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

import computer
from computer.runtime import PythonBackend


async def run_ok(ws: computer.Workspace, source: str) -> Any:
    """The value of a python run that completed."""
    result = await (await ws.runtime.exec(source, backend="python", timeout=60)).result()
    assert result.status == "completed" and result.exit_code == 0, (result, result.stderr)
    return result.value


# A child of the run (same uid, its parent's pid known) looks at its parent's channel.
CHILD = """
import os, subprocess, sys
probe = "import os, sys\\n" \\
    "pid = int(sys.argv[1])\\n" \\
    "try:\\n" \\
    "    print('reached', os.readlink(f'/proc/{pid}/fd/3'))\\n" \\
    "except OSError as exc:\\n" \\
    "    print('denied', type(exc).__name__)\\n"
def main(input):
    out = subprocess.run([sys.executable, "-c", probe, str(os.getpid())], capture_output=True, text=True)
    return out.stdout.strip()
"""

# A background process started by one run waits for the next run's pid and takes a copy of its channel
# (``pidfd_getfd``: a socket cannot be opened through ``/proc/<pid>/fd``) to write a forged result.
PROBE = """
import subprocess, sys
script = r'''
import ctypes, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
for _ in range(400):
    try:
        pid = int(open("guest.pid").read())
        break
    except (OSError, ValueError):
        time.sleep(0.025)  # bounded (10 s): a file another run writes, polled inside the sandbox
else:
    raise SystemExit("no guest.pid")
pidfd = libc.syscall(434, pid, 0)  # pidfd_open
fd = libc.syscall(438, pidfd, 3, 0) if pidfd >= 0 else -1  # pidfd_getfd
if fd < 0:
    outcome = "denied " + os.strerror(ctypes.get_errno())
else:
    head = bytes.fromhex("82a26f70aa5f5f726573756c745f5fa46172677381a576616c7565a6666f72676564")
    os.write(fd, struct.pack(">II", len(head), 0) + head)
    outcome = "reached"
open("probe.tmp", "w").write(outcome)
os.rename("probe.tmp", "probe.txt")
'''
subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""

NEXT = """
import os, time
open("guest.pid.tmp", "w").write(str(os.getpid()))
os.rename("guest.pid.tmp", "guest.pid")
for _ in range(400):
    if os.path.exists("probe.txt"):
        break
    time.sleep(0.025)  # bounded (10 s): the probe's answer, polled inside the sandbox
def main(input):
    return open("probe.txt").read() if os.path.exists("probe.txt") else "no probe"
"""


async def test_a_child_of_the_run_cannot_reach_the_channel(ws: computer.Workspace) -> None:
    value = await run_ok(ws, CHILD)
    assert value.startswith("denied"), value


async def test_a_background_process_cannot_forge_a_later_runs_result(
    ws: computer.Workspace, python: PythonBackend
) -> None:
    if not python.live:
        pytest.skip("no live sandbox here (no cgroup freezer): a background process ends with its run")
    await run_ok(ws, PROBE)
    value = await run_ok(ws, NEXT)
    assert value.startswith("denied"), value  # not "forged", and the run was not broken


async def test_a_process_of_a_live_sandbox_cannot_reach_its_inits_channel() -> None:
    """The same for the live sandbox's init (shell and python runs alike go through it): a process of
    the sandbox (same uid) could open ``/proc/<init>/fd/<channel>`` and take the host's messages (a
    later run's descriptors) or forge the init's (a later run's exit code). The init makes itself
    non-dumpable; its jobs are ordinary (an ``execve`` resets it)."""
    from computer.runtime import ShellBackend

    backend = ShellBackend(live=True)
    if not backend.live:
        pytest.skip("no live sandbox here (no cgroup freezer)")
    probe = (
        # The init is the sandbox's one Python process (this command's own line names it too).
        "for p in /proc/[0-9]*; do "
        "[ \"$(head -c 15 $p/cmdline 2>/dev/null | tr -d '\\0')\" = /usr/bin/python ] && init=$p; done; "
        '[ -n "$init" ] || echo no-init; '
        # What an attacker needs: its descriptors (a listing alone is allowed where the sandbox's
        # user is the host's root without capabilities: the owner of a non-dumpable process's files).
        "n=$(for f in $init/fd/*; do readlink $f; done 2>/dev/null | wc -l); "
        '[ "$n" -gt 0 ] && echo init-reached || echo init-denied; '
        "ls /proc/$$/fd >/dev/null 2>&1 && echo job-ordinary"
    )
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(probe, timeout=60)).result()
    assert result.stdout == "init-denied\njob-ordinary\n", result.stderr
