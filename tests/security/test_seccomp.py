"""The sandbox's seccomp filter (``computer/runtime/_seccomp.py``): the kernel interfaces behind most
local privilege escalations (the keyring, bpf, perf events, userfaultfd, io_uring, modules, kexec,
mounts, swap, reboot, the clock) fail with EPERM in every sandbox, live and per call, shell and
python; debuggers and runtimes that probe keep working; where libseccomp is missing or bubblewrap
cannot load the filter, sandboxes run without it and ``isolation`` says so.

Each call is made with ``syscall()`` through ctypes, by number (this module's own table per
``platform.machine()``, not libseccomp's), every argument -1: an invalid pointer, descriptor and flag
for each, so a call the filter missed fails harmlessly with another errno (EINVAL, EFAULT, EBADF)."""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
from collections.abc import Iterator

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend, _sandbox, _seccomp
from computer.runtime._bwrap import bwrap_works
from computer.runtime._sandbox import Sandbox

NUMBERS = {
    "x86_64": {
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "open_by_handle_at": 304,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "acct": 163,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "settimeofday": 164,
        "clock_settime": 227,
        "pivot_root": 155,
        "mount": 165,
        "umount2": 166,
        "fsopen": 430,
        "fsmount": 432,
        "move_mount": 429,
        "open_tree": 428,
        "syslog": 103,
        "fanotify_init": 300,
    },
    "aarch64": {
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "open_by_handle_at": 265,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "acct": 89,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "settimeofday": 170,
        "clock_settime": 112,
        "pivot_root": 41,
        "mount": 40,
        "umount2": 39,
        "fsopen": 430,
        "fsmount": 432,
        "move_mount": 429,
        "open_tree": 428,
        "syslog": 116,
        "fanotify_init": 262,
    },
}

pytestmark = pytest.mark.skipif(
    not bwrap_works() or platform.machine() not in NUMBERS or _seccomp.compiled().program is None,
    reason="bubblewrap, libseccomp and an x86_64 or aarch64 machine are needed",
)

# What each call gave inside (errno's name, or what it returned), and the process's seccomp mode.
_PROBE = f"""
import ctypes, errno, json, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {{}}
for name, number in {NUMBERS!r}[platform.machine()].items():
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(-1)] * 6)
    out[name] = errno.errorcode.get(ctypes.get_errno(), "?") if rc == -1 else f"returned {{rc}}"
with open("/proc/self/status") as f:
    out["Seccomp"] = [line.split()[1] for line in f if line.startswith("Seccomp:")][0]
print(json.dumps(out))
"""
_SHELL_PROBE = f"python3 - <<'EOF'\n{_PROBE}\nEOF"


def _all_denied(stdout: str) -> None:
    found = json.loads(stdout.strip().splitlines()[-1])
    assert found.pop("Seccomp") == "2", found  # SECCOMP_MODE_FILTER
    assert found == dict.fromkeys(NUMBERS[platform.machine()], "EPERM")


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_denied_calls_fail_with_eperm_in_a_shell_run(live: bool) -> None:
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec(_SHELL_PROBE)).result()
        again = await (await ws.runtime.exec(_SHELL_PROBE)).result()  # a started-ahead shell, live
        [info] = ws.runtime.backends()
    for result in (first, again):
        assert result.status == "completed", result
        _all_denied(result.stdout)
    assert "seccomp filter: " in info.isolation and "NO seccomp" not in info.isolation


# fanotify_init as an unprivileged program may call it (a notification group reporting file ids):
# its groups are counted per host uid, every sandbox's together, and one program held all 128, so
# every other workspace's failed (EMFILE). With -1 arguments (the probe above) the kernel itself
# refuses an unprivileged caller, so this asks as a real program would.
_FANOTIFY = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.fanotify_init(0x200, os.O_RDONLY)  # FAN_CLASS_NOTIF | FAN_REPORT_FID
print("fd" if fd >= 0 else errno.errorcode[ctypes.get_errno()])
"""


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_fanotify_is_refused_where_an_unprivileged_program_could_hold_every_group(live: bool) -> None:
    async with computer.Workspace(backends=[ShellBackend(live=live), PythonBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        shell = await (await ws.runtime.exec(f"python3 - <<'EOF'\n{_FANOTIFY}\nEOF")).result()
        python = await (await ws.runtime.exec(_FANOTIFY, backend="python")).result()
    assert (shell.stdout, python.stdout) == ("EPERM\n", "EPERM\n"), (shell, python)  # before: "fd"


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_denied_calls_fail_with_eperm_in_a_python_run(live: bool) -> None:
    async with computer.Workspace(backends=[PythonBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec(_PROBE, backend="python")).result()
        again = await (await ws.runtime.exec(_PROBE, backend="python")).result()  # a guest started ahead
        [info] = ws.runtime.backends()
    for result in (first, again):
        assert result.status == "completed", result
        _all_denied(result.stdout)
    assert "seccomp filter: " in info.isolation


# keyctl(KEYCTL_GET_KEYRING_ID, 0, 0) through the i386 ABI (``int 0x80``, number 288) and the x32 one
# (bit 30 set): EINVAL and ENOSYS without the filter. In a child: a kernel without ia32 emulation
# answers ``int 0x80`` with SIGSEGV.
_COMPAT = """
import ctypes, mmap, os, subprocess, sys
code = '''
import ctypes, mmap
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes.fromhex("b820010000" "31db" "31c9" "31d2" "cd80" "c3"))
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))())
'''
run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print("i386", run.stdout.strip() if run.returncode == 0 else f"signal {-run.returncode}")
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.syscall(ctypes.c_long(0x40000000 | 250), 0, 0, 0)
print("x32", os.strerror(ctypes.get_errno()) if rc == -1 else rc)
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 and x32 ABIs of x86_64")
async def test_the_32_bit_abis_are_filtered_too() -> None:
    async with computer.Workspace(backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(f"python3 - <<'EOF'\n{_COMPAT}\nEOF")).result()
    assert result.status == "completed", result
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["x32"] == "Operation not permitted", result
    if lines["i386"] == "signal 11":  # SIGSEGV; a SIGSYS would be the filter's bad-ABI kill
        pytest.skip("no ia32 emulation in this kernel")
    assert lines["i386"] == "-1", result  # -EPERM


# setxattrat (463 on every ABI; libseccomp 2.5 cannot name it, so the filter refuses it by number ahead
# of libseccomp's program) through the i386 ABI (invalid arguments: EFAULT without the filter) and the
# x32 one (ENOSYS without the filter on a kernel without x32).
_XATTRAT_COMPAT = _COMPAT.replace("b820010000", "b8cf010000").replace("0x40000000 | 250", "0x40000000 | 463")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 and x32 ABIs of x86_64")
async def test_setxattrat_fails_as_unsupported_through_the_32_bit_abis_too() -> None:
    """See ``test_host_resources``: the workspace keeps no extended attributes and a program may not
    hang memory on its mirror through them; the filter's rule by number holds for every ABI."""
    async with computer.Workspace(backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(f"python3 - <<'EOF'\n{_XATTRAT_COMPAT}\nEOF")).result()
    assert result.status == "completed", result
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["x32"] == os.strerror(errno.EOPNOTSUPP), result
    if lines["i386"] == "signal 11":
        pytest.skip("no ia32 emulation in this kernel")
    assert lines["i386"] == str(-errno.EOPNOTSUPP), result


_KEYCTL_NR = NUMBERS.get(platform.machine(), {}).get("keyctl", -1)
# keyctl(KEYCTL_GET_KEYRING_ID, 0, 0): EPERM filtered, EINVAL (22) not.
_KEYCTL = (
    f"python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); l.syscall({_KEYCTL_NR}, 0, 0, 0);"
    " print(ctypes.get_errno())'"
)
_PROGRAMS = {
    # ptrace, process_vm_readv: allowed (a tracer cannot move a call past the filter since Linux 4.8).
    "strace": (f"strace -f -e trace=keyctl {_KEYCTL} 2>&1", ("keyctl(KEYCTL_GET_KEYRING_ID", "= -1 EPERM")),
    # ptrace and personality(ADDR_NO_RANDOMIZE).
    "gdb": ("gdb -nx -q -batch -ex run --args /bin/true 2>&1", ("exited normally",)),
    # libuv tries io_uring (with SQPOLL, then without) and falls back to its thread pool.
    "node": (
        "UV_USE_IO_URING=1 node -e \"const fs = require('fs'); fs.writeFileSync('n.txt', 'hi');"
        " fs.promises.readFile('n.txt', 'utf8').then(s => console.log('read', s))\"",
        ("read hi",),
    ),
}


@pytest.mark.parametrize("program", sorted(_PROGRAMS))
@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_debuggers_and_probing_runtimes_still_work(program: str, live: bool) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    source, expected = _PROGRAMS[program]
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(source, timeout=120)).result()
    assert result.status == "completed" and result.exit_code == 0, result
    assert all(part in result.stdout for part in expected), result


def test_each_sandbox_says_so_and_shares_one_compiled_filter() -> None:
    first, second = Sandbox(), Sandbox()
    assert first.seccomp is second.seccomp is _seccomp.compiled()
    assert "seccomp filter: " in first.isolation and "NO seccomp" not in first.isolation
    assert set(NUMBERS[platform.machine()]) <= set(_seccomp.compiled().denied)


@pytest.fixture
def recompiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A fresh compile for the test, and the usual filter again after it."""
    _seccomp.compiled.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    _seccomp.compiled.cache_clear()


async def _unfiltered_run_works() -> str:
    """A per-call and a live run, both completed with keyctl unfiltered (EINVAL, 22); the isolation."""
    for live in (False, True):
        async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
            await ws.fs.mkdir("/workspace")
            result = await (await ws.runtime.exec(_KEYCTL)).result()
            [info] = ws.runtime.backends()
        assert result.status == "completed" and result.stdout.strip() == "22", result
    return info.isolation


async def test_without_libseccomp_sandboxes_run_and_say_so(recompiled: pytest.MonkeyPatch) -> None:
    recompiled.setattr(_seccomp, "_LIBRARY", "libseccomp-missing.so.0")
    isolation = await _unfiltered_run_works()
    assert "NO seccomp filter (libseccomp-missing.so.0 not found)" in isolation
    assert "no user namespaces inside" in isolation or "user namespaces allowed inside" in isolation


async def test_a_filter_bubblewrap_cannot_load_is_left_out_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    invalid = _seccomp.SeccompFilter(b"\xff" * 8, ("keyctl",))  # no BPF instruction: prctl says EINVAL
    monkeypatch.setattr(_sandbox, "compiled", lambda: invalid)
    isolation = await _unfiltered_run_works()
    assert "NO seccomp filter (bubblewrap could not load it)" in isolation


async def test_reading_the_clock_state_still_works() -> None:
    """``adjtimex`` with no mode bits only reads the clock's state (glibc's ``ntp_gettime``, ntpstat):
    allowed, as in Docker's profile; setting it needs ``CAP_SYS_TIME``, which nothing inside has."""
    probe = (
        "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(512)\n"
        "rc = libc.adjtimex(buf)\nprint('read', rc) if rc >= 0 else print('failed', errno.errorcode[ctypes.get_errno()])\n"
        "ctypes.memmove(buf, (ctypes.c_uint * 1)(1), 4)  # ADJ_OFFSET: a change\n"
        "rc = libc.adjtimex(buf)\nprint('set', rc) if rc >= 0 else print('failed', errno.errorcode[ctypes.get_errno()])\n"
    )
    async with computer.Workspace(backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(f"python3 - <<'EOF'\n{probe}\nEOF")).result()
    lines = result.stdout.split("\n")
    assert lines[0].startswith("read "), result
    assert lines[1] == "failed EPERM", result
