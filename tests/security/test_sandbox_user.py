"""The sandbox user is not host root (issue 17, item 1): an unprivileged sandbox runs its programs as a
dedicated host uid, so a file made setuid inside is no root program on the host, per-user kernel limits
bind, and every bind is ``nosuid``/``nodev``. Cgroups and standby sandboxes work as for root.

Skipped when this process is not root (then the sandbox never was host root).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from computer.runtime._sandbox import Bind, Sandbox, SandboxLimits, SandboxProcess

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root maps the sandbox user to itself")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    sandbox = Sandbox(unprivileged=True)
    if not sandbox.bwrap:
        pytest.skip("bubblewrap does not work here")
    return sandbox


@pytest.fixture
def bound(sandbox: Sandbox) -> Iterator[Path]:
    """A writable directory for the sandbox, owned by its host user (what a mirror must be)."""
    assert sandbox.host_ids is not None
    directory = Path(tempfile.mkdtemp(prefix="computer-test-"))
    os.chown(directory, *sandbox.host_ids)
    yield directory
    shutil.rmtree(directory)


async def _run(sp: SandboxProcess, stdin: bytes = b"") -> tuple[int, str, str]:
    try:
        out, err = await sp.proc.communicate(stdin)
        return sp.proc.returncode or 0, out.decode(), err.decode()
    finally:
        await sp.discard()


def _root_setuid_files(top: Path) -> list[Path]:
    found = []
    for path in [top, *top.rglob("*")]:
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(path)
    return found


async def test_a_file_made_setuid_inside_is_not_a_root_program_on_the_host(
    sandbox: Sandbox, bound: Path
) -> None:
    script = (
        "cp /usr/bin/id x && chmod 4755 x && mkdir d && touch d/f && id -u && grep CapEff /proc/self/status"
    )
    code, out, err = await _run(
        await sandbox.spawn(["/bin/bash", "-c", script], binds=[Bind(str(bound), "/w", True)], cwd="/w")
    )
    assert code == 0, err
    assert out.split()[:1] == ["65534"] and out.split()[-1] == "0000000000000000"
    assert _root_setuid_files(bound) == []
    assert sandbox.host_ids is not None
    for made in ("x", "d", "d/f"):
        assert (bound / made).lstat().st_uid == sandbox.host_ids[0] != 0


async def test_host_ids_is_none_without_the_mapping() -> None:
    assert Sandbox().host_ids is None
    assert Sandbox(unprivileged=True, host_ids=(1234, 4321)).host_ids == (1234, 4321)


async def test_every_mount_inside_is_nosuid_and_binds_are_nodev(sandbox: Sandbox, bound: Path) -> None:
    code, out, err = await _run(
        await sandbox.spawn(["/bin/cat", "/proc/self/mountinfo"], binds=[Bind(str(bound), "/w", True)])
    )
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert lines and all("nosuid" in fields[5].split(",") for fields in lines), out
    (bind,) = [fields for fields in lines if fields[4] == "/w"]
    assert "nodev" in bind[5].split(",")


async def test_rlimit_nproc_binds_for_the_sandbox_user(bound: Path) -> None:
    """Without a pids cgroup the process rlimit alone stops a fork bomb (host root is exempt from it,
    so with the old mapping it never bound)."""
    sandbox = Sandbox(unprivileged=True, limits=SandboxLimits(max_processes=8))
    sandbox.cgroups.discard("pids")
    bomb = (
        "import os, time\nn = 0\ntry:\n    while n < 64:\n        if os.fork() == 0:\n"
        "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
        "except OSError:\n    print('blocked after', n)\n"
    )
    code, out, err = await _run(await sandbox.spawn(["/usr/bin/python3", "-c", bomb]))
    assert out.startswith("blocked after "), (code, out, err)
    assert int(out.split()[-1]) < 8


async def test_a_memory_hog_is_killed_by_the_cgroup(bound: Path) -> None:
    sandbox = Sandbox(unprivileged=True, limits=SandboxLimits(memory_mb=64))
    if "memory" not in sandbox.cgroups:
        pytest.skip("no memory cgroup here")
    hog = "x = bytearray(256 * 1024**2); x[::4096] = b'1' * len(x[::4096]); print('survived')"
    code, out, _ = await _run(await sandbox.spawn(["/usr/bin/python3", "-c", hog]))
    assert "survived" not in out and code in (137, -9)


async def test_a_standby_runs_in_its_cgroups_as_the_sandbox_user(sandbox: Sandbox, bound: Path) -> None:
    standby = await sandbox.prepare(binds=[Bind(str(bound), "/w", True)])
    sp = await standby.start(["/bin/bash", "-c", "touch made; cat /proc/self/cgroup"], cwd="/w", env={})
    code, out, err = await _run(sp)
    assert code == 0, err
    for controller in sandbox.cgroups:
        assert any(f":{controller}:" in line and "/computer-exec/run-" in line for line in out.splitlines())
    assert sandbox.host_ids is not None
    assert (bound / "made").stat().st_uid == sandbox.host_ids[0]


async def test_the_program_can_reopen_its_stdio(sandbox: Sandbox) -> None:
    script = "echo out > /dev/stdout; echo err > /dev/stderr; cat /dev/stdin"
    code, out, err = await _run(await sandbox.spawn(["/bin/bash", "-c", script]), b"in\n")
    assert (code, out, err) == (0, "out\nin\n", "err\n")


def test_without_user_namespaces_for_the_sandbox_user_bubblewrap_stays_as_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Namespaces matter more than the host uid: no silent fall back to running without bubblewrap."""
    import computer.runtime._sandbox as module
    from computer.runtime._bwrap import bwrap_works

    if not bwrap_works():
        pytest.skip("bubblewrap does not work here")
    monkeypatch.setattr(
        module,
        "bwrap_works",
        lambda prefix=(), options=(), seccomp=None: not prefix and bwrap_works((), options, seccomp),
    )
    sandbox = Sandbox(unprivileged=True)
    assert sandbox.bwrap and sandbox.host_ids is None
    assert "(host root)" in sandbox.isolation


_RUN_BOTH_BACKENDS = """
import asyncio, json
import computer
from computer.runtime import PythonBackend, ShellBackend

async def main():
    ws = computer.Workspace(None, backends=[ShellBackend(), PythonBackend()])
    try:
        for backend, source in (("shell", "echo ok"), ("python", "print('ok')")):
            result = await (await ws.runtime.exec(source, backend=backend, timeout=60)).result()
            print(json.dumps([backend, result.status, result.stdout, result.error]))
    finally:
        await ws.close()

asyncio.run(main())
"""


def test_runs_work_or_fail_clearly_with_a_private_temp_directory() -> None:
    """``TMPDIR=$(mktemp -d)`` (mode 0700, root's): each run either works, or fails with an error that
    names the directory, never a bare "Broken pipe"."""
    private = tempfile.mkdtemp(prefix="computer-private-tmp-")
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUN_BOTH_BACKENDS],
            env={**os.environ, "TMPDIR": private},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
        assert [r[0] for r in results] == ["shell", "python"]
        for backend, status, stdout, error in results:
            worked = status == "completed" and stdout == "ok\n"
            assert worked or (status == "failed" and private in (error or "")), (backend, status, error)
    finally:
        shutil.rmtree(private, ignore_errors=True)
