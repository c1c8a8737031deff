"""No user namespaces inside a sandbox: a program's own (``unshare -Ur``) gave it a uid 0 with every
capability over new namespaces, the kernel surface behind most local privilege escalations. Two locks:
bubblewrap 0.8+'s ``--disable-userns`` (probed) and, on every bubblewrap, the seccomp filter
(``unshare`` and ``clone`` with ``CLONE_NEWUSER``: EPERM; ``clone3``: ENOSYS). Each test runs with
this host's bubblewrap and as on an older one (0.6.1, Ubuntu 22.04's: the probe of
``--disable-userns`` made to fail), where the filter alone holds; ``BackendInfo.isolation`` says
which locks hold, and says "user namespaces allowed inside" where neither does."""

from __future__ import annotations

import json
import platform
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend, _sandbox, _seccomp
from computer.runtime._bwrap import NO_USERNS, bwrap_works
from computer.runtime._sandbox import Sandbox

# clone's number per machine (clone3's is 435 on both).
_CLONE = {"x86_64": 56, "aarch64": 220}

pytestmark = pytest.mark.skipif(
    not bwrap_works() or shutil.which("unshare") is None or platform.machine() not in _CLONE,
    reason="bubblewrap, util-linux's unshare and an x86_64 or aarch64 machine are needed",
)

_REAL_PROBE = _sandbox.bwrap_works


def _older(prefix: tuple[str, ...] = (), options: tuple[str, ...] = (), seccomp: bytes | None = None) -> bool:
    """The sandbox's probe of bubblewrap as on one before 0.8: no ``--disable-userns``."""
    return NO_USERNS not in options and _REAL_PROBE(prefix, options, seccomp)


@pytest.fixture(params=["this-bwrap", "older-bwrap"])
def bubblewrap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This host's bubblewrap (with ``--disable-userns`` where it has it), or one without it: the
    probe the sandboxes made from now on ask fails for that option, as on bubblewrap before 0.8."""
    if request.param == "older-bwrap":
        monkeypatch.setattr(_sandbox, "bwrap_works", _older)
    elif not bwrap_works((), (NO_USERNS,)):
        pytest.skip("this bubblewrap has no --disable-userns (0.8+): the older-bwrap case is this host")
    yield request.param


_BY = {
    "older-bwrap": "no user namespaces inside (the seccomp filter: this bubblewrap has no --disable-userns)",
    "this-bwrap": "no user namespaces inside (--disable-userns and the seccomp filter)",
}
_FILTER_SAYS = "new user namespaces refused (unshare and clone with CLONE_NEWUSER: EPERM; clone3: ENOSYS"


def _says(isolation: str, bubblewrap: str) -> None:
    """What ``isolation`` must say of user namespaces with the filter and ``bubblewrap``."""
    assert _BY[bubblewrap] in isolation and _FILTER_SAYS in isolation, isolation


_NEST = "unshare -Ur id -u; echo rc=$?"


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_a_shell_run_cannot_make_a_user_namespace(live: bool, bubblewrap: str) -> None:
    async with computer.Workspace(backends=[ShellBackend(live=live, warm_sandboxes=0)]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec(_NEST)).result()
        again = await (await ws.runtime.exec(_NEST)).result()  # a started-ahead shell, live
        [info] = ws.runtime.backends()
    for result in (first, again):
        assert "rc=1" in result.stdout and "0\n" not in result.stdout, result  # no uid 0 of its own
        assert "unshare failed: Operation not permitted" in result.stderr, result  # the filter's EPERM
    _says(info.isolation, bubblewrap)


# Every way to a user namespace a program has, each tried in a child of its own (one that worked would
# change what the next finds): what it gave (errno's name, or "made"). By number with ctypes (but
# ``os.unshare`` on Python 3.12+). A clone that works returns 0 in a fork-like grandchild, which
# leaves at once; clone's flags are 64 bits wide and the kernel reads their low 32.
_PY_NEST = f"""
import ctypes, errno, json, os, platform, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NEWUSER = 0x10000000
UNSHARE = {{"x86_64": 272, "aarch64": 97}}[platform.machine()]
CLONE = {_CLONE!r}[platform.machine()]

def attempt(number, *args):
    pid = os.fork()
    if pid == 0:
        if number == UNSHARE and hasattr(os, "unshare"):
            try:
                os.unshare(os.CLONE_NEWUSER)
                os._exit(0)
            except OSError as exc:
                os._exit(exc.errno)
        rc = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
        if rc == 0 and number != UNSHARE:
            os._exit(0)  # the grandchild of a clone that worked
        if rc > 0:
            os.waitpid(rc, 0)
        os._exit(0 if rc >= 0 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "made" if code == 0 else errno.errorcode.get(code, code)

args = (ctypes.c_uint64 * 11)(NEWUSER, 0, 0, 0, signal.SIGCHLD)  # struct clone_args, 88 bytes
out = {{
    "unshare": attempt(UNSHARE, NEWUSER),
    "clone": attempt(CLONE, NEWUSER | signal.SIGCHLD, 0, 0, 0, 0),
    "clone, high bits set": attempt(CLONE, (1 << 40) | NEWUSER | signal.SIGCHLD, 0, 0, 0, 0),
    "clone3": attempt(435, ctypes.addressof(args), ctypes.sizeof(args)),
    "unshare -Ur": subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode,
}}
print(json.dumps(out))
"""
_REFUSED = {
    "unshare": "EPERM",
    "clone": "EPERM",
    "clone, high bits set": "EPERM",
    "clone3": "ENOSYS",
    "unshare -Ur": 1,
}


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_a_python_run_cannot_make_one_either(live: bool, bubblewrap: str) -> None:
    async with computer.Workspace(backends=[PythonBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec(_PY_NEST, backend="python")).result()
        again = await (await ws.runtime.exec(_PY_NEST, backend="python")).result()  # a guest started ahead
        [info] = ws.runtime.backends()
    for result in (first, again):
        assert result.status == "completed", result
        assert json.loads(result.stdout.strip().splitlines()[-1]) == _REFUSED, result
    _says(info.isolation, bubblewrap)


# unshare(CLONE_NEWUSER) through the i386 ABI (``int 0x80``, number 310) and the x32 one (bit 30 set).
_COMPAT = """
import ctypes, mmap, os, subprocess, sys
code = '''
import ctypes, mmap
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes.fromhex("b836010000" "bb00000010" "cd80" "c3"))
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))())
'''
run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print("i386", run.stdout.strip() if run.returncode == 0 else f"signal {-run.returncode}")
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.syscall(ctypes.c_long(0x40000000 | 272), ctypes.c_long(0x10000000))
print("x32", os.strerror(ctypes.get_errno()) if rc == -1 else rc)
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 and x32 ABIs of x86_64")
async def test_the_32_bit_abis_cannot_either(bubblewrap: str) -> None:
    async with computer.Workspace(backends=[ShellBackend(live=False, warm_sandboxes=0)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(f"python3 - <<'EOF'\n{_COMPAT}\nEOF")).result()
    assert result.status == "completed", result
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    # x32: EPERM from the filter (no x32 support in the kernel would be ENOSYS, also no namespace).
    assert lines["x32"] == "Operation not permitted", result
    if lines["i386"] == "signal 11":  # SIGSEGV: no ia32 emulation in this kernel
        pytest.skip("no ia32 emulation in this kernel")
    assert lines["i386"] == "-1", result  # -EPERM


def test_each_sandbox_says_so(bubblewrap: str) -> None:
    _says(Sandbox().isolation, bubblewrap)


@pytest.mark.parametrize("filter_", ["no libseccomp", "no user namespace rules"])
async def test_without_the_rules_an_older_bubblewrap_says_so(
    monkeypatch: pytest.MonkeyPatch, filter_: str
) -> None:
    """The truth where neither lock holds (bubblewrap before 0.8, and no libseccomp or a machine whose
    clone flags argument this module does not know): a program makes its own user namespace, and
    ``isolation`` says so."""
    monkeypatch.setattr(_sandbox, "bwrap_works", _older)
    if filter_ == "no libseccomp":
        monkeypatch.setattr(
            _sandbox, "compiled", lambda: _seccomp.SeccompFilter(None, missing="libseccomp off")
        )
    else:
        monkeypatch.setattr(_seccomp, "_CLONE_FLAGS_ARG", {})
        unruled = _seccomp.compiled.__wrapped__()  # a compile of its own, not the process's filter
        assert unruled.program is not None and not unruled.no_userns, unruled
        monkeypatch.setattr(_sandbox, "compiled", lambda: unruled)
    async with computer.Workspace(backends=[ShellBackend(live=False, warm_sandboxes=0)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(_NEST)).result()
        [info] = ws.runtime.backends()
    assert "user namespaces allowed inside" in info.isolation and "no user namespaces" not in info.isolation
    assert ("NO seccomp filter (libseccomp off)" in info.isolation) == (filter_ == "no libseccomp")
    assert _FILTER_SAYS not in info.isolation
    if "rc=0" not in result.stdout:  # the host itself forbids them (a sysctl, AppArmor)
        pytest.skip(f"this host refuses unprivileged user namespaces: {result.stderr.strip()}")
    assert "0\n" in result.stdout, result


def test_bubblewrap_sets_up_with_both_locks() -> None:
    """bubblewrap makes ``--disable-userns``'s nested namespace (and checks it) before it loads the
    filter: the two together start a sandbox."""
    if not bwrap_works((), (NO_USERNS,)):
        pytest.skip("this bubblewrap has no --disable-userns (0.8+)")
    filt = _seccomp.compiled()
    if filt.program is None:
        pytest.skip(f"no seccomp filter here: {filt.missing}")
    assert filt.no_userns, filt
    assert bwrap_works((), (NO_USERNS,), filt.program)


# Ordinary programs under the user namespace rules, as on an older bubblewrap (the filter alone): each
# step its own call, checked by later calls and after the workspace is closed and opened again.
_PIPELINE = (
    "seq 1 10000 | awk '{s += $1} END {print s}' | tee sum.txt | wc -c; "
    "printf 'a\\nb\\nc\\n' | sort -r | paste -sd, -; (sleep 0.1 & wait) && echo waited"
)
# Threads (pthread_create: clone3, then clone), each start method of multiprocessing (fork: clone;
# spawn and forkserver: subprocess's fork_exec), posix_spawn (clone3, then clone with CLONE_VFORK).
_PROCESSES = """python3 -c '
import math, multiprocessing as mp, os, threading
seen = []
threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", sorted(seen) == list(range(16)))
for method in ("fork", "spawn", "forkserver"):
    with mp.get_context(method).Pool(2) as pool:
        print(method, sum(pool.map(math.factorial, range(8))))
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "echo spawned > spawned.txt"], dict(os.environ))
print("posix_spawn", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
'"""
_GIT = "git -c user.name=agent -c user.email=agent@example.invalid"
_COMMITS = (
    f"git init -q repo && cd repo && {_GIT} commit -q --allow-empty -m first && echo hi > f && git add f"
    f" && {_GIT} commit -q -m second && git log --format=%s | paste -sd, -"
)
# glibc tries clone3 first, is told ENOSYS and makes the thread and the spawned process with clone.
_FALLBACK = (
    "strace -f -qq -e trace=clone,clone3 -o trace.txt python3 -c 'import os, threading;"
    ' t = threading.Thread(target=print, args=("thread",)); t.start(); t.join();'
    ' print("spawn", os.waitpid(os.posix_spawn("/bin/true", ["true"], {}), 0)[1])\';'
    " grep -c 'clone3(.*= -1 ENOSYS' trace.txt; grep -c 'clone(.*CLONE_THREAD' trace.txt;"
    " grep -c 'clone(.*CLONE_VFORK' trace.txt"
)


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_ordinary_programs_still_work(
    live: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_sandbox, "bwrap_works", _older)
    shell = ShellBackend(live=live)
    path = str(tmp_path / "ws.sqlite")
    async with computer.Workspace(path, backends=[shell, PythonBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")

        async def run(source: str, backend: str = "shell") -> str:
            result = await (await ws.runtime.exec(source, backend=backend, timeout=120)).result()
            assert result.status == "completed" and result.exit_code == 0, result
            return result.stdout

        assert await run(_PIPELINE) == "9\nc,b,a\nwaited\n"
        assert await run(_PROCESSES) == (
            "threads True\nfork 5914\nspawn 5914\nforkserver 5914\nposix_spawn 0\n"
        )
        assert await run("cat sum.txt spawned.txt") == "50005000\nspawned\n"
        assert await run(_COMMITS) == "second,first\n"
        guest = await run(
            "import os, subprocess, threading\n"
            "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
            "print('spawn', os.waitpid(os.posix_spawn('/bin/true', ['true'], {}), 0)[1])\n"
            "print(subprocess.run(['sh', '-c', 'echo $((6 * 7))'], capture_output=True, text=True).stdout, end='')\n",
            backend="python",
        )
        assert guest == "thread\nspawn 0\n42\n"
        if shutil.which("strace") is not None:
            printed, clone3_enosys, threads, vforks = (await run(_FALLBACK)).rsplit("\n", 4)[:4]
            assert printed == "thread\nspawn 0", printed
            # Both tried clone3 first (ENOSYS), then made the thread and the process with clone.
            counts = (int(clone3_enosys), int(threads), int(vforks))
            assert counts[0] >= 2 and counts[1] >= 1 and counts[2] >= 1, counts
        [info, _] = ws.runtime.backends()
        assert _BY["older-bwrap"] in info.isolation
    async with computer.Workspace(path, backends=[shell]) as ws:
        assert await ws.fs.read_text("/workspace/repo/f") == "hi\n"
        log = await (
            await ws.runtime.exec("cd repo && git log --format=%s && git fsck --no-progress")
        ).result()
        assert log.status == "completed" and log.stdout == "second\nfirst\n", log
