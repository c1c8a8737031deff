"""Standby sandboxes: the shell backend starts the next run's sandbox ahead of it, and the launcher.

A standby is started once a run is over; the next run of that mirror hands it its command line. These
tests check that the standby is really used, that the program sees exactly the environment, cwd and
limits of a freshly started sandbox, and that standbys end with their mirror, on eviction and when
they belong to another event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend
from computer.runtime._sandbox import Standby
from computer.runtime._warm import STANDBYS_BACK_TO_BACK, PreparedSandbox, Spares, Warm

from ._live_support import settles

_EXPECTED_ENV = {
    "PWD",
    "HOME",
    "LANG",
    "LC_ALL",
    "TERM",
    "USER",
    "WORKSPACE",
    "PYTHONDONTWRITEBYTECODE",
    "PATH",
}


async def _standby(ws: computer.Workspace, backend: ShellBackend) -> Standby:
    """The prepared sandbox of ``ws``'s idle mirror, once it is ready."""
    (mirror,) = backend.mirrors._free[ws.fs.instance]
    spares = mirror.standby
    assert isinstance(spares, Spares) and spares.items
    standby, _ = await asyncio.wait_for(asyncio.shield(spares.items[0].task), 30)
    assert standby.usable()
    return standby


async def _ready_standby(ws: computer.Workspace, backend: ShellBackend) -> int:
    """Wait for the prepared sandbox of ``ws``'s idle mirror; its launcher's pid."""
    return (await _standby(ws, backend)).process.proc.pid


async def _gone(pid: int, within: float = 30.0) -> bool:
    """Poll (bounded) for a launcher to be gone: it is ended and reaped by tasks of this event loop."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_run_hands_its_command_to_the_prepared_sandbox() -> None:
    backend = ShellBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace/sub", recursive=True)
        first = await (await ws.runtime.exec("echo one > a.txt")).result()
        assert first.status == "completed"
        pid = await _ready_standby(ws, backend)
        result = await (
            await ws.runtime.exec(
                'cat ../a.txt; pwd; echo "$X"; env', cwd="/workspace/sub", env={"X": "a b'c"}
            )
        ).result()
        assert result.status == "completed", result
        lines = result.stdout.splitlines()
        assert lines[:3] == ["one", "/workspace/sub", "a b'c"]
        names = {line.split("=", 1)[0] for line in lines[3:]}
        assert names - {"SHLVL", "_", "X"} == _EXPECTED_ENV  # nothing of the stub's own environment
        # The standby was consumed by this run (its launcher is gone) and a new one is being prepared.
        assert await _gone(pid)
        assert await _ready_standby(ws, backend) != pid


async def test_the_program_starts_with_exactly_its_environment() -> None:
    """The standby's program gets the run's environment (read back from /proc/$$/environ), whether it
    is set by bash's ``exec`` or, for names bash would refuse there, by ``env -i``, or, past 4,096
    variables, by the Python helper (``_standby._HELPER``: bash's assignments of 20,000 took 1.4 s)."""
    large = {f"V{i}": f"{i} 'q' $(echo no)\n" for i in range(5000)} | {"A-B": "1", "UID": "x", "SHLVL": "7"}
    backend = ShellBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace/sub", recursive=True)
        await (await ws.runtime.exec("true")).result()
        for extra in (
            {"X": "a b'c\n$(echo no) `x` \\"},
            {"A-B": "1", "UID": "x", "SHLVL": "7", "_": "u"},
            large,
        ):
            await _ready_standby(ws, backend)
            result = await (
                await ws.runtime.exec(
                    "cat /proc/$$/environ; pwd -P", cwd="/workspace/sub", env=extra, output=False
                )
            ).result()
            assert result.status == "completed", result
            *pairs, cwd = result.stdout.split("\0")
            seen = dict(pair.split("=", 1) for pair in pairs)
            if "SHLVL" not in extra:  # bash's exec passes SHLVL=0, which bash turns into 1 as when unset
                assert seen.pop("SHLVL", "0") == "0"
            assert set(seen) == _EXPECTED_ENV | set(extra)
            assert {k: seen[k] for k in extra} == extra
            assert seen["PWD"] == "/workspace/sub" and cwd == "/workspace/sub\n"


async def test_back_to_back_runs_get_a_second_standby_and_paused_ones_do_not() -> None:
    backend = ShellBackend(live=False)
    take, keep = backend._warm.take, backend._warm.keep
    waiting: list[asyncio.Event] = []  # one a batch of standbys started, set once a run asks for one

    def release() -> None:
        for asked in waiting:
            asked.set()
        waiting.clear()

    async def counted_take(mirror: Any) -> Any:
        release()
        return await take(mirror)

    def held_keep(mirror: Any, make: Any) -> None:
        asked = asyncio.Event()
        waiting.append(asked)

        async def held() -> Any:
            # A standby is never ready when the next run comes right away: held until that run asks
            # for it (bounded). Before, 0.3 s stood for "right away" (a loaded machine can take longer).
            await asyncio.wait_for(asked.wait(), 60)
            return await make()

        keep(mirror, held)

    backend._warm.take = counted_take  # type: ignore[method-assign]
    backend._warm.keep = held_keep  # type: ignore[method-assign]
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")

        async def spares() -> list[Any]:
            await (await ws.runtime.exec("true")).result()
            (mirror,) = backend.mirrors._free[ws.fs.instance]
            assert isinstance(mirror.standby, Spares)
            return mirror.standby.items

        assert len(await spares()) == 1  # the first run prepares one standby
        # The next run comes at once and waits for that standby: back to back, two are prepared.
        assert len(await spares()) == STANDBYS_BACK_TO_BACK
        items = await spares()
        release()
        await asyncio.wait_for(asyncio.gather(*(asyncio.shield(w.task) for w in items)), 30)
        # After a pause the run takes a ready standby: the mirror is not topped up past one left.
        await asyncio.sleep(0.05)
        assert len(await spares()) == STANDBYS_BACK_TO_BACK - 1
        assert (await (await ws.runtime.exec("echo ok")).result()).stdout == "ok\n"


def test_spares_hand_out_the_oldest_ready_standby_first() -> None:
    loop = asyncio.new_event_loop()
    try:
        pending, ready_a, ready_b = (loop.create_future() for _ in range(3))
        ready_a.set_result(None)
        ready_b.set_result(None)
        spares = Spares()
        spares.items = [_FakeWarm(pending), _FakeWarm(ready_a), _FakeWarm(ready_b)]  # type: ignore[list-item]
        first = spares.pop()
        assert first is not None and first.task is ready_a
        assert spares.busy  # the next one is still starting: runs come back to back
        second = spares.pop()
        assert second is not None and second.task is ready_b and spares.busy
        spares.items = [_FakeWarm(ready_a), _FakeWarm(ready_b)]  # type: ignore[list-item]
        assert spares.pop() is not None and not spares.busy  # every standby was ready: a pause
        spares.items = [_FakeWarm(pending)]  # type: ignore[list-item]
        only = spares.pop()
        assert only is not None and only.task is pending and spares.busy  # the run will wait
        assert spares.pop() is None
    finally:
        loop.close()


class _FakeWarm:
    def __init__(self, task: asyncio.Future[None]) -> None:
        self.task = task


async def test_a_standby_that_failed_to_start_is_reported_and_the_run_starts_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fail() -> PreparedSandbox:
        raise OSError("bwrap: cannot create a namespace")

    warm: Warm[PreparedSandbox] = Warm(asyncio.ensure_future(fail()))
    with caplog.at_level(logging.WARNING, logger="computer.runtime._warm"):
        assert await warm.take() is None
    assert "failed to start" in caplog.text and "cannot create a namespace" in caplog.text


async def test_the_program_runs_under_the_sandbox_rlimits(
    ws: computer.Workspace, shell_backend: ShellBackend
) -> None:
    import resource

    wanted = {kind: soft for kind, soft, _ in shell_backend.sandbox.rlimits}
    flags = {resource.RLIMIT_AS: ("v", 1024), resource.RLIMIT_FSIZE: ("f", 1024)}
    flags |= {resource.RLIMIT_CORE: ("c", 1), resource.RLIMIT_NPROC: ("u", 1)}
    script = "; ".join(f"ulimit -{flag}" for flag, _ in flags.values())
    result = await (await ws.runtime.exec(script)).result()
    expected = [
        str(wanted[kind] // unit) if kind in wanted else "unlimited" for kind, (_, unit) in flags.items()
    ]
    assert result.stdout.split() == expected


async def test_a_large_command_line_reaches_the_standby_whole() -> None:
    backend = ShellBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        await _ready_standby(ws, backend)
        payload = "x" * 100_000  # beyond a pipe's buffer (64 KiB): written from a thread while the stub reads
        result = await (await ws.runtime.exec(f"s='{payload}'; echo ${{#s}}")).result()
        assert result.stdout == "100000\n"


async def test_standbys_beyond_the_cap_and_of_dropped_mirrors_end() -> None:
    backend = ShellBackend(live=False, warm_sandboxes=1)
    async with (
        computer.Workspace(backends=[backend]) as a,
        computer.Workspace(backends=[backend]) as b,
    ):
        for ws in (a, b):
            await ws.fs.mkdir("/workspace")
        await (await a.runtime.exec("true")).result()
        pid_a = await _ready_standby(a, backend)
        await (await b.runtime.exec("true")).result()  # over the cap of 1: a's standby ends
        assert await _gone(pid_a)
        (mirror_a,) = backend.mirrors._free[a.fs.instance]
        assert isinstance(mirror_a.standby, Spares) and not mirror_a.standby.items
        pid_b = await _ready_standby(b, backend)
        (mirror_b,) = backend.mirrors._free[b.fs.instance]
        backend.mirrors.discard(mirror_b)  # a mirror that goes takes its standby with it
        assert await _gone(pid_b)
        # The next run of each workspace starts a fresh sandbox and works.
        for ws in (a, b):
            assert (await (await ws.runtime.exec("echo ok")).result()).stdout == "ok\n"


async def test_a_standby_of_another_event_loop_is_not_used(tmp_path: Path) -> None:
    backend = ShellBackend(live=False)
    path = str(tmp_path / "ws.db")
    pids: list[int] = []

    async def elsewhere() -> None:
        async with computer.Workspace(path, backends=[backend]) as ws:
            await ws.fs.mkdir("/workspace")
            await (await ws.runtime.exec("echo 1 > n")).result()
            pids.append(await _ready_standby(ws, backend))

    thread = threading.Thread(target=asyncio.run, args=(elsewhere(),))
    thread.start()
    await asyncio.to_thread(thread.join, 60)
    assert pids, "the first loop's run did not finish"
    async with computer.Workspace(path, backends=[backend]) as ws:
        result = await (await ws.runtime.exec("cat n")).result()
    assert result.stdout == "1\n" and result.status == "completed"
    assert await _gone(pids[0])


async def test_a_standby_killed_while_it_waits_is_replaced_by_a_fresh_sandbox() -> None:
    backend = ShellBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("echo 1 > n")).result()
        standby = await _standby(ws, backend)
        # Its launcher leads its own process group (the whole sandbox). A standby killed at the very
        # moment a run takes it ends that run as killed (137), as a sandbox killed during its run does;
        # one that died while it waited (seen dead, its exit reaped) is replaced by a fresh sandbox.
        os.killpg(standby.process.proc.pid, signal.SIGKILL)
        for _ in range(600):  # bounded: the event loop's child watcher reaps it
            if not standby.usable():
                break
            await asyncio.sleep(0.05)
        assert not standby.usable()
        result = await (await ws.runtime.exec("cat n; echo 2 > n")).result()
        assert (result.status, result.stdout) == ("completed", "1\n")
        assert await ws.fs.read_text("/workspace/n") == "2\n"


async def test_cgroups_of_finished_runs_are_removed_in_the_background() -> None:
    """A run that ended by itself has its cgroups removed after its result (not before); none stay."""
    groups = [Path("/sys/fs/cgroup") / c / "computer-exec" for c in ("memory", "pids")]

    def ours() -> set[Path]:
        return {g for parent in groups if parent.is_dir() for g in parent.glob(f"run-{os.getpid()}-*")}

    backend = ShellBackend(live=False)
    if not backend.sandbox.cgroups:
        return  # nothing to remove on a machine without writable cgroups (the description says so)
    before = ours()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        for i in range(5):
            assert (
                await (await ws.runtime.exec(f"echo {i} > n; sleep 0.01 &")).result()
            ).status == "completed"
    # The workspace closed: its standbys ended; the runs' own cgroups go as their removals finish.
    for _ in range(200):  # bounded: 10 s
        if ours() <= before:
            break
        await asyncio.sleep(0.05)
    assert ours() <= before


def test_the_watch_tells_whether_a_run_changed_anything(tmp_path: Path) -> None:
    from computer.runtime._mirror import Mirror

    mirror = Mirror(tmp_path / "m", "/workspace")
    mirror.directory.mkdir()
    (mirror.directory / "a").write_text("1")
    mirror.arm()
    assert mirror.watch is not None
    assert settles(mirror)
    (mirror.directory / "a").read_text()  # reading is not a change
    assert settles(mirror)
    (mirror.directory / "b").write_text("2")
    assert not settles(mirror, within=0.5)  # b's events stay until drained
    pull, _ = mirror.collect()
    assert [f.path for f in pull.files] == ["/workspace/b"]
    assert settles(mirror)  # drained


async def test_standbys_ended_with_their_mirror_do_not_count_against_the_cap() -> None:
    backend = ShellBackend(live=False, warm_sandboxes=2)
    async with (
        computer.Workspace(backends=[backend]) as a,
        computer.Workspace(backends=[backend]) as b,
        computer.Workspace(backends=[backend]) as c,
    ):
        for ws in (a, b, c):
            await ws.fs.mkdir("/workspace")
        await (await a.runtime.exec("true")).result()
        pid_a = await _ready_standby(a, backend)
        await (await b.runtime.exec("true")).result()
        (mirror_b,) = backend.mirrors._free[b.fs.instance]
        backend.mirrors.discard(mirror_b)  # b's standby ends with its mirror
        await (await c.runtime.exec("true")).result()  # a's and c's standbys: within the cap of 2
        assert await _ready_standby(a, backend) == pid_a
        await _ready_standby(c, backend)


async def test_a_shell_backend_removes_the_mirrors_of_workspaces_it_no_longer_keeps() -> None:
    from computer.runtime import MirrorPool

    backend = ShellBackend(
        live=False, mirror_pool=lambda base, root: MirrorPool(base, root, max_workspaces=1)
    )
    async with computer.Workspace(backends=[backend]) as a, computer.Workspace(backends=[backend]) as b:
        for ws in (a, b):
            await ws.fs.mkdir("/workspace")
            await ws.fs.write_file("/workspace/f", "x")
        await (await a.runtime.exec("cat f")).result()
        (mirror_a,) = backend.mirrors.idle_mirrors(a.fs.instance)
        assert (mirror_a.directory / "f").exists()
        await (await b.runtime.exec("cat f")).result()
        assert backend.mirrors.workspaces() == [b.fs.instance]
        for _ in range(200):  # bounded: 10 s (removed in a worker thread)
            if not mirror_a.directory.exists():
                break
            await asyncio.sleep(0.05)
        assert not mirror_a.directory.exists() and mirror_a.watch is None
        result = await (await a.runtime.exec("cat f; echo y > g")).result()  # a starts over: full push
        assert result.stdout == "x" and await a.fs.read_text("/workspace/g") == "y\n"


async def test_a_process_serving_many_workspaces_keeps_its_resources_bounded() -> None:
    """One embedded shell backend, 30 workspaces one after another (kept open, as agents' are): the
    mirrors on disk stay within the pool's bound, one inotify instance serves them all, and the open
    descriptors do not grow with the number of workspaces."""
    from computer.runtime import MirrorPool

    def inotify_fds() -> int:
        found = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        return found

    backend = ShellBackend(
        live=False, mirror_pool=lambda base, root: MirrorPool(base, root, max_workspaces=4)
    )
    async with contextlib.AsyncExitStack() as stack:
        fds: list[int] = []
        for i in range(30):
            ws = await stack.enter_async_context(computer.Workspace(backends=[backend]))
            await ws.fs.mkdir("/workspace")
            result = await (await ws.runtime.exec(f"mkdir -p a/b && echo {i} > a/b/f")).result()
            assert result.status == "completed"
            fds.append(len(os.listdir("/proc/self/fd")))
        for _ in range(200):  # bounded: 10 s (evicted mirrors are removed in worker threads)
            on_disk = [d for d in backend.scratch.iterdir() if d.name != "run"]
            if len(on_disk) <= 4:
                break
            await asyncio.sleep(0.05)
        assert len(on_disk) <= 4 and len(backend.mirrors.workspaces()) == 4
        assert inotify_fds() <= 1
        # 20 more workspaces: a descriptor kept per workspace (a watch instance, a mirror's standby)
        # would add 20 or more; the process's other tasks (earlier tests' teardown) move it by a few.
        assert fds[-1] - fds[9] < 10
