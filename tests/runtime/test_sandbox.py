"""What the sandbox denies (CASES 36): host secrets, host network, other workspaces, fork and memory bombs."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from exec_cases import loopback_server

import computer
from computer.runtime import ShellBackend, _reaper
from computer.runtime._cgroups import (
    CGROUP_PARENT,
    CGROUP_ROOT,
    CONTROLLERS,
    ControlFile,
    cgroup_writable,
    count_in,
    freeze,
    make_groups,
    remove_groups,
    remove_stale_groups,
    thaw,
)
from computer.runtime._limits import SandboxLimits


async def test_sandbox_runs_as_an_unprivileged_user_without_host_secrets(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("id -u; cat /etc/shadow; ls /root")).result()
    assert result.stdout == "65534\n"
    assert result.status == "failed"
    assert "/etc/shadow" in result.stderr


async def test_sandbox_cannot_write_system_directories(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("touch /usr/evil && echo wrote")).result()
    assert "wrote" not in result.stdout and result.status == "failed"


async def test_sandbox_cannot_connect_to_a_loopback_server_of_the_host(ws: computer.Workspace) -> None:
    async with loopback_server() as server:
        port = server.port
        shell = await (await ws.runtime.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")).result()
        code = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('connected')\n"
            "except OSError as e:\n    print('refused')"
        )
        python = await (await ws.runtime.exec(code, backend="python")).result()
    assert "connected" not in shell.stdout and shell.status == "failed"
    assert python.stdout == "refused\n"
    assert server.connections == 0


async def test_sandbox_cannot_see_another_workspace(shell_backend: ShellBackend) -> None:
    async with (
        computer.Workspace(backends=[shell_backend]) as other,
        computer.Workspace(backends=[shell_backend]) as mine,
    ):
        await other.fs.mkdir("/workspace")
        await other.fs.write_file("/workspace/secret-of-other.txt", "top secret")
        await (
            await other.runtime.exec("cat secret-of-other.txt")
        ).result()  # its mirror now exists on the host
        await mine.fs.mkdir("/workspace")
        result = await (
            await mine.runtime.exec(
                "find / -name 'secret-of-*' 2>/dev/null; grep -rl --devices=skip 'top secret' /tmp /workspace /etc /opt /var /home /root 2>/dev/null"
            )
        ).result()
        assert result.stdout == ""


async def test_a_fork_bomb_hits_the_process_limit(ws: computer.Workspace) -> None:
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 2000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('blocked after', n)\n"
    )
    await ws.fs.write_file("/workspace/bomb.py", code)
    result = await (await ws.runtime.exec("python3 bomb.py", timeout=60)).result()
    assert result.stdout.startswith("blocked after ")
    assert int(result.stdout.split()[-1]) < 256


async def test_a_memory_bomb_in_one_process_is_stopped(
    ws: computer.Workspace, shell_backend: ShellBackend
) -> None:
    """3 GiB touched page by page, over the 1 GiB limit: the memory cgroup kills it (SIGKILL), or
    without one ``RLIMIT_AS`` refuses the allocation."""
    hog = "x = bytearray(3 * 1024**3); x[::4096] = b'1' * len(x[::4096]); print('survived')"
    result = await (await ws.runtime.exec(f'python3 -c "{hog}"', timeout=60)).result()
    assert "survived" not in result.stdout
    if "memory" in shell_backend.sandbox.cgroups:
        assert result.exit_code == 137  # SIGKILL by the cgroup's OOM killer
    else:
        assert "MemoryError" in result.stderr


_THREADS = (
    "import threading\n"
    "go = threading.Event()\n"
    "threads = [threading.Thread(target=go.wait) for _ in range(N)]\n"
    "for t in threads: t.start()\n"
    "print(sum(t.is_alive() for t in threads))\n"
    "go.set()\n"
    "for t in threads: t.join()\n"
)


async def test_a_program_starts_64_threads(ws: computer.Workspace, shell_backend: ShellBackend) -> None:
    """No address-space rlimit where a memory cgroup bounds the run: each thread reserves an 8 MiB
    stack, which a 1 GiB ``RLIMIT_AS`` stopped at ~14 threads."""
    if "memory" not in shell_backend.sandbox.cgroups:
        pytest.skip("no memory cgroup here: RLIMIT_AS is the only memory bound and stays")
    await ws.fs.write_file("/workspace/threads.py", "N = 64\n" + _THREADS)
    shell = await (await ws.runtime.exec("python3 threads.py; ulimit -v", timeout=60)).result()
    assert shell.stdout == "64\nunlimited\n", shell.stderr
    # The python backend's pids cgroup (max_processes=64) counts threads too: 48 fit under it.
    python = await (await ws.runtime.exec("N = 48\n" + _THREADS, backend="python", timeout=60)).result()
    assert python.stdout == "48\n", python.stderr


async def test_many_processes_together_cannot_exceed_the_memory_limit(ws: computer.Workspace) -> None:
    # Each process stays under the per-process limit; together they exceed the run's cgroup.
    hog = "import time; x = bytearray(700 * 1024**2); x[::4096] = b'1' * len(x[::4096]); print('held'); time.sleep(3)"
    script = f'for i in 1 2 3; do python3 -c "{hog}" & done; wait; echo finished'
    result = await (await ws.runtime.exec(script, timeout=60)).result()
    assert result.stdout.count("held") < 3
    assert result.stdout.endswith("finished\n")


async def test_the_python_sandbox_cannot_read_host_files(ws: computer.Workspace) -> None:
    code = "import os\nprint(os.path.exists('/etc/shadow'), os.path.exists('/work'), os.getuid())"
    result = await (await ws.runtime.exec(code, backend="python")).result()
    assert result.stdout == "False False 65534\n"


def _host_has(path: str) -> bool:
    return os.path.exists(path)


async def test_writes_outside_the_mount_root_stay_in_the_sandbox(ws: computer.Workspace) -> None:
    marker = f"computer-test-{secrets.token_hex(6)}"
    result = await (await ws.runtime.exec(f"echo x > /tmp/{marker} && cat /tmp/{marker}")).result()
    assert result.stdout == "x\n"
    assert not _host_has(f"/tmp/{marker}")
    assert await ws.fs.ls("/workspace") == []


async def test_the_sandbox_sees_no_host_path_and_no_stray_descriptor(
    ws: computer.Workspace, shell_backend: ShellBackend
) -> None:
    script = "tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc/self/fd"
    for _ in range(2):  # a fresh sandbox, then (usually) the standby prepared after it
        result = await (await ws.runtime.exec(script)).result()
        cmdline, *fds = result.stdout.splitlines()
        assert cmdline.startswith("bwrap --args ")
        assert str(shell_backend.scratch) not in result.stdout and "/tmp/computer-etc" not in cmdline
        assert sorted(fds) == ["0", "1", "2", "3"]  # stdio, and ls's own directory descriptor
        await asyncio.sleep(0.2)


async def test_the_sandbox_etc_holds_only_what_a_shell_needs_read_only(ws: computer.Workspace) -> None:
    result = await (
        await ws.runtime.exec(
            "ls -A /etc; id -un; test -r /etc/ld.so.cache && echo cache; touch /etc/x || echo ro"
        )
    ).result()
    lines = result.stdout.split()
    assert "shadow" not in lines and "gshadow" not in lines and "ssh" not in lines
    assert {"passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache"} <= set(lines)
    assert lines[-3:] == ["sandbox", "cache", "ro"]


async def test_a_networked_sandbox_names_slirps_resolver_and_sees_the_host_ca_config_live() -> None:
    """Its resolver is slirp4netns's DNS forwarder (the host's may be on the host's loopback, which
    the sandbox's own network namespace cannot reach); the CA files are the host's, bound live."""
    config = Path("/etc/ca-certificates.conf")
    backend = ShellBackend(network=True)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (
            await ws.runtime.exec("cat /etc/resolv.conf; echo ==; cat /etc/ca-certificates.conf")
        ).result()
    resolv, cas = result.stdout.split("==\n")
    assert resolv == "nameserver 10.0.2.3\n"
    if await asyncio.to_thread(config.exists):
        assert cas == await asyncio.to_thread(config.read_text)


async def test_the_program_runs_in_the_runs_own_cgroups(
    ws: computer.Workspace, shell_backend: ShellBackend
) -> None:
    """bubblewrap's sandbox process joins the run's cgroups before it starts the command (no launcher)."""
    if not shell_backend.sandbox.cgroups:
        pytest.skip("no writable cgroup v1 controllers here")
    for _ in range(2):  # a fresh sandbox, then (usually) the standby prepared after it
        result = await (await ws.runtime.exec("cat /proc/self/cgroup")).result()
        groups = dict(line.split(":", 2)[1:] for line in result.stdout.splitlines())
        for controller in shell_backend.sandbox.cgroups:
            assert f"/computer-exec/run-{os.getpid()}-" in groups[controller], result.stdout
        await asyncio.sleep(0.2)


def test_sandbox_rlimits_never_go_above_a_hard_limit_already_lower() -> None:
    """The limits are set with prlimit, capped by the hard limit the sandbox process already has (as
    ``ulimit`` would fail to raise it)."""
    import resource
    import subprocess

    from computer.runtime._limits import SandboxLimits, rlimits, set_limits

    low = 1024 * 1024

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (low, low))

    limits = SandboxLimits(memory_mb=64, max_file_bytes=8 * low, max_processes=9)
    child = subprocess.Popen(["sleep", "30"], preexec_fn=lower)
    try:
        set_limits(child.pid, rlimits(limits, memory_cgroup=False, pids_cgroup=False))
        assert resource.prlimit(child.pid, resource.RLIMIT_FSIZE) == (low, low)
        assert resource.prlimit(child.pid, resource.RLIMIT_AS) == (64 * low, 64 * low)
        assert resource.prlimit(child.pid, resource.RLIMIT_NPROC) == (9, 9)
        assert resource.prlimit(child.pid, resource.RLIMIT_CORE) == (0, 0)
    finally:
        child.kill()
        child.wait()


def test_no_address_space_limit_where_a_memory_cgroup_bounds_the_run() -> None:
    import resource

    from computer.runtime._limits import SandboxLimits, rlimits

    kinds = {kind for kind, _, _ in rlimits(SandboxLimits(memory_mb=64), memory_cgroup=True)}
    assert resource.RLIMIT_AS not in kinds
    assert {resource.RLIMIT_FSIZE, resource.RLIMIT_CORE} <= kinds


@pytest.mark.skipif(not cgroup_writable("pids"), reason="needs a writable cgroup v1 pids controller")
def test_a_control_file_read_through_one_descriptor_is_rendered_afresh_each_time() -> None:
    """A live sandbox looks at ``pids.current`` and ``pids.events`` around every run through descriptors
    it keeps open: each read must show the group as it is now, and nothing once closed."""
    (group,) = make_groups(["pids"], SandboxLimits(max_processes=64))
    current = ControlFile(group / "pids.current")
    child = None
    try:
        assert current.read() == "0\n"
        child = subprocess.Popen(["sleep", "30"])
        (group / "cgroup.procs").write_text(str(child.pid))
        assert current.read() == "1\n"
        child.kill()
        child.wait()
        for _ in range(200):  # the kernel drops the exited task from the group promptly, not at once
            if current.read() == "0\n":
                break
            time.sleep(0.01)
        assert current.read() == "0\n"
    finally:
        current.close()
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        remove_groups([group])
    assert current.read() is None
    assert ControlFile(group / "pids.current").read() is None  # the group is gone


@pytest.mark.skipif(not cgroup_writable("memory"), reason="needs a writable cgroup v1 memory controller")
def test_out_of_memory_kills_are_counted_through_a_kept_descriptor() -> None:
    """A live sandbox tells an out-of-memory kill from a plain SIGKILL by the ``oom_kill`` count of its
    memory group before and after the run, read through a descriptor it keeps open."""
    (group,) = make_groups(["memory"], SandboxLimits(memory_mb=16))
    control = ControlFile(group / "memory.oom_control")
    try:
        assert count_in(control.read(), "oom_kill") == 0
        script = "import sys, time; sys.stdin.readline(); b = b'x' * (64 << 20); time.sleep(30)"
        child = subprocess.Popen(["python3", "-c", script], stdin=subprocess.PIPE)
        try:
            (group / "cgroup.procs").write_text(str(child.pid))  # in the group before it allocates
            child.communicate(b"go\n", timeout=30)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == -9
        assert count_in(control.read(), "oom_kill") == 1
    finally:
        control.close()
        remove_groups([group])
    assert count_in(control.read(), "oom_kill") == 0  # closed: nothing to tell
    assert count_in("oom_kill_disable 0\nunder_oom 0\n", "oom_kill") == 0  # a kernel before 4.13


@pytest.mark.skipif(
    not all(cgroup_writable(c) for c in ("memory", "pids", "freezer")),
    reason="needs writable cgroup v1 memory, pids and freezer controllers",
)
def test_a_dead_processs_frozen_run_is_swept_by_its_first_controllers_stale_group_removal() -> None:
    """A pool worker killed while its live sandbox was frozen for a sync leaves the run's groups with
    frozen processes in them. The next process removes stale groups controller by controller (the
    memory controller's first); the run's freezer group must be thawed by that first removal, or its
    kill rounds spend seconds on processes that cannot die and leave the group behind."""
    name = f"run-{os.getpid()}-1-{secrets.token_hex(4)}"  # this pid, another start time: a dead process
    groups = [CGROUP_ROOT / c / CGROUP_PARENT / name for c in ("memory", "pids", "freezer")]
    child = subprocess.Popen(["sleep", "300"])
    try:
        for group in groups:
            group.mkdir()
            (group / "cgroup.procs").write_text(str(child.pid))
        assert freeze(groups[2])
        remove_stale_groups(groups[0].parent)
        assert child.wait(timeout=10) == -9
        assert not groups[0].exists()
    finally:
        thaw(groups[2])
        child.kill()
        child.wait()
        remove_groups(groups)
    assert not any(group.exists() for group in groups)


@pytest.mark.skipif(
    not all(cgroup_writable(c) for c in ("memory", "pids", "freezer")),
    reason="needs writable cgroup v1 memory, pids and freezer controllers",
)
async def test_a_process_with_live_sandboxes_removes_what_a_dead_sibling_left_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool worker killed while its live sandbox was frozen for a sync leaves it frozen, holding its
    memory, and its mirrors on tmpfs. A process that keeps live sandboxes and started before (its own
    look at what dead processes left long done: a sibling worker on the node) removes both within
    ``DEAD_PERIOD``, with no new process started. Before, only the next process to start on the node
    did: a worker restarted on another node, or out of restarts, left them for good."""
    monkeypatch.setattr(_reaper, "DEAD_PERIOD", 0.2)
    monkeypatch.setattr(_reaper, "_reaper", None)  # this test's own (the session's waits 30 s)
    passes, reap_once = [], _reaper.reap_once

    def counted() -> None:  # (another process starting on this machine removes such leftovers too)
        passes.append(time.monotonic())
        reap_once()

    monkeypatch.setattr(_reaper, "reap_once", counted)
    backend = ShellBackend(live=True)
    if not backend.live:
        pytest.skip("no live sandboxes here")
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await (await ws.runtime.exec("echo up")).result()).stdout == "up\n"
        dead = f"{os.getpid()}-1"  # this pid, another start time: a dead process
        scratch = backend.scratch.parent.parent / f"computer-{dead}"  # beside this process's own
        (scratch / "shell-0" / "mirror").mkdir(parents=True)
        (scratch / "shell-0" / "mirror" / "big").write_bytes(b"x" * 4096)
        name = f"run-{dead}-{secrets.token_hex(4)}"  # one run's groups: one name in each controller
        groups = [CGROUP_ROOT / c / CGROUP_PARENT / name for c in CONTROLLERS]
        child = await asyncio.create_subprocess_exec("sleep", "300")
        try:
            for group in groups:
                group.mkdir()
                (group / "cgroup.procs").write_text(str(child.pid))
            assert freeze(groups[2])
            assert await asyncio.wait_for(child.wait(), 20) == -9  # nobody but the reaper removes it
            for _ in range(200):  # bounded: 10 s (its rmdir follows the kill)
                if len(passes) >= 2 and not scratch.exists() and not any(g.exists() for g in groups):
                    break
                await asyncio.sleep(0.05)
            assert not any(group.exists() for group in groups)
            assert not scratch.exists()
            assert len(passes) >= 2  # this process looks again and again, with no new process
        finally:
            thaw(groups[2])
            if child.returncode is None:
                child.kill()
                await child.wait()
            remove_groups(groups)
        again = await (await ws.runtime.exec("echo still")).result()  # its own sandbox untouched
        assert (again.status, again.stdout) == ("completed", "still\n")
        assert backend.scratch.is_dir()
