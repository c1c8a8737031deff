"""A live sandbox's processes as a user sees them (issue 18): a listing of any size, a server's threads
against the process limit, background logs let go once their printers ended."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import secrets
import selectors

import pytest

import computer
from computer.runtime import ShellBackend, _live_init, _live_jobs, _live_parts, _live_ps
from computer.runtime._limits import SandboxLimits
from computer.runtime._protected import OWN

from ._live_support import eventually, host_pids_with, host_shows

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


def test_a_listing_fits_one_packet_cutting_command_lines_then_counting_what_it_leaves_out() -> None:
    rows = [
        {"pid": pid, "ppid": 1, "command": "x" * 300_000 if pid == 2 else "é" * 5_000, "started": 0.0}
        for pid in range(2, 2_002)
    ]
    kept, more = _live_ps.listing(rows)
    assert len(json.dumps(kept)) <= _live_ps.MAX_REPLY
    assert 0 < more < 2_000 and len(kept) + more == 2_000
    assert all(len(r["command"]) <= _live_ps.MIN_COMMAND for r in kept)
    assert kept[0]["command"].endswith("\u2026")
    few, none_left = _live_ps.listing([rows[0], {**rows[1], "command": "sleep 5"}])
    assert none_left == 0 and len(few[0]["command"]) == _live_ps.MAX_COMMAND  # cut to the cap only
    assert few[1]["command"] == "sleep 5"  # under the cap: whole
    assert [r["pid"] for r in few] == [2, 3]


async def test_listing_a_process_with_a_huge_command_line_keeps_the_sandbox_and_its_processes() -> None:
    """A background process with a 600 KB command line: the listing was one packet over the socket's
    send buffer, the init died on EMSGSIZE, and the sandbox ended with every background process."""
    marker = f"9{secrets.randbelow(10**6)}"
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        big = " ".join(["$A"] * 6)  # 6 arguments of 100 KB (one argument holds at most 128 KiB)
        started = await run(
            ws,
            f"A=$(head -c 100000 /dev/zero | tr '\\0' x); setsid bash -c 'sleep {marker}; true' {big} "
            "> /dev/null 2>&1 & echo started",
        )
        assert started.stdout == "started\n", started.stderr

        async def sleeping() -> bool:  # (the host shows the marker as soon as the script runs)
            return any(p.command == f"sleep {marker}" for p in await ws.runtime.processes())

        await eventually(sleeping, within=10)
        (bash,) = [p for p in await ws.runtime.processes() if p.command.startswith("bash -c sleep")]
        assert len(bash.command) == _live_ps.MAX_COMMAND and bash.command.endswith("\u2026")
        after = await run(ws, "echo after")
        assert (after.stdout, after.stderr) == ("after\n", "")  # the same sandbox: nothing said
        assert host_pids_with(f"sleep {marker}")
        assert any(p.command == f"sleep {marker}" for p in await ws.runtime.processes())
        await ws.runtime.end_sandbox()
        assert not host_pids_with(f"sleep {marker}")


# A server holding 37 tasks (36 threads and its own) of a limit of 42, then ``up``.
THREADED_SERVER = (
    "import threading, time\n"
    "for _ in range(36):\n"
    "    threading.Thread(target=time.sleep, args=(300,), daemon=True).start()\n"
    "open('up', 'w').close()\n"
    "time.sleep(300)\n"
)


async def test_a_server_whose_threads_near_the_process_limit_outlives_later_runs() -> None:
    """A background server holding 90 % of the process limit in threads (the pids group counts
    threads), nothing ever refused: a later ``echo`` ended the sandbox with the server, saying that
    "this command reached the sandbox's process limit"."""
    async with computer.Workspace(backends=[ShellBackend(max_processes=42)]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/srv.py", THREADED_SERVER)
        started = await run(ws, "setsid python3 srv.py > /dev/null 2>&1 & echo started")
        assert started.stdout == "started\n", started.stderr

        async def up() -> bool:
            return await ws.fs.exists("/workspace/up")

        await eventually(up, within=20)
        (pid,) = [p.pid for p in await ws.runtime.processes() if p.command == "python3 srv.py"]
        for _ in range(2):
            echoed = await run(ws, "echo hi")
            assert (echoed.stdout, echoed.stderr) == ("hi\n", "")
        assert [p.pid for p in await ws.runtime.processes() if p.command == "python3 srv.py"] == [pid]
        await ws.runtime.end_sandbox()


async def test_a_server_near_the_process_limit_outlives_the_run_that_waited_for_it() -> None:
    """The run that starts such a server and waits for it to be ready (``server & until ready``):
    it ended with 90 % of the limit held and more tasks than it found, which ended the sandbox with
    the server ("this command reached the sandbox's process limit"), though no fork was refused
    (``pids.events`` counts every refusal). On a loaded host the run of the test above ended that way
    too (the server's threads made before its end was seen: 2 of 4 runs under load)."""
    async with computer.Workspace(backends=[ShellBackend(max_processes=42)]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/srv.py", THREADED_SERVER)
        ready = "setsid python3 srv.py > /dev/null 2>&1 & while [ ! -e up ]; do sleep 0.01; done; echo ready"
        started = await run(ws, ready)
        assert (started.stdout, started.stderr) == ("ready\n", "")
        (pid,) = [p.pid for p in await ws.runtime.processes() if p.command == "python3 srv.py"]
        echoed = await run(ws, "echo hi")
        assert (echoed.stdout, echoed.stderr) == ("hi\n", "")
        assert [p.pid for p in await ws.runtime.processes() if p.command == "python3 srv.py"] == [pid]
        await ws.runtime.end_sandbox()


async def test_a_background_log_lets_its_bytes_go_once_its_printers_ended() -> None:
    """Each run left a printer of ~1 MB that ended: every log's last MiB stayed in the host process for
    the sandbox's life (40 such runs: +84 MiB). Once written and with its pipes closed, it is let go;
    the log stays in the workspace and a process still running keeps pointing at its log."""
    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        ids = []
        for _ in range(3):
            started = await run(ws, f"({_waiting('go')}; head -c 300000 /dev/zero | tr '\\0' y) &")
            ids.append(started.id)
        marker = f"8{secrets.randbelow(10**6)}"
        going = await run(ws, f"({_waiting('go')}; echo hello; exec sleep {marker}) &")
        await ws.fs.write_file("/workspace/go", b"")
        await host_shows(marker)
        sandbox = backend._lives._live[ws.fs.instance]

        async def let_go() -> bool:
            logs = sandbox.background
            done = all(i in logs and logs[i].written and not logs[i].data for i in ids)
            return done and going.id in logs and logs[going.id].written

        # A tick writes FLUSH_BYTES at most: a loaded host (the full suite at load 20) took over 20 s.
        await eventually(let_go, within=60)
        for i in ids:
            assert len(await ws.fs.read_file(f"/.computer/output/{i}.background.log")) == 300_000
        assert bytes(sandbox.background[going.id].data) == b"hello\n"  # its printer still holds the pipe
        (sleeper,) = [p for p in await ws.runtime.processes() if p.command == f"sleep {marker}"]
        assert sleeper.log == f"/.computer/output/{going.id}.background.log"
        await ws.runtime.end_sandbox()


async def test_signals_a_program_sends_every_python3_leave_the_sandbox_standing() -> None:
    """The init is a ``python3`` of the programs' own user: ``pkill python3`` ended it (the sandbox and
    every background process with it) and ``pkill -STOP python3`` hung every later run. As the pid
    namespace's first process, signals from inside the sandbox do not reach it."""
    marker = f"7{secrets.randbelow(10**6)}"
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(ws, f"setsid sleep {marker} > /dev/null 2>&1 & echo started")
        assert started.stdout == "started\n", started.stderr
        await host_shows(marker)
        for signal in ("-TERM", "-KILL", "-STOP", "-INT"):
            sent = await run(ws, f"pkill {signal} python3; kill {signal} 1; echo sent", timeout=30)
            assert (sent.status, sent.stdout, sent.error) == ("completed", "sent\n", None), sent.stderr
        after = await run(ws, "echo after", timeout=30)
        assert (after.stdout, after.stderr) == ("after\n", "")
        assert any(p.command == f"sleep {marker}" for p in await ws.runtime.processes())
        assert host_pids_with(f"sleep {marker}")
        await ws.runtime.end_sandbox()
        assert not host_pids_with(f"sleep {marker}")  # its end ends every process of the namespace


async def test_background_logs_are_written_again_after_their_directory_was_removed() -> None:
    """``rm -r /.computer/output`` while a background printer runs: the directory was made once per
    sandbox, so no background log of that sandbox was written again (neither the printer's nor a later
    run's; every tick's flush failed). A write that finds it gone makes it again.

    The printer prints once its run returned and goes on once the directory is gone (``started``,
    ``removed``: files of the workspace): printing for a fixed 5 s, a loaded machine's ticks could
    write its log whole and let it go before the ``rm``, and it never came back."""
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(
            ws,
            f"({_waiting('started')}; echo bg-1; {_waiting('removed')};"
            " for i in $(seq 2 100); do echo bg-$i; sleep 0.05; done) &",
        )
        log = f"/.computer/output/{started.id}.background.log"
        await ws.fs.write_file("/workspace/started", b"")
        await eventually(lambda: ws.fs.exists(log), within=10)
        await ws.fs.rm("/.computer/output", recursive=True)
        await ws.fs.write_file("/workspace/removed", b"")
        await eventually(lambda: ws.fs.exists(log))
        later = await run(ws, f"({_waiting('later')}; echo other) &")
        await ws.fs.write_file("/workspace/later", b"")
        await eventually(lambda: ws.fs.exists(f"/.computer/output/{later.id}.background.log"))
        assert (await ws.fs.read_text(f"/.computer/output/{later.id}.background.log")) == "other\n"
        await eventually(lambda: _contains(ws, log, "bg-100\n"))
        await ws.runtime.end_sandbox()


async def test_a_running_process_keeps_its_background_log_past_the_saved_output_retention() -> None:
    """The newest ``keep`` saved logs stay (50 by default): a server's background log counted among
    them and was removed after 50 runs whose output was saved, while ``processes()`` still named it.
    While a process that prints into it runs, it is neither removed nor counted; then it is as any."""
    marker = f"6{secrets.randbelow(10**6)}"
    saving = {"max_lines": 5, "keep": 2}
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(ws, f"({_waiting('go')}; echo listening; exec sleep {marker}) &")
        log = f"/.computer/output/{started.id}.background.log"
        await ws.fs.write_file("/workspace/go", b"")
        await eventually(lambda: ws.fs.exists(log))
        for _ in range(4):
            saved = await run(ws, "seq 20", output=saving)
            assert saved.truncated["stdout"].status == "saved", saved
        names = {e.name for e in await ws.fs.readdir("/.computer/output")}
        assert len(names) == 3 and f"{started.id}.background.log" in names, names
        assert await ws.fs.read_text(log) == "listening\n"
        (sleeper,) = [p for p in await ws.runtime.processes() if p.command == f"sleep {marker}"]
        assert sleeper.log == log
        await ws.runtime.kill_process(sleeper.pid)

        async def ended() -> bool:
            return not await ws.runtime.processes()

        await eventually(ended, within=10)
        await run(ws, "seq 20", output=saving)
        assert not await ws.fs.exists(log)  # the oldest once its process ended
        assert len(await ws.fs.readdir("/.computer/output")) == 2
        await ws.runtime.end_sandbox()


def _waiting(name: str) -> str:
    """Shell that waits (30 s at most) for the workspace's file ``name`` to reach the sandbox."""
    return f"for t in $(seq 600); do [ -e {name} ] && break; sleep 0.05; done"


async def _contains(ws: computer.Workspace, path: str, text: str) -> bool:
    return text in await ws.fs.read_text(path)


async def test_a_run_name_forged_in_an_environment_neither_hides_the_listing_nor_is_listed() -> None:
    """``COMPUTER_EXEC_ID`` is the process's own to set: one of 120 KB made every listing leave out
    every process from its pid up (the row alone was over a reply; the init cut command lines, never
    the run's name), and one holding terminal escapes and rich markup was listed as the run's name
    (``computer ps`` showed it raw). A name not of the exec id form is no run's: listed as none."""
    marker = f"5{secrets.randbelow(10**6)}"
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(
            ws,
            "A=$(head -c 120000 /dev/zero | tr '\\0' x); "
            f"COMPUTER_EXEC_ID=$A setsid sleep {marker}.1 > /dev/null 2>&1 & "
            f"COMPUTER_EXEC_ID=$'\\e]0;title\\a[bold]x' setsid sleep {marker}.2 > /dev/null 2>&1 & "
            f"setsid sleep {marker}.3 > /dev/null 2>&1 & echo started",
        )
        assert started.stdout == "started\n", started.stderr

        async def all_three() -> bool:
            commands = {p.command for p in await ws.runtime.processes()}
            return {f"sleep {marker}.{i}" for i in (1, 2, 3)} <= commands

        await eventually(all_three, within=10)
        runs = {p.command: p.exec_id for p in await ws.runtime.processes()}
        assert runs[f"sleep {marker}.1"] is None and runs[f"sleep {marker}.2"] is None
        assert runs[f"sleep {marker}.3"] == started.id
        await ws.runtime.end_sandbox()


_NOT_DUMPABLE = (
    "import ctypes, os, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "  # PR_SET_DUMPABLE
    "open('ready', 'w').close()\nwhile not os.path.exists('go'): time.sleep(0.01)\n"
    "print('late', flush=True); time.sleep(60)"
)


async def test_a_process_whose_environment_the_init_cannot_read_is_listed_with_its_run() -> None:
    """A background process that made itself not dumpable (as ``ssh-agent`` does: its ``/proc`` files
    root's, its environment unreadable by the init) is listed with the run whose session it is in,
    and its background log with it. Before, with no run: so was any process for the instant of an
    ``exec`` (``[bash]``), a run's shell inside the ``exec`` of its command included."""
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(
            ws, f'python3 -c "{_NOT_DUMPABLE}" & while [ ! -e ready ]; do sleep 0.01; done; echo started'
        )
        assert started.stdout == "started\n", started.stderr
        await ws.fs.write_file("/workspace/go", b"")  # it prints now: into the run's background log

        async def listed() -> bool:
            return any(
                p.exec_id == started.id and p.log is not None
                for p in await ws.runtime.processes()
                if "prctl" in p.command
            )

        await eventually(listed, within=10)  # (its log is named once a tick wrote it)
        await ws.runtime.end_sandbox()


_HOARDER = r"""
import os, stat, time
held, broken = {}, set()
while True:
    try:
        pids = open("/workspace/pids").read().split()
    except OSError:
        pids = []
    for pid in pids:  # each run's shell: its stdout is the run's
        try:
            ino = os.stat(f"/proc/{pid}/fd/1").st_ino
            if ino not in held:
                held[ino] = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            pass
    for ino, fd in held.items():
        try:
            os.write(fd, b"z\n")
        except BlockingIOError:
            pass
        except BrokenPipeError:  # the pipe's reader closed it
            broken.add(ino)
    for name, found in (("held", held), ("broken", broken)):
        open(f"/workspace/{name}.tmp", "w").write("".join(f"{ino}\n" for ino in found))
        os.rename(f"/workspace/{name}.tmp", f"/workspace/{name}")
    time.sleep(0.005)
"""


async def test_a_process_holding_every_runs_output_pipe_leaves_the_host_a_bounded_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A background process that opens ``/proc/<pid>/fd/1`` of every run keeps each run's pipe open
    after it returns: the host read each into a background log, one descriptor (and up to a MiB) a
    run, for as long as the sandbox lived (an hour), toward the descriptor limit of the process that
    serves every workspace. Past ``MAX_ADOPTED`` the oldest go to the init, which reads and drops
    what comes: the writer goes on (no SIGPIPE), and the runs' logs say their output is dropped."""
    monkeypatch.setattr(_live_jobs, "MAX_ADOPTED", 4, raising=False)
    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/hoard.py", _HOARDER.encode())
        first = await run(ws, "setsid python3 /workspace/hoard.py < /dev/null > /dev/null 2>&1 & echo ok")
        assert first.stdout == "ok\n", first.stderr
        runs, pipes = [], []
        for _ in range(10):
            done = await run(
                ws,
                "echo $$ >> pids; ino=$(stat -L -c %i /proc/$$/fd/1); "
                "until grep -qx $ino held 2>/dev/null; do sleep 0.01; done; echo; echo ino=$ino",
                timeout=20,
            )
            assert done.exit_code == 0, done
            runs.append(done.id)
            pipes += re.findall(r"ino=(\d+)", done.stdout)
        sandbox = backend._lives.get(ws.runtime.context.workspace_id)
        assert sandbox is not None
        assert len(sandbox._adopted) <= 4 and len(pipes) == 10
        log = f"/.computer/output/{runs[0]}.background.log"
        await eventually(lambda: _contains(ws, log, "dropped]"), within=10)
        assert any(p.command == "python3 /workspace/hoard.py" for p in await ws.runtime.processes())
        assert not set(pipes) & set((await ws.fs.read_text("/workspace/broken")).split())  # none closed
        after = await run(ws, "echo after")
        assert after.stdout == "after\n"
        await ws.runtime.end_sandbox()


async def test_a_background_log_that_cannot_be_written_leaves_the_others_written() -> None:
    """A directory made at one run's background log path (a careless caller, or a python program's
    ``workspace.mkdir``): every flush stopped at that log, so no later run's log of the sandbox was
    written again. The others are written all the same; that one once its path is free again."""
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.mkdir("/.computer/output", recursive=True)
        first = await run(ws, f"({_waiting('go')}; echo first) &")
        blocked = f"/.computer/output/{first.id}.background.log"
        await ws.fs.mkdir(blocked)
        later = await run(ws, f"({_waiting('go')}; echo later) &")
        log = f"/.computer/output/{later.id}.background.log"
        await ws.fs.write_file("/workspace/go", b"")
        await eventually(lambda: ws.fs.exists(log))
        await eventually(lambda: _contains(ws, log, "later\n"))
        await ws.fs.rm(blocked, recursive=True)
        await eventually(lambda: ws.fs.exists(blocked))
        assert await ws.fs.read_text(blocked) == "first\n"
        await ws.runtime.end_sandbox()


async def test_processes_past_one_reply_are_listed_from_the_next_pages() -> None:
    """A listing was one reply of the init's: 100 processes named with 300 emoji each (12 bytes of
    JSON apiece, 3 KB a row once cut) left 72 out, a server started after them among those never
    listed (nor its log held). The host asks for the next page from the last pid it got."""
    marker = f"4{secrets.randbelow(10**6)}"
    shell = ShellBackend()  # 101 processes: past the 96 the default descriptor budget leaves (``_fd_budget``)
    shell.sandbox.limits = SandboxLimits(max_processes=256, max_open_files=None)
    async with computer.Workspace(backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await run(
            ws,
            "E=$(printf '\\U1F600%.0s' $(seq 300)); "
            'for i in $(seq 100); do (exec -a "$E" sleep 1000 > /dev/null 2>&1 &); done; '
            f"setsid sleep {marker} > /dev/null 2>&1 & echo ok",
        )
        assert started.stdout == "ok\n", started.stderr

        async def listed() -> bool:
            return any(p.command == f"sleep {marker}" for p in await ws.runtime.processes())

        await eventually(listed, within=10)
        found = await ws.runtime.processes()
        assert len(found) == 101 and len({p.pid for p in found}) == 101
        await ws.runtime.end_sandbox()


async def test_a_tick_writes_a_bounded_share_of_the_background_logs_the_oldest_written_first() -> None:
    """Each write of a background log is the whole log (up to a MiB): with 32 printers left running,
    every tick (10 a second) wrote 32 MiB into the store, a quarter of the host's loop. A tick writes
    up to ``FLUSH_BYTES`` (at least one log), the least recently written first; the end writes all."""
    written: list[str] = []

    class Context:
        async def fs_call(self, op: str, args: dict[str, object]) -> object:
            assert op.startswith(OWN), op  # the runtime's own calls (a program's may not write there)
            op = op[len(OWN) :]
            if op == "readlink":  # the logs' directory is a directory (``make_output_dir``)
                raise OSError(errno.EINVAL, "not a symbolic link")
            if op == "write_file":
                written.append(str(args["path"]))
            return {"is_directory": True}

    jobs = _live_jobs.LiveJobs()
    jobs.ctx = Context()  # type: ignore[assignment]
    jobs.background = {}
    for i in range(8):
        logged = jobs.background[f"exec-{i}"] = _live_parts.BackgroundLog()
        logged.append(b"x" * _live_parts.BACKGROUND_LOG_BYTES)
        logged.open = 1
    rounds = []
    for _ in range(4):
        await jobs.flush_logs()
        rounds.append([path.split("/")[-1].split(".")[0] for path in written])
        written.clear()
    assert rounds == [[f"exec-{i}", f"exec-{i + 1}"] for i in range(0, 8, 2)]
    for run in ("exec-5", "exec-1"):
        jobs.background[run].append(b"more")
    jobs.background["exec-0"].append(b"more")
    await jobs.flush_logs()
    assert [path.split("/")[-1].split(".")[0] for path in written] == ["exec-0", "exec-1"]
    written.clear()
    await jobs.flush_logs(limit=None)
    assert [path.split("/")[-1].split(".")[0] for path in written] == ["exec-5"]


def test_the_background_logs_of_a_sandbox_are_read_at_one_rate_together() -> None:
    """Each log had a rate of its own (a MiB at once, then 4 MiB/s): 32 printers left running were
    read at 128 MiB/s, a quarter of a host core for as long as they ran. The sandbox's logs share one."""
    jobs = _live_jobs.LiveJobs()
    jobs.background, jobs._adopted = {}, {}
    jobs.loop = asyncio.new_event_loop()
    try:
        pipes = [os.pipe() for _ in range(2)]
        for n, (r, _) in enumerate(pipes):
            jobs._adopt(f"exec-{n}", {r: "stdout"})
        first, second = (jobs.background[f"exec-{n}"] for n in range(2))
        assert first.pause_after(_live_parts.BACKGROUND_LOG_BYTES) == 0.0  # a log's worth at once
        assert second.pause_after(_live_parts.BACKGROUND_LOG_BYTES) > 0.1  # then the rate, for both
    finally:
        for r, w in pipes:
            jobs.loop.remove_reader(r)
            os.close(r)
            os.close(w)
        jobs.loop.close()


def test_the_init_holds_a_bounded_number_of_the_pipes_the_host_let_go() -> None:
    """The host hands the init the background pipes it lets go, and the init read every one until its
    writers went: a process holding every run's output pipe ran the init out of descriptors, after
    which no run could be given its three streams. Past ``MAX_DROPPED`` the oldest are closed."""
    selector = selectors.DefaultSelector()
    pipes = [os.pipe() for _ in range(3)]
    try:
        _live_init.take_dropped(selector, [os.dup(r) for r, _ in pipes[:2]], limit=2)
        _live_init.take_dropped(selector, [os.dup(pipes[2][0])], limit=2)
        assert len(_live_init.DROPPED) == 2 and len(selector.get_map()) == 2
        with pytest.raises(BrokenPipeError):  # the oldest: its writer is told no one reads it
            os.close(pipes[0][0])
            os.write(pipes[0][1], b"x")
        os.write(pipes[2][1], b"x")
        (newest,) = [fd for fd in _live_init.DROPPED if os.fstat(fd).st_ino == os.fstat(pipes[2][0]).st_ino]
        _live_init.drop(selector, newest)  # what comes is read and dropped
        os.close(pipes[2][1])
        _live_init.drop(selector, newest)  # its writer went: closed
        assert len(_live_init.DROPPED) == 1
    finally:
        for fd in list(_live_init.DROPPED):
            _live_init.close_dropped(selector, fd)
        for r, w in pipes:
            for fd in (r, w):
                with contextlib.suppress(OSError):
                    os.close(fd)
        selector.close()


async def test_forks_a_run_is_refused_are_counted_by_the_pids_group() -> None:
    """The sandbox's ``pids`` cgroup refuses a fork before the process rlimit does, so the refusal is
    counted (``pids.events``), and a fork bomb left in the background is ended by that count. At the
    same number the rlimit refused first and counted nowhere: the bomb was caught only by the task
    count at the run's end, which a loaded host read below the threshold (a bomb of 218 processes ran
    on after the full suite's fork-bomb test)."""
    forks = (
        "import os, time\nkids = []\ntry:\n    while len(kids) < 200:\n        pid = os.fork()\n"
        "        if pid == 0:\n            time.sleep(3)\n            os._exit(0)\n        kids.append(pid)\n"
        "except OSError as exc:\n    print('refused', exc.errno)\nfor pid in kids:\n    os.kill(pid, 9)\n"
        "    os.waitpid(pid, 0)\n"
    )
    shell = ShellBackend(max_processes=24)
    async with computer.Workspace(backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/forks.py", forks)
        result = await run(ws, "python3 forks.py")
        assert result.stdout.startswith("refused"), result
        (sandbox,) = shell._lives._live.values()
        if not sandbox.alive or sandbox.tasks() is None:
            pytest.skip("no pids cgroup here")
        assert sandbox.forks_refused() > 0
