"""The shell started ahead in a live sandbox (``computer.runtime._live_shell``): the next run's ``bash``
waits for its command, so a run skips the spawn and bash's start. A run it serves must behave as one
``bash -c source`` spawned for it: every check here runs the same script through a backend without it
(``warm_sandboxes=0``) and compares."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend, _live, _live_shell

from ._live_support import eventually

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


@pytest.fixture
async def pair() -> AsyncIterator[tuple[computer.Workspace, computer.Workspace]]:
    """A workspace whose runs take the shell started ahead, and one whose runs spawn their own."""
    async with (
        computer.Workspace(backends=[ShellBackend()]) as ahead,
        computer.Workspace(backends=[ShellBackend(warm_sandboxes=0)]) as spawned,
    ):
        for ws in (ahead, spawned):
            await ws.fs.mkdir("/workspace/sub", recursive=True)
            assert (await run(ws, "true")).status == "completed"
        yield ahead, spawned


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the runs a shell started ahead served."""
    served: list[str] = []
    hand = _live_shell.AheadShell.hand

    def counting(self: _live_shell.AheadShell, source: str, exec_id: str, *args: object) -> object:
        job = hand(self, source, exec_id, *args)  # type: ignore[arg-type]
        served.append(exec_id)
        return job

    monkeypatch.setattr(_live_shell.AheadShell, "hand", counting)
    return served


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


# Scripts whose output must not depend on how the shell started (ids and times are checked apart).
SCRIPTS = [
    'echo "$0" "$-" "$LINENO" "$?" "$#" "[$*]"',
    "declare -p OLDPWD PWD; pwd; echo $SHLVL",
    'echo "[${__computer_run-unset}]"; set | grep -c __computer_run; env | grep -c __computer',
    "echo $SECONDS",
    "env | grep -c '^COMPUTER_EXEC_ID='; export -p | grep -c COMPUTER_EXEC_ID",
    "trap 'echo bye' EXIT; echo hi; exit 3",
    "echo $((1/0)); echo after",
    "x=${y:?unset}; echo never",
    "nosuchcommand; echo $?",
    "cat; echo end",
    "read -r a || echo eof; echo [$a]",
    "shopt -q login_shell; echo $?; [[ $- == *i* ]] && echo interactive || echo not",
    "f() { return 4; }; f; echo $?; (exit 5); echo $?",
    "cd /tmp && pwd && cd - && echo $OLDPWD",
    "ls -l /proc/self/fd | tail -n +2 | awk '{print $9}' | sort -n | tr '\\n' ' '",
    "umask; ulimit -n; id -u",
    "echo line1\necho $LINENO\nfalse\necho $?",
    "",
    "# only a comment",
    "cat <<'EOF'\nheredoc $HOME\nEOF",
    "set -e; false; echo never",
    "set -u; echo $undefined_variable; echo never",
    "return 3; echo after return",
    'echo "[${BASH_SOURCE[0]-unset}]" "[${FUNCNAME[0]-unset}]" "[$BASH_SUBSHELL]"; caller; echo $?',
    "shopt -s expand_aliases; alias say=echo; say same line\nsay next line",
    "echo $BASH_COMMAND; f() { echo ${FUNCNAME[*]} ${BASH_LINENO[*]}; }; f",
    "exec echo replaced; echo never",
    "kill -TERM $$; echo never",
    "trap 'echo got USR1' USR1; kill -USR1 $$; echo after",
    "(echo sub $BASH_SUBSHELL); { echo group; }; echo $(echo cmdsub)",
    "printf '%s\\n' \"$@\" | wc -l; set -- a b; echo $# $1",
]


# A first line that makes a script longer than a command the pipe carries: it comes through a file.
PADDING = "# " + "p" * _live_shell.MAX_SOURCE + "\n"


@pytest.mark.parametrize("padded", [False, True], ids=["by the pipe", "through a file"])
@pytest.mark.parametrize("script", SCRIPTS)
async def test_a_run_by_the_shell_started_ahead_is_a_run_of_bash_c(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str], script: str, padded: bool
) -> None:
    ahead, spawned = pair
    script = PADDING + script if padded else script
    await asyncio.sleep(1.1)  # ``$SECONDS`` counts from the run's start, not the shell's
    got = await run(ahead, script)
    want = await run(spawned, script)
    assert got.id in handed, "the run did not take the shell started ahead"
    assert (got.status, got.exit_code, got.stdout, got.stderr) == (
        want.status,
        want.exit_code,
        want.stdout,
        want.stderr,
    )


async def test_the_run_gets_its_id_stdin_and_command_line(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str]
) -> None:
    ahead, _ = pair
    await asyncio.sleep(0.05)
    handle = await ahead.runtime.exec('echo "$COMPUTER_EXEC_ID"; sh -c \'echo "$COMPUTER_EXEC_ID"\'; cat')
    result = await handle.result()
    assert handle.id in handed
    assert result.stdout == f"{handle.id}\n{handle.id}\n", result
    result = await run(ahead, "cat; echo", stdin="given\n")
    assert (result.id in handed, result.stdout) == (True, "given\n\n")
    # The processes API shows the run's command line (the shell's own is its wait) and its id.
    await asyncio.sleep(0.05)
    handle = await ahead.runtime.exec("(sleep 31; true) & sleep 30 # a marker")
    try:

        async def listed() -> bool:
            return any(
                p.command == "/bin/bash -c (sleep 31; true) & sleep 30 # a marker" and p.exec_id == handle.id
                for p in await ahead.runtime.processes()
            )

        await eventually(listed)
        assert handle.id in handed

        async def all_started() -> bool:  # its subshell shows the run's command line too
            rows = await ahead.runtime.processes()
            commands = [p.command for p in rows if p.exec_id == handle.id]
            return {"sleep 30", "sleep 31"} <= set(commands) and len(commands) == 4

        await eventually(all_started)
        rows = await ahead.runtime.processes()
        assert not any("__computer_run" in p.command for p in rows), [
            (p.pid, p.ppid, p.command, p.exec_id) for p in rows
        ]
    finally:
        await handle.kill()


async def test_a_run_that_does_not_fit_starts_its_own_shell(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str]
) -> None:
    """Another directory, another environment or a long source: the shell waiting is ended and the run
    spawns its own; the next run like it takes the one started after it."""
    ahead, _ = pair
    for kwargs in ({"cwd": "/workspace/sub"}, {"env": {"A": "1"}}):
        first = await run(ahead, "pwd; echo ${A-none}", **kwargs)
        second = await run(ahead, "pwd; echo ${A-none}", **kwargs)
        assert first.stdout == second.stdout and first.status == "completed"
        assert first.id not in handed and second.id in handed, kwargs
    await run(ahead, "true")  # the next shell waits with this environment again
    await asyncio.sleep(0.05)
    long = "x=" + "y" * (_live_shell.MAX_SOURCE + 10) + "; echo ${#x}"  # through a file: taken
    result = await run(ahead, long)
    assert (result.stdout, result.id in handed) == (f"{_live_shell.MAX_SOURCE + 10}\n", True)
    sandbox = ahead.runtime._backends["shell"]._lives.get(ahead.fs.instance)  # type: ignore[attr-defined]
    assert not list(sandbox.bridge_dir.glob("source-*")), "the file of the command stayed"
    huge = "x=" + "y" * 70_000 + "; echo ${#x}"  # past one argument's limit: sourced from a script
    result = await run(ahead, huge)
    assert (result.stdout, result.id in handed) == ("70000\n", False)
    assert (await run(ahead, "env | grep -c '^A='", env={"A": "1"})).stdout == "1\n"
    assert (await run(ahead, "env | grep -c '^A='")).stdout == "0\n"  # not the last run's environment


async def test_a_directory_made_again_is_not_the_shells_old_one(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str]
) -> None:
    """The shell waits in a directory: once the workspace removed or renamed it and made it again, a
    run there must not start in the old one (its writes would go nowhere, or to the other name)."""
    ahead, _ = pair
    assert (await run(ahead, "pwd", cwd="/workspace/sub")).status == "completed"
    await ahead.fs.rm("/workspace/sub", recursive=True)
    await ahead.fs.mkdir("/workspace/sub")
    result = await run(ahead, "echo made > here.txt; ls", cwd="/workspace/sub")
    assert (result.status, result.stdout) == ("completed", "here.txt\n"), result
    assert await ahead.fs.read_text("/workspace/sub/here.txt") == "made\n"
    # (The mirror may have kept the directory: it ends as it was. A rename moves it for sure.)
    await asyncio.sleep(0.1)  # the next shell waits in ``sub`` by now
    await ahead.fs.rename("/workspace/sub", "/workspace/moved")
    await ahead.fs.mkdir("/workspace/sub")
    result = await run(ahead, "echo again > here.txt", cwd="/workspace/sub")
    assert result.status == "completed" and result.id not in handed
    assert await ahead.fs.read_text("/workspace/sub/here.txt") == "again\n"


async def test_a_shell_killed_while_it_waited_is_not_taken(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str]
) -> None:
    """A background process of the sandbox may kill the shell waiting for the next run (same user):
    that run starts its own and runs as usual."""
    ahead, _ = pair
    # Not a subshell of the run: the run's own shell (one started ahead) has the pattern in its
    # command line, and so would the subshell. Tried until it kills one (bounded: 30 s): a host slow
    # to start the next shell (over the 0.3 s) had it kill nothing, and the next run took that shell.
    killer = (
        'sleep 0.3; p=__computer; for i in $(seq 3000); do pkill -f "${p}_run" && break; sleep 0.01; done;'
        " echo killed > k.txt"
    )
    started = await run(ahead, f"setsid sh -c '{killer}' > /dev/null 2>&1 &")
    assert started.status == "completed"

    async def killed() -> bool:
        return await ahead.fs.exists("/workspace/k.txt")

    await eventually(killed)
    await asyncio.sleep(0.1)
    result = await run(ahead, "echo fine")
    assert (result.status, result.stdout, result.id in handed) == ("completed", "fine\n", False)
    assert (await run(ahead, "echo next")).id in handed


async def test_an_idle_sandbox_with_a_shell_waiting_ends() -> None:
    """The shell waiting is no process of the user's: the sandbox still ends after its idle time."""
    backend = ShellBackend(live_idle=0.3)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await run(ws, "true")).status == "completed"
        assert (await run(ws, "true")).status == "completed"
        assert await ws.runtime.processes() == []

        async def ended() -> bool:
            return backend.live_sandboxes() == 0

        await eventually(ended, within=10)


async def test_a_syntax_error_differs_only_in_the_word_naming_the_source(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str]
) -> None:
    """The documented difference: ``eval`` names itself where ``bash -c`` says ``-c``; the status, the
    line and the commands run before it are the same."""
    ahead, spawned = pair
    await asyncio.sleep(0.05)
    got = await run(ahead, "echo before\nif")
    want = await run(spawned, "echo before\nif")
    assert got.id in handed
    assert (got.exit_code, got.stdout) == (want.exit_code, want.stdout) == (2, "before\n")
    assert want.stderr == "/bin/bash: -c: line 3: syntax error: unexpected end of file\n", want.stderr
    assert got.stderr == want.stderr.replace("-c:", "eval:"), got.stderr


async def test_a_shell_waiting_does_not_pause_a_sync_but_any_other_process_does() -> None:
    """A sync pauses the sandbox while any process but its init could change the mirror under it.
    The shell waiting for the next run cannot (it reads its pipe): every run after a workspace write
    paused the sandbox for it. Any other process still makes the sync pause, and so does the shell
    once a run took it. With the shell waiting alone, the pids group's count has room for it alone:
    the look does not read the group's process list (``cgroup.procs``, ~0.1 ms of a live call)."""
    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await run(ws, "true")).status == "completed"
        sandbox = backend._lives.get(ws.fs.instance)
        assert sandbox is not None

        async def shell_known() -> bool:
            return any(j.waiting and j.host_pid is not None for j in sandbox.jobs.values())

        await eventually(shell_known)
        read: list[bool] = []
        procs = sandbox._procs
        sandbox._procs = lambda: read.append(True) or procs()  # type: ignore[method-assign]
        assert not sandbox.stirring()
        assert read == [], "the process list was read with only the waiting shell there"
        paused: list[bool] = []
        freeze = _live.freeze
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_live, "freeze", lambda group: paused.append(True) or freeze(group))
            for i in range(3):
                await ws.fs.write_file("/workspace/a.txt", f"{i}\n")
                assert (await run(ws, "cat a.txt")).stdout == f"{i}\n"
                await eventually(shell_known)
            assert paused == []
            started = await run(ws, "setsid sleep 1001.25 > /dev/null 2>&1 &")
            assert started.status == "completed"
            await eventually(shell_known)

            async def stirs() -> bool:  # the sleep's exec may still be on its way
                return sandbox.stirring()

            await eventually(stirs)
            await ws.fs.write_file("/workspace/a.txt", "with a process\n")
            assert (await run(ws, "cat a.txt")).stdout == "with a process\n"
            assert paused, "a sync with another process in the sandbox did not pause it"


async def test_a_background_subshell_of_its_run_is_listed_as_that_runs(
    pair: tuple[computer.Workspace, computer.Workspace], handed: list[str]
) -> None:
    """A subshell the run left in the background is a fork of the shell started ahead: it has that
    shell's command line and name in its environment. After the run it is listed with the run's id
    and command line, as a subshell of a spawned ``bash -c`` is."""
    ahead, _ = pair
    await asyncio.sleep(0.05)
    source = "(while true; do sleep 0.2; done) > /dev/null 2>&1 & echo started"
    result = await run(ahead, source)
    assert (result.stdout, result.id in handed) == ("started\n", True)

    async def listed() -> bool:
        return any(
            p.exec_id == result.id and p.command == f"/bin/bash -c {source}"
            for p in await ahead.runtime.processes()
        )

    await eventually(listed)
    assert not any(
        "__computer_run" in p.command or (p.exec_id or "").startswith("ahead-")
        for p in await ahead.runtime.processes()
    )


@pytest.mark.parametrize("padded", [False, True], ids=["by the pipe", "through a file"])
async def test_a_run_by_the_shell_started_ahead_syncs_with_a_racing_write_and_after_a_reopen(
    tmp_path: Path, handed: list[str], padded: bool
) -> None:
    """The taken shell is the run's process like a spawned one: a workspace write while it runs
    reaches it (the sync pauses the sandbox for it), what it writes reaches the workspace, and after
    the workspace is closed and opened again the first run spawns and the next takes a shell again;
    commands past the pipe's limit (padded) alike, through their file."""
    db = str(tmp_path / "ws.sqlite")
    pad = PADDING if padded else ""
    async with computer.Workspace(db, backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await run(ws, "true")).status == "completed"
        await asyncio.sleep(0.05)
        handle = await ws.runtime.exec(
            pad + "for i in $(seq 250); do [ -f from_ws ] && break; sleep 0.02; done; cat from_ws; "
            "echo prog > from_prog"
        )
        await asyncio.sleep(0.1)
        await ws.fs.write_file("/workspace/from_ws", "ws\n")
        result = await handle.result()
        assert (result.status, result.stdout, handle.id in handed) == ("completed", "ws\n", True)
        assert await ws.fs.read_text("/workspace/from_prog") == "prog\n"
    async with computer.Workspace(db, backends=[ShellBackend()]) as ws:
        first = await run(ws, pad + "cat from_ws from_prog")
        assert (first.stdout, first.id in handed) == ("ws\nprog\n", False)
        await asyncio.sleep(0.05)
        second = await run(ws, pad + "echo again >> from_prog; cat from_prog")
        assert (second.stdout, second.id in handed) == ("prog\nagain\n", True)
        assert await ws.fs.read_text("/workspace/from_prog") == "prog\nagain\n"


@pytest.mark.parametrize("fails", ["the pipe", "the file"])
async def test_a_long_commands_file_goes_when_the_shell_cannot_take_it(
    pair: tuple[computer.Workspace, computer.Workspace], monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """A command past the pipe's limit is written to a file of the bridge directory before the shell
    gets its path: when the pipe (the shell died meanwhile) or that file's write fails, the run spawns
    its own shell, and the file goes at once (it stayed in the bridge directory until the sandbox
    ended: the run's end removes only the file of a shell it took)."""
    ahead, _ = pair
    hand = _live_shell.AheadShell.hand
    failed: list[str] = []

    def failing(self: _live_shell.AheadShell, *args: object) -> object:
        if fails == "the pipe":  # its reader gone: the write raises BrokenPipeError
            reader, writer = os.pipe()
            os.close(reader)
            os.close(self.script)
            self.script = writer
            return hand(self, *args)  # type: ignore[arg-type]
        real_write = os.write

        def short(fd: int, data: bytes) -> int:  # the file's write takes part of it (a full disk)
            if fd != self.script:
                return real_write(fd, data[: len(data) // 2])
            return real_write(fd, data)

        monkeypatch.setattr(_live_shell.os, "write", short)
        try:
            return hand(self, *args)  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr(_live_shell.os, "write", real_write)

    def counting(self: _live_shell.AheadShell, *args: object) -> object:
        try:
            return failing(self, *args)
        except OSError as exc:
            failed.append(repr(exc))
            raise

    monkeypatch.setattr(_live_shell.AheadShell, "hand", counting)
    await asyncio.sleep(0.05)  # the next shell waits by now
    long = "x=" + "y" * (_live_shell.MAX_SOURCE + 10) + "; echo ${#x}"
    result = await run(ahead, long)
    # (A short write of the file ran the command cut short: nothing printed, the run "completed".)
    assert (result.status, result.stdout) == ("completed", f"{_live_shell.MAX_SOURCE + 10}\n")
    assert failed, "the run did not try the shell started ahead"
    sandbox = ahead.runtime._backends["shell"]._lives.get(ahead.fs.instance)  # type: ignore[attr-defined]
    assert sandbox is not None and sandbox.alive
    assert not list(sandbox.bridge_dir.glob("source-*")), "the file of the command stayed"
