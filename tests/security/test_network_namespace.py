"""A backend with ``network=True`` reaches out through user-mode networking (slirp4netns) from a network
namespace of its own: never the host's loopback (the Ray GCS, raylet and dashboard, the directory's
Redis, our dashboard listen there), neither as 127.0.0.1 nor as slirp's gateway 10.0.2.2; a server in
a live sandbox stays reachable on the sandbox's own loopback; no slirp4netns outlives its sandbox.

Loopback only: the sandbox's connections go to a listener this test opens on the host's 127.0.0.1
(which it must not reach) or to 10.0.2.2, slirp's address for the host's loopback, only once the
sandbox shows slirp's route (never the host's real network)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from exec_cases import LoopbackServer, loopback_server

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._bwrap import bwrap_works

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap (network namespaces)")

_DEADLINE = 20.0  # seconds a slirp4netns may take to go once its sandbox ended


def _probe(port: int) -> str:
    """A bash line that tries the host's loopback listener on ``port``: as 127.0.0.1, then, where the
    sandbox has slirp's network (its default route through tap0), as slirp's gateway 10.0.2.2."""
    tries = (
        f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo loopback open || echo loopback closed; "
        "if grep -q '^tap0\\s00000000\\s0202000A' /proc/net/route; then "
        f"(exec 3<>/dev/tcp/10.0.2.2/{port}) 2>/dev/null && echo gateway open || echo gateway closed; "
        "else echo no slirp route; fi"
    )
    return f"timeout 10 bash -c {_quote(tries)}"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _python_probe(port: int) -> str:
    return (
        "import socket\n"
        "def main(input):\n"
        "    out = []\n"
        "    try:\n"
        f"        socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
        "        out.append('loopback open')\n"
        "    except OSError:\n"
        "        out.append('loopback closed')\n"
        "    route = open('/proc/net/route').read()\n"
        "    if any(l.split()[:3] == ['tap0', '00000000', '0202000A'] for l in route.splitlines()):\n"
        "        try:\n"
        f"            socket.create_connection(('10.0.2.2', {port}), timeout=5).close()\n"
        "            out.append('gateway open')\n"
        "        except OSError:\n"
        "            out.append('gateway closed')\n"
        "    else:\n"
        "        out.append('no slirp route')\n"
        "    return out\n"
    )


def _slirps() -> list[int]:
    """This process's slirp4netns children, zombies included (a child never reaped is a leak too)."""
    found = []
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            ppid = stat[stat.rindex(")") + 2 :].split()[1]
            if name == "slirp4netns" and ppid == me:
                found.append(int(entry))
    return found


async def _no_slirp_left() -> None:
    deadline = time.monotonic() + _DEADLINE
    while _slirps():
        if time.monotonic() > deadline:
            raise AssertionError(f"slirp4netns left running: {_slirps()}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _workspace(*backends: ShellBackend | PythonBackend) -> AsyncIterator[computer.Workspace]:
    ws = computer.Workspace(backends=list(backends))
    try:
        await ws.fs.mkdir("/workspace")
        yield ws
    finally:
        await ws.close()


def _closed(output: str | list[str], server: LoopbackServer) -> None:
    text = output if isinstance(output, str) else "\n".join(output)
    assert "loopback closed" in text and "gateway closed" in text, text
    assert server.connections == 0


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_networked_shell_never_reaches_the_hosts_loopback(live: bool) -> None:
    async with loopback_server() as server, _workspace(ShellBackend(network=True, live=live)) as ws:
        for _ in range(2):  # a fresh sandbox, then the one started ahead (or the same live one)
            result = await (await ws.runtime.exec(_probe(server.port))).result()
            _closed(result.stdout, server)
    await _no_slirp_left()


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_networked_python_never_reaches_the_hosts_loopback(live: bool) -> None:
    backend = PythonBackend(network=True, live=live)
    async with loopback_server() as server, _workspace(backend) as ws:
        result = await (await ws.runtime.exec(_python_probe(server.port), backend="python")).result()
        assert result.status == "completed", result.stderr
        _closed(result.value, server)
    await _no_slirp_left()


async def test_a_networked_sandbox_has_slirps_interface_route_and_resolver() -> None:
    async with _workspace(ShellBackend(network=True, live=False)) as ws:
        result = await (
            await ws.runtime.exec(
                "cat /proc/net/route; echo ==; cat /etc/resolv.conf; echo ==; cat /proc/net/dev"
            )
        ).result()
    route, resolv, dev = result.stdout.split("==\n")
    default = [line.split()[:3] for line in route.splitlines()[1:]]
    assert ["tap0", "00000000", "0202000A"] in default, route  # default route through slirp's 10.0.2.2
    assert [line.split() for line in resolv.splitlines() if line.strip()] == [["nameserver", "10.0.2.3"]]
    assert "tap0:" in dev and "lo:" in dev
    await _no_slirp_left()


async def test_a_server_in_a_live_networked_sandbox_answers_a_later_run_on_its_loopback() -> None:
    async with _workspace(ShellBackend(network=True)) as ws:
        started = await (
            await ws.runtime.exec(
                "echo hello > page.txt; setsid python3 -u -m http.server 0 --bind 127.0.0.1 "
                "> /tmp/server.log 2>&1 < /dev/null & "
                "for i in $(seq 100); do grep -q 'port' /tmp/server.log && break; sleep 0.1; done; "
                "cat /tmp/server.log"
            )
        ).result()
        port = started.stdout.split("port ")[1].split()[0]
        fetched = await (
            await ws.runtime.exec(
                f'python3 -c "import urllib.request; print(urllib.request.urlopen('
                f"'http://127.0.0.1:{port}/page.txt', timeout=10).read().decode().strip())\""
            )
        ).result()
        assert fetched.stdout == "hello\n", fetched.stderr
        # The host's loopback has no such server: it was the sandbox's own.
        with pytest.raises(OSError):
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", int(port)), 5)
            writer.close()
        assert len(_slirps()) == 1  # one slirp4netns for the live sandbox's whole life
    await _no_slirp_left()


async def test_no_slirp_outlives_a_killed_run_an_ended_sandbox_or_an_idle_end() -> None:
    per_call = ShellBackend(network=True, live=False, warm_sandboxes=0)
    async with _workspace(per_call) as ws:
        handle = await ws.runtime.exec("sleep 60")
        await handle.kill()
        await handle.result()
        await _no_slirp_left()
    live = ShellBackend(network=True, warm_sandboxes=0, live_idle=0.5)
    async with _workspace(live) as ws:
        await (await ws.runtime.exec("setsid sleep 60 > /dev/null 2>&1 < /dev/null &")).result()
        assert _slirps()
        assert await ws.runtime.end_sandbox()
        await _no_slirp_left()
        await (await ws.runtime.exec("true")).result()  # a new live sandbox, which ends idle
        assert _slirps()
        await _no_slirp_left()
    await _no_slirp_left()


def test_without_slirp4netns_a_networked_backend_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never the host's network instead: the error names the package to install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            if name != "slirp4netns" and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(directory, name))
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("slirp4netns") is None and shutil.which("bwrap") is not None
    for make in (lambda: ShellBackend(network=True), lambda: PythonBackend(network=True)):
        with pytest.raises(RuntimeError, match="slirp4netns"):
            make()
    ShellBackend(network=False)  # no network: no slirp4netns needed


async def test_a_slirp4netns_that_fails_fails_the_run_before_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slirp4netns that cannot attach (no /dev/net/tun, namespaces refused: here one that exits at
    once, or cannot even be read by the sandbox's user) fails the run with that error; the command
    never runs, on no network."""
    fake = tmp_path / "bin" / "slirp4netns"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    for live in (False, True):
        async with _workspace(ShellBackend(network=True, live=live)) as ws:
            result = await (await ws.runtime.exec("echo ran > ran.txt; echo ran")).result()
            assert result.status == "failed" and result.stdout == "", result
            assert "slirp4netns ended before the sandbox's interface was up (exit status" in (
                result.error or ""
            )
            assert not await ws.fs.exists("/workspace/ran.txt")


_HOLDER = """
import asyncio, os, sys
import computer
from computer.runtime import ShellBackend

async def main() -> None:
    ws = computer.Workspace(backends=[ShellBackend(network=True)])
    await ws.fs.mkdir("/workspace")
    await (await ws.runtime.exec("setsid sleep 600 > /dev/null 2>&1 < /dev/null &")).result()
    print("ready", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def _children_named(parent: int, name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat[stat.index("(") + 1 : stat.rindex(")")] == name:
                    if stat[stat.rindex(")") + 2 :].split()[1] == str(parent):
                        found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def test_a_slirp4netns_ends_when_its_host_process_is_killed() -> None:
    """SIGKILL of the process holding a live sandbox: bubblewrap dies with it (``--die-with-parent``),
    the sandbox's pid 1 with bubblewrap, and slirp4netns with the pipe only that pid 1 held."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(computer.__file__).parent.parent)},
    )
    try:
        assert holder.stdout is not None
        assert select.select([holder.stdout], [], [], 60)[0], "the holder did not start its sandbox"
        assert holder.stdout.readline() == b"ready\n"
        slirps = _children_named(holder.pid, "slirp4netns")
        assert len(slirps) == 1
        holder.kill()
        holder.wait(timeout=30)
        deadline = time.monotonic() + _DEADLINE
        while _running(slirps[0]):
            assert time.monotonic() < deadline, "slirp4netns outlived its host process"
            time.sleep(0.05)
    finally:
        holder.kill()
        holder.wait(timeout=30)


def _run_groups(pid: int) -> dict[str, str]:
    """The ``memory``, ``pids`` and ``cpu`` groups of ``pid`` (cgroup v1 lines ``N:controllers:path``)."""
    groups = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in ("memory", "pids", "cpu"):
                groups[controller] = path
    return groups


async def _one_slirp() -> int:
    deadline = time.monotonic() + _DEADLINE
    while len(_slirps()) != 1:
        if time.monotonic() > deadline:
            raise AssertionError(f"expected one slirp4netns, found {_slirps()}")
        await asyncio.sleep(0.05)
    return _slirps()[0]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_sandboxs_slirp4netns_is_in_its_runs_cgroups_and_goes_with_them(live: bool) -> None:
    """Its CPU, memory and task are charged to the sandbox and bounded by its limits (before, it ran in
    the host's groups: a sandbox's network cost was nobody's), and it ends with them."""
    backend = ShellBackend(network=True, live=live, warm_sandboxes=0)
    if not all((Path("/sys/fs/cgroup") / c / "computer-exec").is_dir() for c in ("memory", "pids", "cpu")):
        with contextlib.suppress(Exception):
            backend.close()
        pytest.skip("needs writable cgroup v1 memory, pids and cpu controllers")
    async with _workspace(backend) as ws:
        handle = await ws.runtime.exec("sleep 30" if not live else "true")
        if live:
            await handle.result()  # the live sandbox stays, its slirp4netns with it
        slirp = await _one_slirp()
        groups = _run_groups(slirp)
        assert set(groups) == {"memory", "pids", "cpu"}, groups
        names = {path.rsplit("/", 1)[1] for path in groups.values()}
        assert all("/computer-exec/run-" in path for path in groups.values()) and len(names) == 1, groups
        procs = (
            (Path("/sys/fs/cgroup/pids") / groups["pids"].lstrip("/") / "cgroup.procs").read_text().split()
        )
        assert str(slirp) in procs and len(procs) > 1, procs  # with the sandbox's own processes
        if live:
            assert await ws.runtime.end_sandbox()
        else:
            await handle.kill()
            await handle.result()
        await _no_slirp_left()
        assert not any((Path("/sys/fs/cgroup") / c / path.lstrip("/")).exists() for c, path in groups.items())
    await _no_slirp_left()


async def test_a_live_sandbox_whose_slirp4netns_died_ends_and_its_next_run_is_told_and_networked() -> None:
    """slirp4netns can die under a live sandbox (libslirp 4.7 aborted, "double free or corruption",
    under a flood of ~15,000 connects of which one the guard refused): the sandbox had no network
    for the rest of its life and nothing said so. Now it ends as a lost one: its next run says why on
    stderr and gets a fresh sandbox with a network of its own. The death is a SIGKILL here."""
    route = "grep -c '^tap0' /proc/net/route"
    backend = ShellBackend(network=True, warm_sandboxes=0)
    async with _workspace(backend) as ws:
        first = await (await ws.runtime.exec(route)).result()
        assert first.stdout.strip() not in ("", "0"), first
        sandbox = backend._lives.get(ws.fs.instance)
        assert sandbox is not None
        slirp = await _one_slirp()
        os.kill(slirp, 9)
        deadline = time.monotonic() + _DEADLINE
        # Reaped, and the sandbox told (from the reaper's thread, a moment after the reap: a sleep of
        # 0.2 s stood for that moment, and a run that came before it ran in the sandbox without a network).
        while slirp in _slirps() or sandbox.dead is None:
            assert time.monotonic() < deadline, (
                f"slirp4netns never reaped, or the sandbox never told: {_slirps()}"
            )
            await asyncio.sleep(0.05)
        second = await (await ws.runtime.exec(f"{route}; {_probe(9)}")).result()
        assert "its network ended: slirp4netns was killed by SIGKILL" in second.stderr, second.stderr
        assert second.stdout.splitlines()[0] not in ("", "0"), second
        assert "gateway closed" in second.stdout, second  # answered at once: slirp4netns is there
        assert (await _one_slirp()) != slirp
    await _no_slirp_left()
