"""Live sandboxes (issue 18, SPEC section 10): runs of one workspace share a sandbox whose files sync
both ways while anything runs in it; background processes outlive their call; kill keeps work.

Each test makes its own backend (and so its own live sandboxes): ``live_idle`` short where a test
waits for the idle end.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

import computer
from computer.runtime import ProcessInfo, ShellBackend
from computer.storage._chunks import CHUNK_SIZE

from ._live_support import eventually, host_pids_with, host_shows, kill_after_the_loop_wrote, ticks_on

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


@pytest.fixture
async def ws() -> AsyncIterator[computer.Workspace]:
    async with computer.Workspace(backends=[ShellBackend()]) as workspace:
        await workspace.fs.mkdir("/workspace")
        yield workspace


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


def _shows(ws: computer.Workspace, marker: str) -> Callable[[], Awaitable[bool]]:
    """A check: a process whose command line holds ``marker`` is on the host and in the sandbox's list."""

    async def check() -> bool:
        listed = any(marker in p.command for p in await ws.runtime.processes())
        return listed and bool(host_pids_with(f"sleep {marker}"))

    return check


async def test_a_server_started_in_one_call_answers_the_next(ws: computer.Workspace) -> None:
    started = await run(
        ws,
        "python3 -m http.server 8765 --bind 127.0.0.1 > server.log 2>&1 & "
        "for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765))' "
        "2>/dev/null && break; sleep 0.05; done; echo up",
    )
    assert (started.status, started.stdout) == ("completed", "up\n")
    await ws.fs.write_file("/workspace/page.txt", "served\n")
    fetched = await run(
        ws,
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8765/page.txt').read().decode(), end='')\"",
    )
    assert (fetched.status, fetched.stdout) == ("completed", "served\n")
    listed = await ws.runtime.processes()
    assert any("http.server" in p.command for p in listed)
    assert all(isinstance(p, ProcessInfo) and p.pid > 1 for p in listed)


async def test_a_pid_file_is_visible_through_fs_while_the_command_runs(ws: computer.Workspace) -> None:
    # Still running when the file shows, however late a loaded machine's sync (a command of 3 s had
    # completed before a sync 3.5 s late brought it: not "cancelled").
    handle = await ws.runtime.exec("echo $$ > app.pid; sleep 120; echo done")
    await eventually(lambda: ws.fs.exists("/workspace/app.pid"), within=60.0)
    assert (await ws.fs.read_text("/workspace/app.pid")).strip().isdigit()
    await handle.kill()
    result = await handle.result()
    assert result.status == "cancelled"


async def test_a_workspace_write_reaches_a_running_command(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec(
        "for i in $(seq 1200); do [ -f go ] && cat go && exit 0; sleep 0.05; done; exit 1"  # 60 s at least
    )
    await asyncio.sleep(0.2)
    await ws.fs.write_file("/workspace/go", "from the workspace\n")
    result = await handle.result()
    assert (result.status, result.stdout) == ("completed", "from the workspace\n")


async def test_a_killed_loop_keeps_the_files_it_wrote(ws: computer.Workspace) -> None:
    await kill_after_the_loop_wrote(ws, "for i in $(seq 50); do echo $i > f$i; done; echo wrote; sleep 100")


async def test_a_timeout_keeps_the_files_and_background_processes_survive_it(ws: computer.Workspace) -> None:
    marker = f"{700 + os.getpid() % 200}.{time.time_ns() % 10**6:06d}"
    # The child's own session first (field 6 of its stat): a loaded host could reach the timeout before
    # ``setsid`` ran, and the run's process group was killed with the child still in it.
    own_session = (
        'until [ "$(cut -d" " -f6 /proc/$!/stat)" != "$(cut -d" " -f6 /proc/$$/stat)" ]; do sleep 0.01; done'
    )
    script = f"setsid sleep {marker} & {own_session}; echo partial > partial.txt; sleep 100"
    result = await run(ws, script, timeout=3)
    assert (result.status, result.exit_code) == ("cancelled", 124)
    assert await ws.fs.read_text("/workspace/partial.txt") == "partial\n"

    async def listed() -> bool:  # (its command line is ``sleep`` once it exec-ed)
        return any(p.command == f"sleep {marker}" for p in await ws.runtime.processes())

    await eventually(listed, within=30)


async def test_background_output_goes_to_its_log_and_kill_process_ends_it(ws: computer.Workspace) -> None:
    started = await run(ws, "(for i in $(seq 1000); do echo tick $i; sleep 0.05; done) & echo started")
    # (what the loop printed before the shell's exit was read may come with it, as in a terminal)
    assert started.stdout.startswith("started\n")
    log = f"/.computer/output/{started.id}.background.log"
    await eventually(lambda: ws.fs.exists(log), within=15.0)
    await eventually(lambda: _contains(ws, log, "tick 3"), within=15.0)
    # The loop is the forked subshell: its command line is the whole script (a `sleep 0.05` of it may show too).
    mine = [p for p in await ws.runtime.processes() if p.exec_id == started.id]
    loop = [p for p in mine if p.command.startswith("/bin/bash -c (for i")]
    assert len(loop) == 1 and loop[0].log == log and all(p.log == log for p in mine), mine
    await ws.runtime.kill_process(loop[0].pid)

    async def loop_gone() -> bool:
        return not [p for p in await ws.runtime.processes() if p.exec_id == started.id]

    await eventually(loop_gone, within=15.0)
    with pytest.raises(ProcessLookupError):
        await ws.runtime.kill_process(999_999)


async def test_a_background_printer_is_read_at_most_at_its_rate_and_its_log_keeps_the_tail() -> None:
    """``yes &`` left running: the host read and dropped all it printed, 54-73% of a core for as long
    as the sandbox lived. Past a first log's worth, its pipe is read at ``BACKGROUND_RATE`` at most
    (``yes`` waits on its full pipe meanwhile); the log still holds its last output."""
    from computer.runtime._live_parts import BACKGROUND_LOG_BYTES, BACKGROUND_RATE

    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(ws, "setsid yes printing &")
        began = time.monotonic()
        sandbox = backend._lives._live[ws.fs.instance]
        await asyncio.sleep(1.5)  # a window to read a rate over (the bound uses the time it took)
        logged = sandbox.background[started.id]
        read = logged.dropped + len(logged.data)
        bound = BACKGROUND_LOG_BYTES + BACKGROUND_RATE * (time.monotonic() - began) + (1 << 20)
        assert BACKGROUND_LOG_BYTES <= read <= bound, (read, bound)
        assert b"printing\nprinting\n" in logged.data
        assert any(p.command == "yes printing" for p in await ws.runtime.processes())


async def test_a_change_refused_during_a_run_stays_skipped_when_later_ones_are_pulled(
    ws: computer.Workspace,
) -> None:
    """The workspace writes a file a running program appends to: a sync refuses the program's
    version (the workspace's is kept) and later appends are pulled again. The refused change is lost,
    so the path stays in ``skipped`` with its reason (a later pull took it out: half the lines of
    two writers were lost, listed nowhere)."""
    handle = await ws.runtime.exec("for i in $(seq 60); do echo S$i >> shared.txt; sleep 0.03; done")
    for i in range(8):
        await asyncio.sleep(0.15)  # writes spread over the run's 1.8 s, between its 100 ms syncs
        await ws.fs.write_file("/workspace/shared.txt", f"W{i}\n")
    result = await handle.result()
    assert result.status == "completed", result
    assert "/workspace/shared.txt" in result.pulled, result
    reason = result.skipped_reasons.get("/workspace/shared.txt", "")
    assert reason.startswith("changed in the workspace"), result
    # The reason says what the workspace holds: the run's last version was pulled after its writes
    # stopped (it read "the workspace's version was kept" beside the program's content).
    assert reason.endswith("pulled over it") and (await ws.fs.read_text("/workspace/shared.txt")).endswith(
        "S60\n"
    ), (reason, result)


@pytest.mark.parametrize("ended", [False, True])
async def test_a_background_change_refused_with_no_run_in_progress_is_the_next_runs_skip(
    ws: computer.Workspace, ended: bool
) -> None:
    """A background process appends to a file the workspace writes meanwhile, with no run in progress:
    syncs refuse its changes for the workspace's, and nothing said so (a sync's ``skipped`` went to the
    runs in progress only: none, 10 of 12 such edits lost unreported). The next run of the workspace
    lists the path, saying a background process's change was refused; so does the next run in a fresh
    sandbox when the one that refused it ended first. Listed once."""
    started = await run(
        ws, "(for i in $(seq 50); do echo S$i >> shared.txt; sleep 0.03; done; echo done > finished) &"
    )
    assert started.status == "completed" and "/workspace/shared.txt" not in started.skipped
    for i in range(8):
        await asyncio.sleep(0.15)  # writes spread over the process's ~1.5 s, between the 100 ms syncs
        await ws.fs.write_file("/workspace/shared.txt", f"W{i}\n")
    await eventually(lambda: ws.fs.exists("/workspace/finished"), within=20)
    if ended:
        assert await ws.runtime.end_sandbox()
    result = await run(ws, "true")
    reason = result.skipped_reasons.get("/workspace/shared.txt", "")
    assert reason.startswith("changed by a background process") and "refused" in reason, result
    assert "/workspace/shared.txt" in result.skipped
    assert "/workspace/shared.txt" not in (await run(ws, "true")).skipped


async def _contains(ws: computer.Workspace, path: str, text: str) -> bool:
    return text in await ws.fs.read_text(path)


async def test_env_and_cwd_are_per_call(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/sub")
    first = await run(ws, "pwd; echo ${ONLY_FIRST:-unset}", cwd="/workspace/sub", env={"ONLY_FIRST": "1"})
    second = await run(ws, "pwd; echo ${ONLY_FIRST:-unset}")
    assert first.stdout == "/workspace/sub\n1\n"
    assert second.stdout == "/workspace\nunset\n"


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"A=B": "1"}, ValueError),
        ({"": "1"}, ValueError),
        ({"A\0B": "1"}, ValueError),
        ({"A": "x\0y"}, ValueError),
        ({"A": 1}, TypeError),
        ({1: "x"}, TypeError),
    ],
)
async def test_an_env_no_process_can_have_is_refused_before_anything_starts(
    ws: computer.Workspace, monkeypatch: pytest.MonkeyPatch, env: dict[object, object], error: type
) -> None:
    """Such an ``env`` reached the live sandbox's init, which could not spawn the command and said
    nothing: the run never returned, and with a timeout the sandbox was ended with the background
    processes of earlier calls. ``exec`` now refuses it; and an init handed one anyway (the check
    left out) fails that command alone, at once."""
    marker = "1001.5"
    assert (await run(ws, f"setsid sleep {marker} > /dev/null 2>&1 &")).status == "completed"
    await eventually(_shows(ws, marker))
    with pytest.raises(error):
        await ws.runtime.exec("echo ok", env=env)  # type: ignore[arg-type]
    if error is ValueError:
        monkeypatch.setattr("computer.runtime._runtime.check_env", lambda env: None)
        spawned = await asyncio.wait_for(run(ws, "echo ok", env=env, timeout=30), 20)
        assert spawned.exit_code == 125 and "cannot start the command" in spawned.stderr, spawned
    assert (await run(ws, "echo ok")).stdout == "ok\n"
    assert await _shows(ws, marker)()  # the background process of the first call is still there


async def test_a_timeout_that_is_not_a_positive_number_is_refused(ws: computer.Workspace) -> None:
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            await ws.runtime.exec("true", timeout=timeout)


async def test_the_sandbox_ends_after_its_idle_time_and_its_processes_are_gone() -> None:
    backend = ShellBackend(live_idle=0.5)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        marker = f"{300 + os.getpid() % 200}.{time.time_ns() % 10**6:06d}"
        # A process that ends by itself; the sandbox then idles out and everything of it is gone.
        result = await run(
            ws, f"setsid sleep {marker} & setsid sh -c 'sleep 0.3; echo late > late.txt' & true"
        )
        assert result.status == "completed"
        # The call may return before the background child has exec'd ``sleep``: wait for it to show.
        await eventually(_shows(ws, marker), within=10)
        assert host_pids_with(f"sleep {marker}")
        await ws.runtime.kill_process(
            next(p.pid for p in await ws.runtime.processes() if marker in p.command)
        )

        async def ended() -> bool:
            return backend.live_sandboxes() == 0

        await eventually(ended, within=10)
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"
        assert not host_pids_with(f"sleep {marker}")
        again = await run(ws, "cat late.txt")
        assert again.stdout == "late\n"


async def test_end_sandbox_kills_everything_and_keeps_what_was_written(ws: computer.Workspace) -> None:
    marker = f"{100 + os.getpid() % 200}.{time.time_ns() % 10**6:06d}"
    await run(ws, f"setsid sh -c 'echo kept > kept.txt; exec sleep {marker}' & sleep 0.2")
    await host_shows(marker)
    assert await ws.runtime.end_sandbox() is True
    assert not host_pids_with(f"sleep {marker}")
    assert await ws.fs.read_text("/workspace/kept.txt") == "kept\n"
    assert await ws.runtime.processes() == []
    assert await ws.runtime.end_sandbox() is False


async def test_the_memory_limit_holds_across_calls() -> None:
    """The sandbox's memory limit is shared by everything in it: a background process holding memory
    counts against a later call's, so one of the two is killed (the kernel picks), never both kept."""
    async with computer.Workspace(backends=[ShellBackend(memory_mb=128)]) as ws:
        await ws.fs.mkdir("/workspace")
        hold = (
            "import time; b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); "
            "print('held', flush=True); time.sleep(60)"
        )
        started = await run(
            ws,
            f"setsid python3 -c {shlex.quote(hold)} > hold.log 2>&1 & "
            "for i in $(seq 100); do grep -q held hold.log && break; sleep 0.05; done; echo holding",
        )
        assert started.stdout == "holding\n"
        grab = "b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); print('got')"
        second = await run(ws, f"python3 -c {shlex.quote(grab)}")
        holder_alive = any("bytearray" in p.command for p in await ws.runtime.processes())
        if second.exit_code == 137:  # the call was the victim: it says so
            assert second.error is not None and "out of memory" in second.error
        else:  # the background holder was: the call is a normal result that says so on stderr
            assert (second.status, second.stdout, second.error) == ("completed", "got\n", None)
            assert not holder_alive
            assert "the kernel killed 1 other process(es) of the sandbox" in second.stderr, second.stderr
        after = await run(ws, "echo fine")
        assert (after.status, after.stdout) == ("completed", "fine\n")


def _init_above(pid: int) -> int:
    """The host pid of the live sandbox's init: the first ``python3`` above ``pid``."""
    for _ in range(8):
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rpartition(")")[2].split()[1])
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "python3":
                return pid
    raise AssertionError("no init above the command")


async def test_a_sandbox_ended_under_a_run_after_an_out_of_memory_kill_says_out_of_memory() -> None:
    """Out of memory with the group still full of the run's files, the kernel kills the init next where
    it cannot be made immune (no CAP_SYS_RESOURCE: a Ray worker, a container like this machine's):
    the result said "the live sandbox ended: its first process ended", no exit code (the scratch test
    of test_shell.py, 64 MiB: 11 runs of 15 here right after a full suite, 1 of 8 later). Now it says
    why, with 137. The kernel's order is not reproducible on
    demand: here a real kill is counted by the group (a program over the limit), then the init is
    killed by hand while the run goes on."""
    marker = "61.375"
    hog = "python3 -c 'b = bytearray(200 << 20); b[::4096] = bytes(len(b[::4096]))'"
    async with computer.Workspace(backends=[ShellBackend(memory_mb=64)]) as ws:
        await ws.fs.mkdir("/workspace")
        handle = await ws.runtime.exec(f"{hog} || echo killed; echo kept > kept.txt; sleep {marker}")
        async for snapshot in handle:
            if "killed" in snapshot.stdout:
                break

        await host_shows(marker)
        (sleeper,) = host_pids_with(f"sleep {marker}")
        os.kill(_init_above(sleeper), 9)
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.exit_code == 137 and result.error is not None, result
        assert "out of memory" in result.error and "its first process ended" in result.error
        assert await ws.fs.read_text("/workspace/kept.txt") == "kept\n"
        after = await run(ws, "echo fine")
        assert (after.status, after.stdout) == ("completed", "fine\n")


async def test_concurrent_calls_run_in_the_same_sandbox(ws: computer.Workspace) -> None:
    # Each waits (bounded) for the other's file: the first read two.txt after a fixed 0.5 s while the
    # second wrote it 0.2 s after its own start, which a loaded host started 0.3 s later ('', CI-like).
    wait = "for i in $(seq 600); do [ -e {} ] && break; sleep 0.05; done; "
    first = await ws.runtime.exec("echo one > one.txt; " + wait.format("two.txt") + "cat two.txt")
    second = await ws.runtime.exec(wait.format("one.txt") + "echo two > two.txt; cat one.txt")
    a, b = await first.result(), await second.result()
    assert (a.stdout, b.stdout) == ("two\n", "one\n")
    assert "/workspace/one.txt" in a.pulled and "/workspace/two.txt" in b.pulled


async def test_a_reopened_workspace_gets_a_fresh_sandbox_with_everything_synced(tmp_path: object) -> None:
    path = f"{tmp_path}/ws.db"
    backend = ShellBackend()
    async with computer.Workspace(path, backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'sleep 0.3; echo written-late > late.txt' & echo x > early.txt")
    # Closing the workspace ended the sandbox: what the background process had written by then is
    # kept; it was killed with the sandbox, so late.txt never came.
    async with computer.Workspace(path, backends=[backend]) as ws:
        seen = await run(ws, "cat early.txt; ls")
        assert seen.stdout.startswith("x\n")
        assert backend.live_sandboxes() == 1


async def test_a_file_a_running_program_holds_open_is_never_replaced_under_it(ws: computer.Workspace) -> None:
    """A sync pulls a file the program has open but not written yet (empty); a workspace write
    elsewhere then makes the push carry everything since the mirror's revision. The push must not
    re-create that file (the program would write into a file no longer there, and rename an empty
    one over its target)."""
    started = await run(
        ws, "setsid sh -c 'exec 3> k.tmp; sleep 1; echo v >&3; mv k.tmp k' > /dev/null 2>&1 &"
    )
    assert started.status == "completed"
    for i in range(40):  # workspace writes while the program holds k.tmp open
        await ws.fs.write_file(f"/workspace/other{i % 3}", str(i))
        await asyncio.sleep(0.025)

    async def renamed() -> bool:
        return await ws.fs.exists("/workspace/k")

    await eventually(renamed, within=10)
    assert await ws.fs.read_text("/workspace/k") == "v\n"


async def test_a_command_gets_its_own_streams_directory_and_signals_only(ws: computer.Workspace) -> None:
    """The init starts commands with ``posix_spawn``: a command holds only its three streams (none of
    the init's descriptors), runs in its own directory and session with default signal handling, at
    an OOM score above the init's; a missing directory or program is reported as a shell would."""
    await ws.fs.mkdir("/workspace/sub")
    seen = await run(
        ws,
        "ls /proc/$$/fd > ../fds; tr '\\n' ' ' < ../fds; echo; pwd; grep SigIgn /proc/self/status; "
        "cat /proc/$$/oom_score_adj; [ $(ps -o sid= -p $$) = $$ ] && echo leader",
        cwd="/workspace/sub",
    )
    lines = seen.stdout.splitlines()
    assert sorted(map(int, lines[0].split())) == [0, 1, 2], lines
    assert lines[1] == "/workspace/sub"
    assert (
        int(lines[2].split()[1], 16) & 0x7FFFFFFF == 0
    )  # nothing ignored (the init ignores SIGINT, SIGPIPE)
    assert int(lines[3]) >= 500
    assert lines[4] == "leader"
    missing = await run(ws, "exec no-such-program-here")
    assert missing.exit_code == 127
    await ws.fs.rm("/workspace/sub", recursive=True)
    gone = await run(ws, "true", cwd="/workspace/sub")
    assert gone.status == "failed"
    after = await run(ws, "pwd")
    assert after.stdout == "/workspace\n"


async def test_a_busy_sandbox_that_changes_nothing_is_never_paused(
    ws: computer.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ticker looks before it freezes: a command that only reads (``find``, ``sleep``) runs
    without a pause; one that writes is paused for the sync that brings its file."""
    from computer.runtime import _live

    paused: list[object] = []
    freeze = _live.freeze
    monkeypatch.setattr(_live, "freeze", lambda group: paused.append(group) or freeze(group))
    await run(ws, "mkdir -p a/b && touch a/b/c")
    paused.clear()
    quiet = await run(ws, "sleep 0.5; find . > /dev/null; ls a/b")
    assert (quiet.stdout, paused) == ("c\n", [])
    written = await run(ws, "echo x > f; sleep 0.5")
    assert written.status == "completed" and paused
    assert await ws.fs.read_text("/workspace/f") == "x\n"


async def test_a_command_line_larger_than_a_packet_reaches_the_init_through_a_pipe(
    ws: computer.Workspace,
) -> None:
    """A command (with its environment) over the channel's 64 KiB packet goes through a pipe the init
    reads whole; the command still gets only its three streams."""
    big = "x" * 100_000
    result = await run(
        ws, f": {big}; echo ${{#BIG}}; ls /proc/$$/fd > ../fds; wc -l < ../fds", env={"BIG": big}
    )
    assert (result.status, result.stdout) == ("completed", "100000\n3\n"), result.stderr


async def test_after_a_program_moved_a_directory_the_sandbox_is_watched_again(
    ws: computer.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory a program moves makes the watch unable to vouch: that run's pull walks the tree
    and watches it again. Before: only a push armed a new watch, so until the workspace changed every
    sync walked the whole tree (an idle sandbox ~9 times a second) and a busy one was paused at every
    tick, even by a command that only reads."""
    from computer.runtime import _live
    from computer.runtime._mirror_pull import MirrorPull

    await run(ws, "mkdir -p t/d{0..9} && touch t/d{0..9}/f")
    moved = await run(ws, "mkdir -p a/b && mv a c && echo x > c/b/f")
    assert moved.status == "completed" and await ws.fs.read_text("/workspace/c/b/f") == "x\n"
    walks: list[object] = []
    paused: list[object] = []
    scan, freeze = MirrorPull.scan, _live.freeze
    monkeypatch.setattr(MirrorPull, "scan", lambda self, *times: walks.append(self) or scan(self, *times))
    monkeypatch.setattr(_live, "freeze", lambda group: paused.append(group) or freeze(group))
    quiet = await run(ws, "sleep 0.5; find . > /dev/null; cat c/b/f")
    assert (quiet.stdout, paused, walks) == ("x\n", [], [])
    written = await run(ws, "echo y > c/b/g")
    assert written.status == "completed" and await ws.fs.read_text("/workspace/c/b/g") == "y\n"
    await asyncio.sleep(0.5)  # idle ticks
    assert walks == []


async def test_a_sandbox_ended_while_a_tick_plans_its_pull_keeps_what_that_pull_would_bring(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace closes while a tick's pull plans in a worker thread: the end cancels the tick,
    and the thread had taken the watch's events. Before, the thread went on alone and its plan was
    dropped, so the end's pull found the watch quiet and pulled nothing: the warm mirror kept a file
    a background process wrote that the workspace never got (a fidelity machine's ``p/bg0.f2``, in
    the sandbox's view and not the workspace's, nothing skipped). Now the pull waits for its plan and
    lets the watch go, and the end's pull walks the tree."""
    from computer.runtime._mirror_pull import MirrorPull

    planning, go = threading.Event(), threading.Event()
    plan = MirrorPull.plan

    def held_plan(self: MirrorPull, *, paced: bool = False, cap: int | None = None) -> object:
        found = plan(self, paced=paced, cap=cap)
        if paced and threading.current_thread() is not threading.main_thread() and not planning.is_set():
            planning.set()  # a tick's plan, in a worker thread: held until the end has cancelled it
            go.wait(10)
        return found

    path, backend = f"{tmp_path}/ws.db", ShellBackend()
    async with computer.Workspace(path, backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'sleep 0.3; echo late > late.txt; sleep 30' > /dev/null 2>&1 &")
        monkeypatch.setattr(MirrorPull, "plan", held_plan)
        await eventually(lambda: asyncio.to_thread(planning.wait, 0.05), within=10)
        closing = asyncio.ensure_future(ws.close())
        await asyncio.sleep(0.2)  # the end cancelled the tick and waits for the sandbox's lock
        go.set()
        await closing
    monkeypatch.setattr(MirrorPull, "plan", plan)
    async with computer.Workspace(path, backends=[backend]) as ws:
        seen = await run(ws, "cat late.txt")  # the warm mirror has it
        assert (seen.stdout, await ws.fs.exists("/workspace/late.txt")) == ("late\n", True)
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"


async def test_a_sync_cancelled_while_it_pauses_the_sandbox_leaves_it_running(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync (a tick's, a run's start) cancelled while its worker thread freezes the sandbox: the
    freeze runs to its end and the sandbox is thawed again. Before, the cancellation left the freeze
    unfinished in its thread and nothing thawed the sandbox after it: its processes stood still until
    a later sync happened to pause and thaw it."""
    from computer.runtime import _cgroups, _live

    freezing, go = threading.Event(), threading.Event()

    def slow_freeze(group: object, timeout: float = 1.0) -> bool:
        freezing.set()
        go.wait(10)
        return _cgroups.freeze(group, timeout)  # type: ignore[arg-type]

    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        # Renamed into place: ``> tick`` left it empty while ``date`` started (the run's ``cat`` read ''
        # twice under load, and the test took the loop for stopped).
        loop = "while :; do date +%s%N > t.new && mv t.new tick; sleep 0.01; done"
        await run(ws, f"setsid sh -c '{loop}' > /dev/null 2>&1 &")
        sandbox = backend._lives._live[ws.fs.instance]
        await ws.fs.write_file("/workspace/from-ws.txt", b"x")  # a push to make: the sync pauses it
        monkeypatch.setattr(_live, "freeze", slow_freeze)
        syncing = asyncio.ensure_future(sandbox.sync())
        await asyncio.to_thread(freezing.wait, 10)
        syncing.cancel()
        await asyncio.sleep(0.05)
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await syncing
        monkeypatch.setattr(_live, "freeze", _cgroups.freeze)
        state = (sandbox._freezer / "freezer.state").read_text().strip()
        assert state == "THAWED"
        await ticks_on(ws)  # the loop goes on


def _failing_freezes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The next ``n`` attempts to freeze a sandbox fail as one that timed out does (``[n]``, set by
    the caller): thawed, False."""
    from computer.runtime import _cgroups

    failing, once = [0], _cgroups._freeze_once

    def attempt(group: Path, timeout: float) -> bool:
        if failing[0] > 0:
            failing[0] -= 1
            return False
        return once(group, timeout)

    monkeypatch.setattr(_cgroups, "_freeze_once", attempt)
    return failing


async def test_a_run_whose_sync_could_not_pause_the_sandbox_at_once_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A freeze not done within its second (a loaded machine: a background bash loop forking, load
    ~6 on 2 cores) is let go and tried again: the run whose sync it was starts from the workspace's
    files. Before, one such freeze failed the run ("could not be paused for a sync"; found by
    LiveBackgroundMachine run harder)."""
    failing = _failing_freezes(monkeypatch)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[ShellBackend(live=True)]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sleep 30 > /dev/null 2>&1 &")  # a process: the syncs pause the sandbox
        await ws.fs.write_file("/workspace/from-ws.txt", b"x\n")  # a push to make
        failing[0] = 2  # the run's start sync (a tick's before it may take one)
        result = await run(ws, "cat from-ws.txt")
        assert (result.status, result.stdout, result.error) == ("completed", "x\n", None)


async def test_a_tick_that_could_not_pause_the_sandbox_leaves_the_next_tick_to_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick whose sync could not pause the sandbox (every attempt timed out) leaves the sync to the
    next tick. Before, its error ended the ticker for the sandbox's life: nothing a background process
    wrote reached the workspace until the next run, and the sandbox never ended idle."""
    failing = _failing_freezes(monkeypatch)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[ShellBackend(live=True)]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'sleep 0.5; echo late > late.txt; sleep 30' > /dev/null 2>&1 &")
        failing[0] = 3  # every attempt of the tick that finds late.txt
        await eventually(lambda: ws.fs.exists("/workspace/late.txt"), within=10)
        assert failing[0] == 0  # that tick did meet the failures
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"


# Growing files (``_growing``): the tests of the spacing itself, with their own clock, in test_growing.py.
# A writer appending 64 KiB every 20 ms (past BIG_FILE within ~0.4 s) until ``stop`` exists, then done.
WRITER = (
    'python3 -c "import os, time\n'
    "with open('grow.bin', 'ab') as f:\n"
    "    i = 0\n"
    "    while not os.path.exists('stop') and i < 2000:\n"
    "        f.write(bytes([i % 251]) * 65536); f.flush(); i += 1; time.sleep(0.02)\n"
    'print(i)"'
)


async def test_a_growing_file_is_visible_while_written_and_whole_at_the_runs_end(
    ws: computer.Workspace,
) -> None:
    handle = await ws.runtime.exec(WRITER)

    async def grown() -> bool:
        return (await ws.fs.exists("/workspace/grow.bin")) and (
            await ws.fs.stat("/workspace/grow.bin")
        ).size >= 4 * CHUNK_SIZE

    await eventually(grown, within=30.0)  # seen through ws.fs while the program still writes
    seen = (await ws.fs.stat("/workspace/grow.bin")).size
    await eventually(
        lambda: _grew_past(ws, seen), within=30.0
    )  # and again later, while it goes on (within MAX_WAIT of a tick)
    await ws.fs.write_file("/workspace/stop", "")
    result = await handle.result()
    assert result.status == "completed"
    chunks = int(result.stdout)
    expected = b"".join(bytes([i % 251]) * 65536 for i in range(chunks))
    data = await ws.fs.read_file("/workspace/grow.bin")
    assert hashlib.sha256(data).hexdigest() == hashlib.sha256(expected).hexdigest()
    assert "/workspace/grow.bin" in result.pulled


async def _grew_past(ws: computer.Workspace, than: int) -> bool:
    return (await ws.fs.stat("/workspace/grow.bin")).size > than


async def test_a_killed_writer_keeps_all_it_wrote(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec(WRITER)

    async def grown() -> bool:
        return (await ws.fs.exists("/workspace/grow.bin")) and (
            await ws.fs.stat("/workspace/grow.bin")
        ).size >= 8 * CHUNK_SIZE

    await eventually(grown, within=30.0)
    await asyncio.sleep(0.5)  # long enough for deferred ticks (MAX_WAIT is 1 s)
    await handle.kill()
    result = await handle.result()
    assert result.status == "cancelled"
    # What the program wrote is whole: a run of 64 KiB blocks, each of its index's byte.
    data = await ws.fs.read_file("/workspace/grow.bin")
    assert len(data) >= 8 * CHUNK_SIZE
    blocks = -(-len(data) // 65536)
    assert data == b"".join(bytes([i % 251]) * 65536 for i in range(blocks))[: len(data)]
