"""Live sandboxes through a Ray pool (issue 18): the workspace is pinned to the worker holding its live
sandbox, a client reaches its processes, and a worker lost under it gives a fresh one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

import computer
from computer.config import Settings

from .pool_helpers import (
    processes_with,
    sandbox_worker,
    sleepers,
    unique_sleep,
    wait_until,
    workers_with_a_restart_left,
)


async def _until_exists(ws: object, path: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await ws.fs.exists(path):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"{path} did not appear within {within} s"
        await asyncio.sleep(0.05)


async def test_a_background_process_outlives_its_call_and_later_calls_reach_it(
    cluster: Settings, name: str
) -> None:
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"setsid sleep {marker} & echo $! > sleeper.pid")).result()
        assert first.status == "completed", first.error
        # (the call may return before its background child has exec'd ``sleep``)
        await wait_until(lambda: bool(sleepers(marker)))
        listed = await ws.runtime.processes()
        assert any(p.command == f"sleep {marker}" for p in listed), (listed, first)
        seen = await (
            await ws.runtime.exec(
                f"ps -eo args 2>/dev/null | grep -c '^sleep {marker}' || pgrep -fc 'sleep {marker}'"
            )
        ).result()
        assert seen.stdout.strip() not in ("", "0"), seen
        pid = next(p.pid for p in listed if p.command == f"sleep {marker}")
        await ws.runtime.kill_process(pid)
        await wait_until(lambda: not processes_with(f"sleep {marker}"))
        assert await ws.runtime.end_sandbox() is True
        assert await ws.runtime.processes() == []


async def test_runs_made_while_a_workspaces_first_run_goes_on_share_its_live_sandbox(
    cluster: Settings, name: str
) -> None:
    """The pool pinned a workspace to a worker only once a run had ended there: while its first run
    went on, another run went to another worker and started a sandbox of its own (a server started
    by the first was out of reach of the second), ``processes`` listed nothing and ``end_sandbox``
    ended nothing; of concurrent first runs, the sandboxes that lost the pin were out of reach for
    good, their processes left running."""
    markers = [unique_sleep() for _ in range(3)]
    async with computer.get_workspace(name) as ws:
        first = await ws.runtime.exec(f"setsid sleep {markers[0]} > /dev/null 2>&1 & sleep 4; echo done")
        await wait_until(lambda: bool(sleepers(markers[0])))
        listed = await ws.runtime.processes()  # the first run still goes on
        assert any(p.command == f"sleep {markers[0]}" for p in listed), listed
        others = [
            await ws.runtime.exec(f"setsid sleep {m} > /dev/null 2>&1 & pgrep -xfc 'sleep {markers[0]}'")
            for m in markers[1:]
        ]
        for other in others:  # in the same sandbox: they see the first run's background process
            result = await other.result()
            assert (result.status, result.stdout) == ("completed", "1\n"), result
        await wait_until(lambda: all(sleepers(m) for m in markers))
        listed = await ws.runtime.processes()
        assert {f"sleep {m}" for m in markers} <= {p.command for p in listed}, listed
        assert await ws.runtime.end_sandbox() is True
        await wait_until(lambda: not any(processes_with(f"sleep {m}") for m in markers), within=30)
        assert (await first.result()).status in ("failed", "cancelled")  # ended with its sandbox


async def test_a_pid_file_written_by_a_running_command_is_visible_through_a_client(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        # Still running when the file shows, however late a loaded machine's sync (see tests/runtime's
        # test_a_pid_file_is_visible_through_fs_while_the_command_runs).
        handle = await ws.runtime.exec("echo $$ > app.pid; sleep 120; echo done")
        await _until_exists(ws, "/workspace/app.pid", within=60.0)
        await handle.kill()
        assert (await handle.result()).status == "cancelled"


async def test_a_worker_lost_under_a_live_sandbox_gives_a_fresh_one_and_keeps_what_was_synced(
    cluster: Settings, name: str
) -> None:
    import ray

    from computer.actors import NAMESPACE
    from computer.actors._pool_registry import named_workers

    await workers_with_a_restart_left("shell", cluster.shell_pool_size)
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"echo kept > kept.txt; setsid sleep {marker} &")).result()
        assert first.status == "completed"
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        for worker, (kind, _) in named_workers().items():
            if kind == "shell":
                ray.kill(ray.get_actor(worker, namespace=NAMESPACE), no_restart=False)
        await wait_until(lambda: not processes_with(f"sleep {marker}"), within=30)
        # A look at the processes first (is my server up?) says none, and keeps the notice.
        assert all(marker not in p.command for p in await ws.runtime.processes())
        # The very next call runs (on the restarted worker, in a fresh sandbox) and says why its
        # background processes are gone; before, it failed with "exec worker died" and only a retry ran.
        after = await (await ws.runtime.exec("cat kept.txt")).result()
        assert (after.status, after.stdout) == ("completed", "kept\n"), after
        assert after.stderr.startswith("computer: the exec worker holding this workspace's live sandbox"), (
            after
        )
        again = await (await ws.runtime.exec("true")).result()
        assert (again.status, again.stderr) == ("completed", ""), again  # said once
        assert all(marker not in p.command for p in await ws.runtime.processes())


async def test_a_live_sandbox_whose_owner_died_ends_on_its_worker_keeping_what_was_synced(
    cluster: Settings, name: str
) -> None:
    """Pins live in the owner's memory: once it died, its sandbox's background process ran on in the
    worker, out of reach of the new owner (``processes()`` [], ``end_sandbox()`` False, "no live
    sandbox") and synced nowhere, 23 s later still and up to ``live_lifetime`` (1 h). The worker
    ends it, as it kills a run whose owner died."""
    from owner_models import kill_owner

    await workers_with_a_restart_left("shell", cluster.shell_pool_size)
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"echo kept > kept.txt; setsid sleep {marker} &")).result()
        assert first.status == "completed", first
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        await kill_owner(computer.workspace_actor(name))
        await wait_until(lambda: not processes_with(f"sleep {marker}"), within=30)
        assert await ws.fs.read_text("/workspace/kept.txt") == "kept\n"  # through a new owner
        assert await ws.runtime.processes() == []


async def test_closing_a_workspace_whose_background_process_writes_does_not_wedge_its_name(
    ray_session: object, tmp_path: Path, name: str
) -> None:
    """Hosted owners: the close ends the live sandbox, whose last syncs call the closing workspace
    back; those calls waited for the close to end. delete_workspace took its 30 s stop timeout, then
    every call of the name hung (hibernation too, in 6 of 9 tries). Dedicated owners answered them."""
    computer.init(data_dir=tmp_path / "data", shell_pool_size=1, python_pool_size=0)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.mkdir("/workspace", recursive=True)
            started = await (
                await ws.runtime.exec("(while true; do echo x >> log; sleep 0.05; done) > /dev/null 2>&1 &")
            ).result()
            assert started.status == "completed", started
            await _until_exists(ws, "/workspace/log")
            await asyncio.sleep(0.5)  # the writer's appends go on: the close's last sync has work
        async with asyncio.timeout(20):  # bounded: the deadlock held the delete 30 s, then the name for good
            deleted = await computer.delete_workspace(name, force=True)
            assert deleted.owner_stopped
            async with computer.get_workspace(name) as again:
                assert await again.fs.ls("/") == []
    finally:
        computer.init(data_dir=tmp_path / "data")  # the default pools again


def _read(path: str) -> str:
    """``path``'s text, or nothing (the process has gone)."""
    with contextlib.suppress(OSError), open(path) as f:
        return f.read()
    return ""


async def test_hibernation_pulls_what_a_background_writer_wrote_last(
    ray_session: object, tmp_path: Path, name: str
) -> None:
    """The close ends the live sandbox after a last pull, whose sync calls the closing owner answered
    "moved": a hosted workspace lost its last 1.4 s of writes (the ticks' pulls were refused too). The
    host reads the log through the writer's own directory (``/proc/<pid>/cwd``) until the sandbox
    ends: the workspace must hold everything it read there (the pull covers everything up to the
    kill). Before, the host's last look was compared with the last line's stamp within 0.6 s, which
    a loaded machine's writer (a ``date`` and a ``sleep`` a line) could miss with nothing lost."""
    computer.init(data_dir=tmp_path / "data", shell_pool_size=1, python_pool_size=0, hibernate_after=2.0)
    marker = f"sleep 0.0{unique_sleep().replace('.', '')}"  # ~50-90 ms, its own number
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.mkdir("/workspace", recursive=True)
            writer = f"(while true; do date +%s.%N >> log; {marker}; done) > /dev/null 2>&1 &"
            started = await (await ws.runtime.exec(writer)).result()
            assert started.status == "completed", started
        seen = ""
        async with asyncio.timeout(60):  # bounded: hibernation after 1 s idle ends the sandbox
            while pids := processes_with(marker):
                for pid in pids:
                    seen = max(seen, _read(f"/proc/{pid}/cwd/log"), key=len)
                await asyncio.sleep(0.02)
        assert seen.count("\n") >= 2, seen  # the host read the log while the writer ran
        async with computer.get_workspace(name) as ws:
            pulled = await ws.fs.read_text("/workspace/log")
        assert pulled.startswith(seen), (len(pulled), len(seen), seen[len(pulled) - 40 :])
    finally:
        computer.init(data_dir=tmp_path / "data")  # the default pools again


async def test_a_workspace_rename_keeps_the_file_a_background_process_writes_through_a_pool(
    cluster: Settings, name: str
) -> None:
    """The push's renames and the live pull's followed renames cross the worker's owner calls (the
    codec and the pickled pull result): a hard link stays one, a descriptor keeps writing."""
    expected = "".join(f"{i}\n" for i in range(1, 201))
    async with computer.get_workspace(name) as ws:
        made = await (await ws.runtime.exec("echo one > x && ln x y")).result()
        assert made.status == "completed", made
        await ws.fs.rename("/workspace/x", "/workspace/z")
        linked = await (await ws.runtime.exec("echo two >> y && stat -c %h z")).result()
        assert (linked.status, linked.stdout) == ("completed", "2\n"), linked
        assert await ws.fs.read_text("/workspace/z") == "one\ntwo\n"
        started = await (
            await ws.runtime.exec(
                "(exec 3>>app.log; for i in $(seq 1 200); do echo $i >&3; sleep 0.01; done) >/dev/null 2>&1 &"
            )
        ).result()
        assert started.status == "completed", started
        await _until_exists(ws, "/workspace/app.log", within=10.0)
        await ws.fs.rename("/workspace/app.log", "/workspace/kept.log")

        async def complete() -> bool:
            return await ws.fs.exists("/workspace/kept.log") and (
                await ws.fs.read_text("/workspace/kept.log")
            ).endswith("\n200\n")

        deadline = time.monotonic() + 60
        while not await complete():
            assert time.monotonic() < deadline, "the background writer's lines did not all arrive"
            await asyncio.sleep(0.05)
        assert await ws.fs.read_text("/workspace/kept.log") == expected
        assert not await ws.fs.exists("/workspace/app.log")


async def test_large_files_and_workspace_links_keep_their_names_through_a_pool(
    cluster: Settings, name: str
) -> None:
    """The large-file and link rules across the worker's owner calls: a run's hard link to a large
    file reaches the workspace, a name the client links is the same file in the sandbox, a write
    through it shows in every name there, and a run's rename of it arrives whole."""
    import hashlib

    async with computer.get_workspace(name) as ws:
        made = await (
            await ws.runtime.exec("head -c 2500000 /dev/urandom > big && ln big big2 && stat -c %i big")
        ).result()
        assert made.status == "completed" and made.skipped == [], made
        assert (await ws.fs.stat("/workspace/big2")).nlink == 2
        await ws.fs.link("/workspace/big", "/workspace/big3")
        with pytest.raises(FileExistsError, match="big2"):  # the store's error, through the client
            await ws.fs.link("/workspace/big", "/workspace/big2")
        await ws.fs.write_file("/workspace/big3", b"n" * 2_000_000)
        seen = await (
            await ws.runtime.exec("stat -c %i big3 && sha256sum big big2 big3 | cut -c1-64")
        ).result()
        assert (
            seen.stdout.split() == [made.stdout.strip()] + [hashlib.sha256(b"n" * 2_000_000).hexdigest()] * 3
        )
        # A run's rename of the large file (its other names removed): the first page keeps the chunks
        # the pull's removals would free (``SyncPull.keep`` through the worker's owner call).
        moved = await (await ws.runtime.exec("mv big moved && rm big2 big3 && sha256sum moved")).result()
        assert moved.status == "completed" and moved.skipped == [], moved
        assert moved.stdout[:64] == hashlib.sha256(b"n" * 2_000_000).hexdigest()
        assert await ws.fs.read_file("/workspace/moved") == b"n" * 2_000_000
        assert not await ws.fs.exists("/workspace/big") and not await ws.fs.exists("/workspace/big3")


async def test_a_worker_that_dies_under_end_sandbox_ends_it_and_the_next_run_says_so(
    cluster: Settings, name: str
) -> None:
    """``end_sandbox`` while its worker dies (SIGKILL as the call reaches it): the sandbox ended with
    the worker, so the call says True, and the next run says the worker holding the sandbox died (what
    the background processes wrote after the last sync is not kept: no end's pull came). Before, the
    call said False (none) and dropped the pin, and the next run said nothing."""
    import ray

    from computer.actors.pools import LOST_SANDBOX

    await workers_with_a_restart_left("shell", cluster.shell_pool_size)
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"echo kept > kept.txt; setsid sleep {marker} &")).result()
        assert first.status == "completed", first
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        worker, handle = await sandbox_worker(marker)
        os.kill(worker, signal.SIGSTOP)  # the call reaches a worker that never answers it...
        try:
            ending = asyncio.ensure_future(ws.runtime.end_sandbox())
            await asyncio.sleep(1.0)
            assert not ending.done()
        finally:
            ray.kill(handle, no_restart=True)  # ... and dies under it (SIGKILL; others may restart it)
        assert await asyncio.wait_for(ending, 60) is True
        await wait_until(lambda: not processes_with(f"sleep {marker}"), within=30)
        after = await (await ws.runtime.exec("cat kept.txt")).result()
        assert (after.status, after.stdout) == ("completed", "kept\n"), after
        notice = LOST_SANDBOX.split("(")[0]
        assert after.stderr.startswith(notice), after
        again = await (await ws.runtime.exec("true")).result()
        assert (again.status, again.stderr) == ("completed", ""), again  # said once


async def test_a_kill_process_whose_worker_just_died_says_no_such_process_and_the_next_run_says_why(
    cluster: Settings, name: str
) -> None:
    """``kill_process`` sent as the worker holding the sandbox is killed (restarting, or dead for
    good): its processes died with it, so ``ProcessLookupError`` naming the dead worker (what
    ``computer kill`` and the ``kill`` tool expect), and the next run still says the sandbox was lost.
    Before, Ray's ``ActorUnavailableError``/``ActorDiedError`` ("may or may not have been executed")
    came through to the caller."""
    import ray

    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"setsid sleep {marker} > /dev/null 2>&1 &")).result()
        assert first.status == "completed", first
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        listed: list[int] = []
        for _ in range(100):  # bounded: 10 s (``setsid`` may not have exec'd ``sleep`` yet)
            listed = [p.pid for p in await ws.runtime.processes() if p.command == f"sleep {marker}"]
            if listed:
                break
            await asyncio.sleep(0.1)
        [pid] = listed
        _, handle = await sandbox_worker(marker)
        ray.kill(handle, no_restart=True)  # (the SIGKILL of a worker that restarts: the next test)
        with pytest.raises(ProcessLookupError, match=f"no process {pid}"):
            await ws.runtime.kill_process(pid)
        await wait_until(lambda: not processes_with(f"sleep {marker}"), within=30)
        after = await (await ws.runtime.exec("echo fresh")).result()
        assert (after.status, after.stdout) == ("completed", "fresh\n"), after
        assert after.stderr.startswith("computer: the exec worker holding this workspace's live sandbox"), (
            after
        )


async def test_end_sandbox_after_its_worker_restarted_leaves_the_notice_to_the_next_run(
    cluster: Settings, name: str
) -> None:
    """The worker holding the sandbox was killed and is back (restarted in place, a new process that
    holds no sandbox): ``end_sandbox`` finds none there (False), and the next run still says the
    worker died with the sandbox's processes. Before, the call dropped the pin, the run was placed
    anew and said nothing."""
    import ray

    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"setsid sleep {marker} > /dev/null 2>&1 &")).result()
        assert first.status == "completed", first
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        worker, handle = await sandbox_worker(marker)
        os.kill(worker, signal.SIGKILL)
        pid, dead = worker, 0
        for _ in range(600):  # bounded: 60 s
            try:
                pid = (await handle.stats.remote())["pid"]
                if pid != worker:
                    break
            except ray.exceptions.ActorUnavailableError:
                dead = 0  # restarting
            except ray.exceptions.RayActorError:  # out of restarts (earlier tests killed it too)?
                dead += 1
                if dead >= 30:  # 3 s in a row: dead for good
                    break
            await asyncio.sleep(0.1)
        gone = dead >= 30
        assert gone or pid != worker  # restarted in place and answering, or dead for good
        # A restarted worker holds none: the call ended nothing (False); a dead one took it along.
        assert await ws.runtime.end_sandbox() is gone
        after = await (await ws.runtime.exec("echo fresh")).result()
        assert (after.status, after.stdout) == ("completed", "fresh\n"), after
        assert after.stderr.startswith("computer: the exec worker holding this workspace's live sandbox"), (
            after
        )
        again = await (await ws.runtime.exec("true")).result()
        assert (again.status, again.stderr) == ("completed", ""), again  # said once


async def test_a_background_log_is_written_through_a_pool_and_a_program_may_not_change_it(
    cluster: Settings, name: str
) -> None:
    """A live sandbox's background logs are the runtime's own calls (``_protected.OWN``), which go
    to the owner as any call of its worker does; a python program's calls to the same log are refused."""
    async with computer.get_workspace(name) as ws:
        started = await (await ws.runtime.exec("(sleep 0.3; echo bg) &")).result()
        assert started.status == "completed", started.error
        log = f"/.computer/output/{started.id}.background.log"
        deadline = time.monotonic() + 30
        while not (await ws.fs.exists(log) and await ws.fs.read_text(log) == "bg\n"):
            assert time.monotonic() < deadline, "no background log"
            await asyncio.sleep(0.1)
        source = f"import workspace\ntry:\n    workspace.write_file({log!r}, 'forged')\nexcept PermissionError:\n    print('refused')\n"
        tried = await (await ws.runtime.exec(source, backend="python")).result()
        assert (tried.status, tried.stdout) == ("completed", "refused\n"), (tried.stderr, tried.error)
        assert await ws.fs.read_text(log) == "bg\n"
        assert await ws.runtime.end_sandbox() is True


@pytest.mark.parametrize("end_first", [False, True], ids=["run", "end_sandbox"])
async def test_a_worker_retired_by_a_scale_down_is_no_lost_sandbox(
    ray_session: object, tmp_path: Path, name: str, end_first: bool
) -> None:
    """A pool that scales to zero drains its idle worker: the drain ends the workspace's idle live
    sandbox (what it wrote pulled) and the control loop removes the worker. The workspace's next run
    (after a ``kill_process``, which finds no process and says why, and an ``end_sandbox``, which
    has nothing left to end) starts a fresh sandbox on a new worker
    and has nothing to be told: before, its stderr said the worker "died" and the sandbox's background
    processes "ended with it" (there were none)."""
    import ray

    from computer.actors import NAMESPACE

    computer.init(
        data_dir=tmp_path / "data",
        shell_pool_size=0,
        shell_pool_max=1,
        python_pool_size=0,
        pool_idle_after=1.0,
    )
    async with computer.get_workspace(name) as ws:
        first = await asyncio.wait_for((await ws.runtime.exec("echo kept > kept.txt")).result(), 120)
        assert first.status == "completed", first
        control = ray.get_actor("computer:pools", namespace=NAMESPACE)  # (started by the first run)
        deadline = time.monotonic() + 60
        while True:  # bounded: the idle worker is drained and removed after ~1 s
            status = (await control.status.remote())["pools"]["shell"]
            if not status["workers"] and any(d.startswith("remove ") for _, d in status["decisions"]):
                break
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.2)
        if end_first:
            with pytest.raises(ProcessLookupError) as killed:
                await ws.runtime.kill_process(1, backend="shell")
            assert "died" not in str(killed.value) and "retired" in str(killed.value), killed.value
            assert await ws.runtime.end_sandbox(backend="shell") in (True, False)
        after = await asyncio.wait_for((await ws.runtime.exec("cat kept.txt")).result(), 120)
    assert (after.status, after.stdout, after.stderr) == ("completed", "kept\n", ""), after
