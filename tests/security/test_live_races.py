"""A live sandbox's processes run while the host syncs its mirror (issue 18): a program swapping a
directory for a symlink to a host directory, over and over, must never make the host (root) write
or read through it. The sandbox is frozen for each sync; reads and writes never follow links."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend
from tests.runtime._live_support import eventually

pytestmark = pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")


RACE_BOUND = 150
"""Seconds a racing program of the sandbox goes on at most (the sandbox's end stops it before)."""


def rounds(seconds: float, at_least: int = 50) -> Iterator[int]:
    """1, 2, … for ``seconds``, and on until more than ``at_least`` rounds ran (within ``RACE_BOUND``
    less a margin): what a race needs is a count of rounds, and a loaded machine runs fewer in the same
    time (CI's 2 cores under the suite's own load)."""
    start, i = time.monotonic(), 0
    while time.monotonic() < start + seconds or (
        i <= at_least and time.monotonic() < start + RACE_BOUND - 30
    ):
        i += 1
        yield i


@pytest.fixture
def target() -> Iterator[Path]:
    """A host directory (root's) the sandbox names in its symlinks."""
    made = Path(f"/tmp/computer-race-{secrets.token_hex(4)}")
    made.mkdir(mode=0o755)
    (made / "secret.txt").write_text("host secret\n")
    yield made
    shutil.rmtree(made, ignore_errors=True)


async def test_a_directory_swapped_for_a_symlink_during_syncs_never_leads_the_host_outside(
    target: Path,
) -> None:
    if True:  # (one block: the workspace and its sandbox end before the host directory is checked)
        async with computer.Workspace(backends=[ShellBackend()]) as ws:
            await ws.fs.mkdir("/workspace/d", recursive=True)
            swapper = (
                f"setsid sh -c 'end=$(($(date +%s) + {RACE_BOUND})); while [ $(date +%s) -lt $end ]; do "
                f"rm -rf d; ln -s {target} d; rm -f d; mkdir d; echo x > d/from-sandbox; "
                "ln -sfn ../../../../../../../.. d/up; done' > /dev/null 2>&1 &"
            )
            started = await (await ws.runtime.exec(swapper)).result()
            assert started.status == "completed"
            for i in rounds(6):  # workspace writes below d: pushes while it swaps
                try:
                    await ws.fs.write_file(f"/workspace/d/pwn{i}", b"from the workspace\n")
                except OSError:
                    pass  # d is a symlink in the workspace right now (pulled): the write is refused
                await asyncio.sleep(0.01)
            await ws.runtime.end_sandbox()
            assert sorted(os.listdir(target)) == ["secret.txt"], "the host wrote through the symlink"
            # Nothing of the host directory was read into the workspace through the link.
            for entry in await ws.fs.find("/workspace", "**"):
                if entry.type == "file":  # (a dangling link is listed as one: the swapper may end at
                    try:  # ``ln -s`` and the link's target is the host's, nothing in the workspace)
                        data = await ws.fs.read_file(entry.path)
                    except FileNotFoundError:
                        assert (await ws.fs.readlink(entry.path)) == str(target), entry.path
                        continue
                    assert data != b"host secret\n"
            assert i > 50


@pytest.fixture
def froze(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set by each freeze of a live sandbox (in the sync's worker thread)."""
    from computer.runtime import _live

    event = threading.Event()
    freeze = _live.freeze

    def recorded(group: Path, timeout: float = 1.0) -> bool:
        event.set()
        return freeze(group, timeout)

    monkeypatch.setattr(_live, "freeze", recorded)
    return event


# A python run's detached daemon (double fork, its own session, no descriptor of the run's): the
# body follows, indented under the grandchild; the run itself goes on after ``os._exit`` of the child.
_DETACHED = r"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in range(256):
            try:
                os.close(fd)
            except OSError:
                pass
"""

_GUEST_KILLER = (
    _DETACHED
    + r"""
        me, end = os.getpid(), time.time() + 120
        while time.time() < end:
            for p in os.listdir('/proc'):
                if p.isdigit() and int(p) not in (1, 2, me):
                    try:
                        if b'guest.py' in open(f'/proc/{p}/cmdline', 'rb').read():
                            os.kill(int(p), 9)
                    except OSError:
                        pass
            with open('tick', 'w') as f:
                f.write(str(time.time()))
            time.sleep(0.02)
    os._exit(0)
print('left')
"""
)


async def test_a_program_that_kills_the_guest_started_ahead_cannot_turn_the_freeze_off(
    froze: threading.Event,
) -> None:
    """A python run leaves a daemon that kills the guest the host starts ahead for the next run. That
    guest counted as "waiting" until a run took it, so the daemon was exactly hidden: the sandbox
    looked idle and every sync ran unfrozen, which a swap of a directory for a symlink then turned
    into a chmod of a host file, files written into a host directory and host link targets read
    into the workspace. A sync that does work now freezes whenever any process but the init is there
    (the kernel's count), and the sandbox is busy."""
    from computer.runtime import PythonBackend

    backend = PythonBackend()
    if not backend.live:
        pytest.skip("no live python sandboxes here")
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec(_GUEST_KILLER, timeout=30)).result()  # its own guest is killed too
        sandbox = backend._lives.get(ws.fs.instance)
        assert sandbox is not None
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 4 and time.monotonic() < deadline:  # the daemon's writes pulled by ticks
            if await ws.fs.exists("/workspace/tick"):
                seen.add(await ws.fs.read_text("/workspace/tick"))
            await asyncio.sleep(0.05)
        assert len(seen) >= 4, "the daemon's writes were not pulled"
        froze.clear()
        await ws.fs.write_file("/workspace/from-ws", "w\n")  # a push to a running sandbox, frozen too
        # The next tick (every 100 ms) syncs it; 30 s bounds a loaded machine (the daemon runs 120 s: the end stops it).
        assert await asyncio.to_thread(froze.wait, 30), "a sync ran while the daemon ran, unfrozen"
        assert await sandbox.busy()  # not idle either: it does not end as if nothing ran
        assert sandbox.stirring()
        await ws.runtime.end_sandbox()


_SHELL_FEEDER = (
    "import sys\nrun_shell = int(sys.argv[1])\n"
    + _DETACHED
    + r"""
        end = time.time() + 120
        while time.time() < end:  # the shell the host starts ahead once this run returned
            for p in os.listdir('/proc'):
                if not p.isdigit() or int(p) in (run_shell, os.getpid()):
                    continue
                try:
                    if b'__computer_run' not in open(f'/proc/{p}/cmdline', 'rb').read():
                        continue
                    fd = os.open(f'/proc/{p}/fd/3', os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                os.write(fd, b'exec python3 /workspace/loop.py\0')
                os._exit(0)
            time.sleep(0.01)
    os._exit(0)
"""
)

_LOOP = r"""
import time
end = time.time() + 120
while time.time() < end:
    with open('/workspace/tick', 'w') as f:
        f.write(str(time.time()))
    time.sleep(0.02)
"""


async def test_a_program_that_feeds_the_shell_started_ahead_cannot_turn_the_freeze_off(
    froze: threading.Event,
) -> None:
    """A daemon writes a command into the pipe of the shell the host starts ahead for the next run
    (``/proc/<pid>/fd/3``: any process of the sandbox's user can open it) and exits. That shell still
    counted as waiting, so the command it ran instead was hidden from the count: every sync ran
    unfrozen while it raced the host. A job started ahead is trusted to wait only when it started
    with nothing else running and no job of a user's code started or was taken since."""

    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/feeder.py", _SHELL_FEEDER)
        await ws.fs.write_file("/workspace/loop.py", _LOOP)
        started = await (await ws.runtime.exec("python3 feeder.py $$")).result()
        assert started.status == "completed", started.stderr
        sandbox = backend._lives.get(ws.fs.instance)
        assert sandbox is not None
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:  # the fed shell's writes, pulled by ticks
            if await ws.fs.exists("/workspace/tick"):
                seen.add(await ws.fs.read_text("/workspace/tick"))
            await asyncio.sleep(0.05)
        assert len(seen) >= 3, "the fed shell's writes were not pulled"
        assert sandbox.stirring()
        froze.clear()
        # The next tick's pull (every 100 ms) freezes it; 30 s bounds a loaded machine (the loop runs 120 s: the end stops it).
        assert await asyncio.to_thread(froze.wait, 30), "a sync ran while the fed shell ran, unfrozen"
        await ws.runtime.end_sandbox()


_RACER = r"""
end=$(($(date +%s) + RACE_BOUND))
long=$(printf 'n%.0s' $(seq 250))
while [ $(date +%s) -lt $end ]; do
  for t in TARGETS; do
    rm -rf d; ln -s "$t" d; rm -f d; mkdir d; echo s > d/s
    rm -f f; ln -s "$t/CANARY" f; rm -f f; echo s > f
    ln -sfn "$t" g; mv d e; mv e d
  done
  rm -f p; mkfifo p; rm -f p; echo s > p
  echo s > "$(printf 'nl\nname')"; echo s > "$(printf 'bad\xff')"; echo s > "$long"
done > /dev/null 2>&1
"""


async def test_a_racing_program_never_brings_a_host_file_in_nor_changes_one() -> None:
    """A program swaps directories and files for links to host directories and files (the mirror's
    own parent, the process's temp directory, ``/root``), renames, FIFOs and names the workspace
    cannot hold, while the workspace writes (modes too), runs come and go and the sandbox is ended
    under it: no byte of a host file reaches the workspace, and no host file is made, written,
    chmod-ed, touched or removed."""
    secret = secrets.token_hex(16)
    name = f"computer-canary-{secret[:8]}"
    backend = ShellBackend()
    planted: list[Path] = []
    try:
        async with computer.Workspace(backends=[backend]) as ws:
            await ws.fs.mkdir("/workspace/d", recursive=True)
            await (await ws.runtime.exec("true")).result()
            sandbox = backend._lives.get(ws.fs.instance)
            assert sandbox is not None
            places = [Path(sandbox.mirror.directory).parent, Path(tempfile.gettempdir()), Path("/root")]
            places = [place for place in places if os.access(place, os.W_OK)]  # /root: as root only
            for place in places:
                (place / name).write_text(secret)
                os.chmod(place / name, 0o640)
                planted.append(place / name)
            before = {p: os.lstat(p) for p in planted}
            racer = _RACER.replace("TARGETS", " ".join(map(str, places))).replace("CANARY", name)
            racer = racer.replace("RACE_BOUND", str(RACE_BOUND))
            await ws.fs.write_file("/workspace/racer.sh", racer)
            started = await (
                await ws.runtime.exec("setsid bash racer.sh < /dev/null > /dev/null 2>&1 &")
            ).result()
            assert started.status == "completed", started.stderr
            writes = [f"/workspace/d/{name}-w", "/workspace/f", "/workspace/p", f"/workspace/g/{name}-w"]
            for i in rounds(5):
                for path in writes:
                    with contextlib.suppress(OSError):  # a link or missing in the workspace right now
                        await ws.fs.write_file(path, b"from the workspace\n", mode=0o777 if i % 2 else 0o600)
                if i % 25 == 0:
                    ran = await (
                        await ws.runtime.exec("cat f d/s > /dev/null 2>&1; true", timeout=30)
                    ).result()
                    assert ran.status == "completed", (ran.error, ran.stderr)
                await asyncio.sleep(0.01)
            assert await asyncio.wait_for(ws.runtime.end_sandbox(), 60)  # while it still races
            for entry in await ws.fs.find("/", "**"):
                with contextlib.suppress(OSError):  # a link's target is the VFS's (nothing there)
                    assert secret.encode() not in await ws.fs.read_file(entry.path), entry.path
        for path, st in before.items():
            now = os.lstat(path)
            assert (now.st_mode, now.st_mtime_ns, now.st_ino, now.st_size) == (
                st.st_mode,
                st.st_mtime_ns,
                st.st_ino,
                st.st_size,
            ), path
            assert path.read_text() == secret
            assert not (path.parent / f"{name}-w").exists()  # the workspace's writes below d and g
        assert i > 50
    finally:
        for path in planted:
            path.unlink(missing_ok=True)


# Lingers until the test lets it go (``/workspace/linger.stop``; bounded): it ran 1.5 s, and a machine
# that took longer to start the next run's guest started it alone (trusted: the check failed).
_LINGERER = (
    _DETACHED
    + r"""
        end = time.time() + 120
        while time.time() < end and not os.path.exists('/workspace/linger.stop'):
            time.sleep(0.02)
    os._exit(0)
"""
)


async def test_a_python_guest_started_ahead_beside_a_program_of_the_users_is_not_trusted_to_wait() -> None:
    """The guest started ahead for the next python run waits on its channel: a process of the user's
    that outlived its run may have made it run code of its own (``ptrace``: same user) before it
    exited. Started beside such a process, the guest counts as a process: syncs freeze for it until a
    run takes it. Started with nothing else running, it does not (no pause for the guest alone)."""
    from computer.runtime import PythonBackend

    backend = PythonBackend()
    if not backend.live:
        pytest.skip("no live python sandboxes here")
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        sandbox = None

        async def waiting_guest() -> bool:
            return sandbox is not None and any(j.waiting and j.host_pid for j in sandbox.jobs.values())

        assert (await (await ws.runtime.exec("1")).result()).status == "completed"
        sandbox = backend._lives.get(ws.fs.instance)
        assert sandbox is not None
        await eventually(waiting_guest, within=10)
        assert not sandbox.stirring()  # the guest alone: trusted
        lingered = await (await ws.runtime.exec(_LINGERER)).result()
        assert lingered.status == "completed", lingered.stderr
        await eventually(waiting_guest, within=30)  # started while the daemon runs
        await ws.fs.write_file("/workspace/linger.stop", b"")

        async def daemon_gone() -> bool:
            return not await ws.runtime.processes(backend="python")

        await eventually(daemon_gone, within=30)
        assert sandbox.stirring(), "the guest started beside the daemon was trusted to wait"
        assert (await (await ws.runtime.exec("2")).result()).status == "completed"  # takes it
        await eventually(waiting_guest, within=10)
        assert not sandbox.stirring()  # the next one started alone
        await ws.runtime.end_sandbox("python")
