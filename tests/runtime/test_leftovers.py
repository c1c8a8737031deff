"""A sandbox per call (``ShellBackend(live=False)``) ends with its command, and with it whatever the
command left running in the background: the run says which ones on its stderr (``_leftovers``)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend
from computer.runtime._leftovers import ENDED_NOTE

from ._live_support import eventually


def _host_processes_naming(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (our own sandboxes' processes, by a unique arg)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def backend() -> ShellBackend:
    made = ShellBackend(live=False)
    if not made.sandbox.bwrap:
        pytest.skip("the report needs bubblewrap's pid namespace")
    return made


async def test_a_server_left_in_the_background_is_named_as_ended_with_its_command(
    backend: ShellBackend, tmp_path: Path
) -> None:
    """An agent's steps, each its own exec: start a server in the background, then look for it."""
    seconds = f"{secrets.randbelow(10**6) + 10**6}"  # a unique `sleep` argument to look for on the host
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await (
            await ws.runtime.exec(
                "python3 -m http.server 8123 --bind 127.0.0.1 >server.log 2>&1 &\n"
                f"sleep {seconds} &\necho started; exit 3"
            )
        ).result()
        assert (started.exit_code, started.stdout) == (3, "started\n")
        note = started.stderr.splitlines()
        assert len(note) == 1 and note[0].startswith(f"{ENDED_NOTE} 2 processes running in the background")
        assert "python3 -m http.server 8123 --bind 127.0.0.1 (pid " in note[0]
        assert f"sleep {seconds} (pid " in note[0]
        assert "ShellBackend(live=False)" in note[0]
        # True: they are gone, on the host too, and the next command finds no server.
        assert _host_processes_naming(seconds) == []
        probe = await (
            await ws.runtime.exec(
                "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8123))'"
            )
        ).result()
        assert probe.exit_code == 1 and "ConnectionRefusedError" in probe.stderr
        assert await ws.fs.exists("/workspace/server.log")  # what it wrote is kept
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[backend]) as again:
        assert await again.fs.exists("/workspace/server.log")


async def test_a_command_that_leaves_nothing_running_says_nothing(backend: ShellBackend) -> None:
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        for command in ("echo out; echo err >&2", "sleep 0.01 & wait", "(sleep 0.01 &); sleep 0.2", "true"):
            result = await (await ws.runtime.exec(command)).result()
            assert result.exit_code == 0, (command, result)
            assert ENDED_NOTE not in result.stderr, (command, result.stderr)
        result = await (await ws.runtime.exec("echo out; echo err >&2")).result()
        assert (result.stdout, result.stderr) == ("out\n", "err\n")


async def test_exit_codes_signals_and_the_command_line_are_the_commands_own(backend: ShellBackend) -> None:
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        parent = await (await ws.runtime.exec("kill $PPID; kill -INT $PPID; sleep 0.1; echo alive")).result()
        assert (parent.exit_code, parent.stdout) == (0, "alive\n")  # as with the init for parent
        killed = await (await ws.runtime.exec("kill -SEGV $$")).result()
        # 128 + SIGSEGV, as before; the wrapper's own "Segmentation fault" message goes nowhere.
        assert (killed.exit_code, killed.stderr) == (139, "")
        subshell = await (await ws.runtime.exec("(while :; do sleep 1; done) & exit 0")).result()
        assert subshell.exit_code == 0
        assert "a subshell of the command (pid " in subshell.stderr
        assert "1 process running" in subshell.stderr or "2 processes running" in subshell.stderr
        many = await (await ws.runtime.exec("for i in $(seq 12); do sleep 1000 & done")).result()
        assert "12 processes running" in many.stderr and ", and 4 more" in many.stderr
        sleeper = "python3 -c 'import time; time.sleep(1000)'"
        long = await (await ws.runtime.exec(f"{sleeper} {'x' * 500} & sleep 0.2")).result()
        assert "python3 -c import time; time.sleep(1000) xxx" in long.stderr
        assert "x" * 200 not in long.stderr and "... (pid " in long.stderr


async def test_the_advice_of_the_backend_follows_the_note(backend: ShellBackend) -> None:
    advised = ShellBackend(live=False, warm_sandboxes=0)
    advised.background_advice = "keep it with `computer shell w`"
    async with computer.Workspace(backends=[advised]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec("sleep 1000 &")).result()
        assert result.stderr.startswith(ENDED_NOTE)
        if advised._could_live:
            assert result.stderr.endswith("; keep it with `computer shell w`\n")


async def test_a_live_sandbox_keeps_them_and_says_nothing() -> None:
    live = ShellBackend()
    if not live.live:
        pytest.skip("no live sandboxes here")
    async with computer.Workspace(backends=[live]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec("sleep 1000 & echo $! > pid")).result()
        assert ENDED_NOTE not in result.stderr

        async def only_the_sleep() -> bool:  # the run ends with its shell: the child forked for `&` may
            return [p.command for p in await ws.runtime.processes()] == ["sleep 1000"]  # not have exec-ed

        await eventually(only_the_sleep, within=30)
