"""A host uid per sandbox (``_uid_lease``): the kernel counts inotify instances, pipe buffers,
descriptors in flight and message queue bytes per host uid, so sandboxes of one uid starved each
other (``test_host_resources``). Each mirror's sandboxes now run as a uid leased from a range: two at
once differ (seen from the host), a lease is unique among the host's processes, released with its
mirror and by the kernel when its process dies, and an exhausted range refuses a sandbox clearly.

Skipped when this process is not root (then every sandbox runs as this process's own user).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._uid_lease import RangeExhausted, UidLeases
from computer.runtime._users import running_as_root, sandbox_id_range

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not running_as_root(), reason="only root runs sandboxes as other host uids"
)

# Below the fallback range (2,000,000,001 ...): no sandbox of another test runs as these, so a stale
# lease's sweep (``kill -9 -1`` as the uid) reaches nothing but this file's own processes.
_TEST_FIRST = 1_999_990_000


def _test_uids(count: int) -> int:
    for uid in range(_TEST_FIRST, _TEST_FIRST + count):
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)
    return _TEST_FIRST


def _uid_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _host_pids_running(argv: list[str]) -> list[int]:
    """Host pids of the processes whose command line is exactly ``argv``."""
    wanted = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if Path(f"/proc/{name}/cmdline").read_bytes() == wanted:
                    found.append(int(name))
            except OSError:
                continue
    return found


async def _wait_for(argv: list[str], deadline: float) -> list[int]:
    while time.monotonic() < deadline:
        pids = _host_pids_running(argv)
        if pids:
            return pids
        await asyncio.sleep(0.05)
    raise AssertionError(f"{argv} never ran")


async def _uids_of_runs(
    workspaces: tuple[Any, Any],
    marks: list[list[str]],
    source: Callable[[list[str]], str],
    *,
    within: float,
    **options: Any,
) -> tuple[int, int]:
    """Run ``source(mark)`` in each workspace at once: the host uid each mark's process runs as (the
    runs are killed after)."""
    handles = []
    try:
        for ws, mark in zip(workspaces, marks, strict=True):
            await ws.fs.mkdir("/workspace", recursive=True)
            handles.append(await ws.runtime.exec(source(mark), timeout=60, **options))
        deadline = time.monotonic() + within
        uids = [{_uid_of(pid) for pid in await _wait_for(mark, deadline)} for mark in marks]
    finally:
        for handle in handles:
            await handle.kill()
    (first,), (second,) = uids
    assert first is not None and second is not None, uids
    return first, second


def _leased_apart(first: int, second: int, ids: Any) -> None:
    assert first != second, (first, second)
    for uid in (first, second):
        assert ids.first <= uid < ids.first + ids.count, (uid, str(ids))


@pytest.mark.parametrize("kind", ["shell", "python"])
@pytest.mark.parametrize("live", [False, True])
async def test_sandboxes_of_two_workspaces_run_as_host_uids_of_their_own(
    tmp_path: Path, kind: str, live: bool
) -> None:
    backend = ShellBackend(live=live) if kind == "shell" else PythonBackend(live=live)
    if live and not backend.live:
        pytest.skip("no live sandboxes here (cgroup freezer)")
    if backend.sandbox.leases is None:
        pytest.skip("no uid range to lease from here")
    ids = sandbox_id_range()
    marks = [["sleep", f"{37 + i}.{os.getpid() % 1000}"] for i in range(2)]
    async with (
        computer.Workspace(str(tmp_path / "a.sqlite"), backends=[backend]) as a,
        computer.Workspace(str(tmp_path / "b.sqlite"), backends=[backend]) as b,
    ):
        py = "import subprocess\nsubprocess.run({!r})"
        source = (lambda mark: " ".join(mark)) if kind == "shell" else py.format
        first, second = await _uids_of_runs((a, b), marks, source, within=30, backend=kind)
    _leased_apart(first, second, ids)
    assert ids.base[0] not in (first, second)  # the base owns the shared directories: never leased


async def test_a_mirror_holds_its_lease_while_it_lives_and_releases_it_with_its_files(tmp_path: Path) -> None:
    """The uid goes with the mirror (its files are that uid's), not with one run: the warm mirror of
    a per-call run keeps it, and its removal gives it back, the lock file removed."""
    shell = ShellBackend(live=False)
    if shell.sandbox.leases is None:
        pytest.skip("no uid range to lease from here")
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        done = await (await ws.runtime.exec("mkdir d && echo x > d/f")).result()
        assert done.status == "completed", done.stderr
        (mirror,) = shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id)
        assert mirror.lease is not None
        uid = mirror.lease.uid
        assert (mirror.directory / "d" / "f").stat().st_uid == uid
        again = await (await ws.runtime.exec("id -u; stat -c %u d/f")).result()
        assert again.stdout.split() == ["65534", "65534"]  # the same uid (mapped) sees its own file
        assert shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id) == [mirror]
        assert mirror.lease.uid == uid and shell.sandbox.leases.held(uid)
        shell.mirrors._drop_idle(mirror)
        shell.mirrors.discard(mirror)
        assert not mirror.directory.exists()
        assert not shell.sandbox.leases.held(uid)
        assert str(uid) not in os.listdir(shell.sandbox.leases.directory)  # only held and stale ones stay


_HOLDER = """
import subprocess, sys, time
from computer.runtime._uid_lease import UidLeases
lease = UidLeases(int(sys.argv[1]), 1, int(sys.argv[1]), sys.argv[2]).take()
left = subprocess.Popen(
    ["setpriv", f"--reuid={lease.uid}", f"--regid={lease.gid}", "--clear-groups", "--", "sleep", "600"],
    start_new_session=True,
)
print(lease.uid, left.pid, flush=True)
time.sleep(600)
"""


def test_a_lease_of_a_killed_process_is_taken_again_and_its_leftovers_are_ended(tmp_path: Path) -> None:
    """A process holding a lease (and a program still running as its uid, outside any namespace) is
    SIGKILLed: the kernel drops its lock, so the uid is leased again, and the new holder first ends
    whatever still runs as it (the file still said ``held``): no leftover shares the new sandbox's uid."""
    first = _test_uids(1)
    leases = UidLeases(first, 1, first, str(tmp_path / "leases"))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(first), leases.directory],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert holder.stdout is not None
        uid, left = map(int, holder.stdout.readline().split())
        deadline = time.monotonic() + 10
        while _uid_of(left) != first and time.monotonic() < deadline:  # setpriv drops its uid soon
            time.sleep(0.02)
        assert uid == first and _uid_of(left) == first
        assert leases.held(first)  # another process's: unique across the host's processes
        with pytest.raises(RangeExhausted):
            leases.take()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lease = leases.take()
    try:
        assert lease.uid == first
        deadline = time.monotonic() + 10
        while _uid_of(left) is not None and _state(left) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _uid_of(left) is None or _state(left) == "Z", "a leftover of the dead holder runs on"
    finally:
        lease.release()
        if _uid_of(left) is not None and _state(left) != "Z":
            os.kill(left, signal.SIGKILL)
    assert not leases.held(first)


def _state(pid: int) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        return None
    return None


def test_an_exhausted_range_is_refused_not_shared(tmp_path: Path) -> None:
    first = _test_uids(2)
    leases = UidLeases(first, 2, first, str(tmp_path / "leases"))
    held = [leases.take(), leases.take()]
    assert sorted(lease.uid for lease in held) == [first, first + 1]
    with pytest.raises(RangeExhausted, match=f"all 2 of {first}-{first + 1} are leased"):
        leases.take()
    held[0].release()
    assert leases.take().uid == held[0].uid


async def test_a_run_past_an_exhausted_range_fails_saying_so(tmp_path: Path) -> None:
    """One uid left to lease: the first workspace's mirror holds it, the second's run fails with
    an error that says why, and no sandbox runs as a uid another holds."""
    shell = ShellBackend(live=False)
    if shell.sandbox.leases is None:
        pytest.skip("no uid range to lease from here")
    first = _test_uids(1)
    shell._sync.leases = UidLeases(first, 1, shell.sandbox.leases.gid, str(tmp_path / "leases"))
    async with (
        computer.Workspace(str(tmp_path / "a.sqlite"), backends=[shell]) as a,
        computer.Workspace(str(tmp_path / "b.sqlite"), backends=[shell]) as b,
    ):
        for ws in (a, b):
            await ws.fs.mkdir("/workspace", recursive=True)
        ran = await (await a.runtime.exec("touch mine")).result()
        assert ran.status == "completed", ran.stderr
        refused = await (await b.runtime.exec("touch theirs")).result()
        assert refused.status == "failed", refused
        assert "no sandbox uid is free" in (refused.error or ""), refused.error
        assert not await b.fs.exists("/workspace/theirs")


async def test_sandboxes_of_two_workspaces_through_the_pool_run_as_host_uids_of_their_own(
    cluster: Any, name: str
) -> None:
    """The shell pool's workers (processes of their own on this machine) lease from the same range as
    any process of the host: two workspaces' programs at once never share a uid, whichever workers
    run them."""
    ids = sandbox_id_range()
    marks = [["sleep", f"{47 + i}.{os.getpid() % 1000}"] for i in range(2)]
    async with (
        computer.get_workspace(name) as a,
        computer.get_workspace(f"{name}-other") as b,
    ):
        first, second = await _uids_of_runs((a, b), marks, " ".join, within=60)
    _leased_apart(first, second, ids)
