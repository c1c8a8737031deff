"""Many workspaces' live sandboxes in one process (the users run many concurrent agents): each one's
network, sockets, processes and files are its own, and a host at its descriptor limit fails a start
clearly and leaves nothing behind."""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
from collections.abc import Iterator

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend

from ._live_support import eventually

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")

# Runs in a host process whose descriptor limit is 200, as after ``ulimit -n 200``.
LOW_LIMIT_HOST = """
import asyncio
import computer
from computer.runtime import ShellBackend

async def main():
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec("echo one > one.txt; sleep 30 & ulimit -n")).result()
        second = await (await ws.runtime.exec("cat one.txt")).result()
        print(first.status, first.error, first.stdout.strip(), second.status, second.stdout.strip())

asyncio.run(main())
"""


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def test_a_host_with_a_descriptor_limit_of_256_or_less_runs_live_commands() -> None:
    """The init copied each run's streams above descriptor 255, which fails (EINVAL) under a limit of
    256 or less, inherited from the host: the init ended at every run's start ("the live sandbox
    ended: its first process ended"), so no live command ever ran there."""
    done = subprocess.run(
        [sys.executable, "-c", LOW_LIMIT_HOST],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_descriptors,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["completed", "None", "200", "completed", "one"], done.stderr[-2000:]


# Runs in a host process started under a descriptor limit of 300 (a login shell's is 1,024): 30 live
# sandboxes, 14 host descriptors each.
MANY_UNDER_A_LOW_LIMIT = """
import asyncio, resource
import computer
from computer.runtime import ShellBackend

async def main():
    backend = ShellBackend()
    spaces = []
    for i in range(30):
        ws = computer.Workspace(backends=[backend])
        await ws.__aenter__()
        spaces.append(ws)
        await ws.fs.mkdir("/workspace")
        done = await (await ws.runtime.exec(f"sleep 600 & echo {i} $(ulimit -n)")).result()
        print(done.status, done.stdout.strip() or done.error)
    print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 300)
    for ws in spaces:
        await ws.__aexit__(None, None, None)

asyncio.run(main())
"""


def _limit_to_300() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def test_a_host_started_under_a_low_descriptor_limit_holds_more_live_sandboxes_than_it_allows() -> None:
    """Each live sandbox holds 14 host descriptors: under ``ulimit -n 1024`` (a login shell's default)
    an embedded host refused its 73rd sandbox (EMFILE), under 300 its 21st. The host's soft limit is
    raised toward its hard one, as Ray does for its workers; the sandboxes' programs keep 300."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1024:
        pytest.skip("the hard descriptor limit leaves nothing to raise to")
    done = subprocess.run(
        [sys.executable, "-c", MANY_UNDER_A_LOW_LIMIT],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_to_300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines == [f"completed {i} 300" for i in range(30)] + ["True"], done.stdout


# Runs in a host process of its own: its descriptor limit is set just above what it holds, so a
# sandbox's start runs out of descriptors (EMFILE) at each point after its cgroups are made.
OUT_OF_DESCRIPTORS = """
import asyncio, errno, os, resource
from pathlib import Path
from computer.runtime._sandbox import Sandbox

def groups():
    return sorted(
        p.name for c in ("memory", "pids", "freezer")
        for p in (Path("/sys/fs/cgroup") / c / "computer-exec").glob(f"run-{os.getpid()}-*")
    )

async def main():
    sandbox = Sandbox(unprivileged=True)
    first = await sandbox.spawn(["true"])
    await first.discard()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = len(os.listdir("/proc/self/fd"))
    for spare in range(1, 25):
        resource.setrlimit(resource.RLIMIT_NOFILE, (held + spare, hard))
        try:
            started = await sandbox.spawn(["true"])
        except OSError as exc:
            assert exc.errno == errno.EMFILE, exc
            outcome = "EMFILE"
        else:
            outcome = "started"
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if outcome == "started":
            await started.discard()
        print(spare, outcome, groups(), len(os.listdir("/proc/self/fd")) - held)

asyncio.run(main())
"""


def test_a_start_out_of_descriptors_leaves_no_cgroup_or_descriptor_behind() -> None:
    """A host at its descriptor limit (~72 live sandboxes under ``ulimit -n 1024``, 14 descriptors
    each) fails the next start with a clear EMFILE; the cgroups that start had made (memory, pids,
    freezer) were left until the process ended when the descriptors ran out at bubblewrap's pipes
    (made after them, outside the cleanup), and the first pipe when only the second failed."""
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(" ", 2) for line in done.stdout.splitlines()]
    assert [row[0] for row in rows] == [str(spare) for spare in range(1, 25)], done.stdout
    assert {row[1] for row in rows} == {"EMFILE", "started"}, done.stdout
    assert [row[2] for row in rows] == ["[] 0"] * 24, done.stdout


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """This process holds over 1,024 descriptors, as a host of ~75 live sandboxes does (14 each)."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1500:
        pytest.skip("the descriptor limit is too low to hold 1,100 more")
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


async def test_a_host_past_1024_descriptors_runs_in_sandboxes_started_ahead(many_descriptors: None) -> None:
    """A sandbox started ahead (its init waiting for the workspace's next run, after the last one
    ended) was checked with ``select``, which raises ValueError for a descriptor past 1023: every run
    that took one failed ("filedescriptor out of range in select()"), and its init was left to the
    garbage collector."""
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        for step in range(3):
            result = await (
                await ws.runtime.exec(f"echo {step} > step.txt; sleep 30 & cat step.txt")
            ).result()
            assert (result.status, result.stdout, result.error) == ("completed", f"{step}\n", None)
            assert await ws.runtime.end_sandbox() is True
        assert await ws.fs.read_text("/workspace/step.txt") == "2\n"


SERVE = (
    "echo {tag} > /tmp/mine; echo {tag} > /dev/shm/mine; export ONLY_{tag}=1; "
    "python3 -m http.server 8000 --bind 127.0.0.1 > /dev/null 2>&1 & "
    "python3 -c 'import socket, time\n"
    'a = socket.socket(socket.AF_UNIX); a.bind("\\0sock-{tag}"); a.listen()\n'
    'p = socket.socket(socket.AF_UNIX); p.bind("/tmp/sock-{tag}"); p.listen()\n'
    "time.sleep(600)' > /dev/null 2>&1 & "
    "for i in $(seq 200); do curl -sf 127.0.0.1:8000/who.txt && break; sleep 0.05; done"
)
PROBE = (
    "curl -sf 127.0.0.1:8000/who.txt; cat /tmp/mine /dev/shm/mine; test -e /tmp/sock-{other} && echo there || echo absent; "
    "grep -l ONLY_{other} /proc/[0-9]*/environ 2>/dev/null | wc -l; "
    "python3 -c 'import socket\n"
    'for name in ("\\0sock-{other}", "/tmp/sock-{other}", "\\0sock-{tag}"):\n'
    "    s = socket.socket(socket.AF_UNIX)\n"
    "    try:\n"
    '        s.connect(name); print("reached")\n'
    "    except OSError:\n"
    '        print("refused")\''
)


async def test_two_workspaces_live_sandboxes_keep_their_network_sockets_files_and_processes() -> None:
    """Two workspaces of one backend each serve on 127.0.0.1:8000 and reach only their own server;
    unix sockets (path and abstract), /tmp, /dev/shm and environments are each one's own; a pid only
    the other sandbox has is unknown to this one's ``kill_process``, and ``kill -9 -1`` in one leaves
    the other's processes running."""
    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as a, computer.Workspace(backends=[backend]) as b:
        for ws, tag in ((a, "A"), (b, "B")):
            await ws.fs.mkdir("/workspace")
            await ws.fs.write_file("/workspace/who.txt", f"served by {tag}\n")
            served = await (await ws.runtime.exec(SERVE.format(tag=tag))).result()
            assert (served.status, served.stdout) == ("completed", f"served by {tag}\n"), served
        for ws, tag, other in ((a, "A", "B"), (b, "B", "A")):
            seen = await (await ws.runtime.exec(PROBE.format(tag=tag, other=other))).result()
            assert seen.stdout.split("\n") == [
                f"served by {tag}",
                tag,
                tag,
                "absent",
                "0",
                "refused",
                "refused",
                "reached",
                "",
            ], seen
        extra = await (await b.runtime.exec("for i in 1 2 3 4 5 6; do sleep 600 & done; echo")).result()
        assert extra.status == "completed"
        only_b = {p.pid for p in await b.runtime.processes()} - {p.pid for p in await a.runtime.processes()}
        assert only_b
        for pid in only_b:
            with pytest.raises(ProcessLookupError):
                await a.runtime.kill_process(pid)
        killed = await (await a.runtime.exec("kill -9 -1; true")).result()
        assert killed.status in ("completed", "cancelled")
        assert {p.pid for p in await b.runtime.processes()} >= only_b
        again = await (await b.runtime.exec("curl -sf 127.0.0.1:8000/who.txt")).result()
        assert again.stdout == "served by B\n"


async def test_kill_process_refuses_the_shell_waiting_for_the_next_run() -> None:
    """``processes`` hides the shell started ahead for the next run, but ``kill_process`` killed it:
    a pid another workspace's sandbox listed, unknown to this one's list, killed this one's shell."""
    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("sleep 600 & echo")).result()
        sandbox = backend._lives.get(ws.fs.instance)
        assert sandbox is not None

        async def waits() -> bool:  # the shell started ahead, and the init said so (its pid)
            spare = sandbox.spare
            return spare is not None and spare.task.done() and spare.task.result().job.started.done()

        await eventually(waits, within=10.0)
        assert sandbox.spare is not None
        shell = sandbox.spare.task.result()
        pid = shell.job.started.result()
        listed = {p.pid for p in await ws.runtime.processes()}
        assert pid not in listed and len(listed) == 1
        with pytest.raises(ProcessLookupError, match=f"no process {pid} in this sandbox"):
            await ws.runtime.kill_process(pid)
        assert shell.usable()
        again = await (await ws.runtime.exec("echo $$")).result()
        assert again.stdout.split()[0] == str(pid)  # the run took that shell
        assert {p.pid for p in await ws.runtime.processes()} == listed


async def test_backends_made_per_agent_take_their_mirrors_with_them() -> None:
    """An embedded service giving each agent ``Workspace(backends=[ShellBackend(), PythonBackend()])``
    left every closed agent's warm mirrors (a copy of its files, in tmpfs) until the process ended:
    the backends were collected, their scratch directories were not."""
    scratch = []
    for _ in range(3):
        shell, python = ShellBackend(), PythonBackend()
        async with computer.Workspace(backends=[shell, python]) as ws:
            await ws.fs.mkdir("/workspace")
            await ws.fs.write_file("/workspace/data.bin", os.urandom(50_000))
            done = await (await ws.runtime.exec("cp data.bin copy.bin; sleep 600 & echo")).result()
            assert done.status == "completed"
            ran = await (
                await ws.runtime.exec("print(len(open('copy.bin', 'rb').read()))", backend="python")
            ).result()
            assert ran.stdout == "50000\n"
        scratch += [shell.scratch, python.scratch]
        assert all(path.is_dir() for path in scratch[-2:])
    del shell, python, ws
    gc.collect()

    async def removed() -> bool:
        return not any(path.exists() for path in scratch)

    await eventually(removed, within=10.0)
