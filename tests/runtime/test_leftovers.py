"""A sandbox per call (``ShellBackend(live=False)``) ends with its command, and with it whatever the
command left running in the background: the run says which ones on its stderr (``_leftovers``)."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._leftovers import ENDED_NOTE, guest_report

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


@pytest.fixture(scope="module")
def python_backend() -> PythonBackend:
    made = PythonBackend(live=False, warm_guests=0)
    if not made.sandbox.bwrap:
        pytest.skip("the report needs bubblewrap's pid namespace")
    return made


async def test_a_python_run_per_call_names_the_popen_children_that_end_with_it(
    python_backend: PythonBackend, tmp_path: Path
) -> None:
    """A python run of a sandbox of its own ended its ``subprocess.Popen`` children in silence: an
    agent's next run found no server and no word why. Each step its own exec, as an agent makes them."""
    seconds = f"{secrets.randbelow(10**6) + 10**6}"
    python_backend.background_advice = "keep it with `computer shell w`"
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[python_backend]) as ws:
        await ws.fs.mkdir("/workspace")
        started = await (
            await ws.runtime.exec(
                "import subprocess, sys\n"
                f"subprocess.Popen(['sleep', '{seconds}'])\n"
                "subprocess.Popen(['python3', '-c', 'import time; time.sleep(1000)'])\n"
                "print('started'); sys.exit(3)\n"
            )
        ).result()
        assert (started.exit_code, started.stdout) == (3, "started\n")
        note = started.stderr.splitlines()
        assert len(note) == 1, started.stderr
        assert note[0].startswith(f"{ENDED_NOTE} 2 processes running in the background, ended with it")
        assert (
            f"sleep {seconds} (pid " in note[0]
            and "python3 -c import time; time.sleep(1000) (pid " in note[0]
        )
        assert "PythonBackend(live=False)" in note[0] or "cgroup v1 freezer" in note[0]
        assert _host_processes_naming(seconds) == []  # true: they are gone
        quiet = [
            "print('x')",  # nothing started
            "import subprocess\nsubprocess.run(['true'])",  # waited for
            "import multiprocessing as m\nif __name__ == '__main__':\n    with m.get_context('spawn').Pool(1) as p:\n        print(p.map(abs, [-1]))",
            "import os\nif os.fork() == 0:\n    print('child')\nelse:\n    os.wait()",  # a fork that ends first
        ]
        for source in quiet:
            result = await (await ws.runtime.exec(source)).result()
            assert result.exit_code == 0 and ENDED_NOTE not in result.stderr, (source, result)
        # a fork still running at the end is named; the forked child itself says nothing
        forked = await (
            await ws.runtime.exec("import os, time\nif os.fork() == 0:\n    time.sleep(1000)")
        ).result()
        assert forked.stderr.count(ENDED_NOTE) == 1, forked.stderr
        assert "1 process running in the background" in forked.stderr
        assert "a process the program forked (pid " in forked.stderr
    assert guest_report(SimpleNamespace(live=True, sandbox=python_backend.sandbox)) is None  # live: kept


def test_a_job_caught_inside_execve_is_still_named(tmp_path: Path) -> None:
    """The shell's scan skipped a process whose cmdline read empty, which is what a job forked a
    moment before the command ended reads while it is inside ``execve`` (its new arguments are not set
    up yet; a scan right after a fork caught a child there in 1 run of 2): `python3 -m http.server &
    echo started` went unsaid once in CI. Deterministic: the scan reads a ``/proc`` of our making (a
    tmpfs in a mount namespace of its own) where pid 5, a ``sleep``, has an empty cmdline."""
    import shutil
    import subprocess

    from computer.runtime._leftovers import epilogue

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare as root")
    made = (
        "mount -t tmpfs none /proc && mkdir /proc/5 && : > /proc/5/cmdline"
        " && echo '5 (sleep) S 1 5 5 0 -1' > /proc/5/stat\nexec 3>&1\n"
    )
    script = made + epilogue(["bash", "-c", "the command"], why="a test")
    said = subprocess.run(
        ["unshare", "--mount", "--fork", "bash", "-c", script], capture_output=True, text=True, timeout=30
    )
    assert (
        said.stdout
        == f"{ENDED_NOTE} 1 process running in the background, ended with it (a test): [sleep] (pid 5)\n"
    ), said


def test_a_python_run_s_scan_names_a_process_without_a_cmdline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The python guest's scan skipped them too: a child caught inside ``execve`` (its cmdline read
    empty) is named by its ``[comm]``. Deterministic: this child's cmdline is made to read empty."""
    import subprocess

    from computer.runtime import _pyguest_leftovers as guest

    child = subprocess.Popen(["sleep", "30"])
    try:
        real_open = open

        def reads_empty(path: str, *args: object, **kwargs: object) -> object:
            if path == f"/proc/{child.pid}/cmdline":
                import io

                return io.BytesIO(b"")
            return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(guest, "open", reads_empty, raising=False)
        _, found, unsure = guest._scan(os.getpid())
        assert f"[sleep] (pid {child.pid})" in found and unsure
    finally:
        child.kill()
        child.wait()


# A /proc of our making, in a mount namespace of its own: pid 5 is a `sleep` whose cmdline reads as
# {first} writes it, then its program's from the scan's look after its wait number {ready} on (``sleep``
# a function there: the scan's waits are counted, in /proc/slept, and take no time).
_FAKE_PROC = r"""mount -t tmpfs none /proc && mkdir /proc/5 && echo '5 (sleep) S 1 5 5 0 -1' > /proc/5/stat
{first} > /proc/5/cmdline
exec 3>&1
slept=0
sleep() {{
  ((++slept != {ready})) || printf '%s\0' sleep 1000 > /proc/5/cmdline
  echo "$slept" > /proc/slept
}}
"""


@pytest.mark.parametrize(
    ("first", "shown"),
    [(":", "[sleep]"), ("printf '%s\\0' bash -c 'the command'", "a subshell of the command")],
)
def test_a_job_still_about_to_exec_after_the_first_look_is_looked_at_until_it_has(
    first: str, shown: str
) -> None:
    """One look more, 50 ms after the first, named a server started just before the command ended "a
    subshell of the command" (forked, not exec-ed yet) or "[python3]" (inside ``execve``) in 4 runs of
    100 under load. The scan looks again while a process reads so, :data:`LOOKS` times at most, then
    names it as it reads. Deterministic: the job's cmdline is set at the scan's second wait, or never."""
    import shutil
    import subprocess

    from computer.runtime._leftovers import LOOKS, epilogue

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare as root")
    said_as = f"{ENDED_NOTE} 1 process running in the background, ended with it (a test): {{}} (pid 5)\n"
    for ready, name, looks in ((2, "sleep 1000", 2), (LOOKS + 1, shown, LOOKS)):
        made = _FAKE_PROC.format(first=first, ready=ready)
        script = made + epilogue(["bash", "-c", "the command"], why="a test") + "cat /proc/slept >&2\n"
        said = subprocess.run(
            ["unshare", "--mount", "--fork", "bash", "-c", script], capture_output=True, text=True, timeout=30
        )
        assert (said.stdout, said.stderr) == (said_as.format(name), f"{looks}\n"), said


_GUEST_LOOKS = """
import builtins, io, subprocess, sys, time
from computer.runtime import _pyguest_leftovers as guest

child = subprocess.Popen(["sleep", "30"])
slept, real_open = [], builtins.open
for _ in range(3000):  # its exec done (this test makes its own cmdline read empty)
    with real_open(f"/proc/{child.pid}/cmdline", "rb") as f:
        if f.read():
            break
    time.sleep(0.01)

def opened(path, *args, **kwargs):  # the child's cmdline reads empty until the scan's 2nd wait
    if path == f"/proc/{child.pid}/cmdline" and len(slept) < int(sys.argv[1]):
        return io.BytesIO(b"")
    return real_open(path, *args, **kwargs)

guest.open = opened
guest.time = type("T", (), {"sleep": staticmethod(lambda s: slept.append(s))})
guest.report({"note": "left", "why": "a test"}, guest.os.getpid())
print(len(slept), file=sys.stderr)
child.kill()
"""


def test_a_python_run_s_scan_looks_again_while_a_child_is_inside_execve(tmp_path: Path) -> None:
    """The python guest's scan looked again once: a ``Popen`` child still inside ``execve`` then was
    named ``[sleep]``. It looks again while one is, :data:`LOOKS` times at most. Deterministic: in a
    pid namespace of its own (only the guest and its child), the child's cmdline reads empty until
    the scan's second wait, or for every look."""
    import shutil
    import subprocess

    from computer.runtime._pyguest_leftovers import LOOKS

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare as root")
    for ready, name, looks in ((2, "sleep 30", 2), (LOOKS + 1, "[sleep]", LOOKS)):
        said = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _GUEST_LOOKS, str(ready)],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": str(Path(computer.__file__).parent.parent)},
        )
        assert (
            said.stderr
            == f"left 1 process running in the background, ended with it (a test): {name} (pid 2)\n{looks}\n"
        ), said
