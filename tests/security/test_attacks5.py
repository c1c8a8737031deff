"""Attacks of a hostile agent or program through surfaces the other files leave (session 63's hunt).

Virtual machine sockets: see ``test_no_virtual_machine_socket_can_be_made``.

Terminal codes through the CLI: a link's target and a background process's command line are whatever
a program chose. `computer ls`, `ps` and `log` escape such text (`computer.cli.display.plain_text`);
`computer shell`'s error lines and the note naming the processes that end with a session printed it
raw: ``ESC [2J`` cleared the user's terminal, and a newline wrote a line of its own into an MCP host's
log.
"""

from __future__ import annotations

import asyncio
import errno
import io
import platform
import re
from pathlib import Path

import pytest
from rich.console import Console

import computer
from computer.cli._ps import ending_processes
from computer.cli._shell import WorkspaceShell
from computer.runtime import PythonBackend, ShellBackend, _seccomp
from computer.runtime._bwrap import bwrap_works
from computer.runtime._fd_budget import host_file_max, in_force
from computer.runtime._limits import SandboxLimits
from computer.runtime._users import running_as_root

CLEAR = "\x1b[2J"


def _terminal() -> tuple[Console, io.StringIO]:
    """A console as a user's terminal has it (colours on), writing to a buffer."""
    out = io.StringIO()
    return Console(file=out, width=200, force_terminal=True, color_system="standard"), out


async def test_a_shell_error_naming_a_links_target_writes_no_terminal_code(ws: computer.Workspace) -> None:
    await ws.fs.symlink(f"/nowhere{CLEAR}\nforged line", "/workspace/link")
    console, _ = _terminal()
    errors, said = _terminal()
    shell = WorkspaceShell(ws, console, errors=errors)
    for line in ("cat /workspace/link", "cd /workspace/link"):
        assert await shell.run_line(line)
        assert shell.failed
    text = re.sub(r"\x1b\[[0-9;]*m", "", said.getvalue())  # the console's own colours
    assert "\x1b" not in text and "\nforged line" not in text, text
    assert "nowhere\\x1b[2J\\nforged line" in text, text


async def test_the_note_of_processes_ending_with_a_session_writes_no_terminal_code(
    ws: computer.Workspace,
) -> None:
    started = await ws.runtime.exec(
        f"(exec -a $'spoof{CLEAR}\\nforged line' sleep 300) & echo ok", backend="shell"
    )
    result = await started.result()
    assert result.stdout == "ok\n", result
    note = None
    for _ in range(100):  # bounded: the background process shows in the listing within 10 s
        note = await ending_processes(ws)
        if note is not None and "spoof" in note:
            break
        await asyncio.sleep(0.1)
    assert note is not None and "spoof" in note, note
    assert CLEAR not in note and "\n" not in note, note
    assert "spoof\\x1b[2J\\nforged line" in note, note
    await ws.runtime.end_sandbox("shell")


# ``socket(AF_VSOCK, SOCK_STREAM, 0)`` natively, with the family's high bits set (the kernel reads an
# ``int``), through the x32 ABI, and through i386's direct ``socket`` call (``int 0x80``, number 359, in
# a child: a kernel without ia32 emulation answers SIGSEGV); then an AF_UNIX socket, which still works.
_VSOCK = """
import ctypes, errno, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(number, family):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(number), ctypes.c_long(family), 1, 0)
    return errno.errorcode.get(ctypes.get_errno(), "?") if rc == -1 else "created"
print("native", call(41, 40))
print("high-bits", call(41, 0x1_0000_0028))
print("x32", call(0x40000000 | 41, 40))
code = '''
import ctypes, mmap
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes.fromhex("53" "b867010000" "bb28000000" "b901000000" "31d2" "cd80" "5b" "c3"))
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))())
'''
run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print("i386", run.stdout.strip() if run.returncode == 0 else "no-ia32")
print("unix", call(41, 1))
"""


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not bwrap_works() or _seccomp.compiled().program is None,
    reason="bubblewrap and libseccomp on x86_64 (its numbers and ABIs)",
)
@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_no_virtual_machine_socket_can_be_made(live: bool) -> None:
    """A VM's vsock address space is in no network namespace: a sandbox with no network made an
    ``AF_VSOCK`` socket and bound a port of the VM (the host then got ``EADDRINUSE``), and could
    connect to the hypervisor's services. Refused as Docker's profile does (every ABI, EPERM)."""
    async with computer.Workspace(backends=[PythonBackend(live=live)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        result = await (await workspace.runtime.exec(_VSOCK, backend="python")).result()
        [info] = workspace.runtime.backends()
    assert result.status == "completed", result
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines.pop("unix") == "created", result
    i386 = lines.pop("i386")
    assert lines == {"native": "EPERM", "high-bits": "EPERM", "x32": "EPERM"}, result
    assert i386 in ("-1", "no-ia32"), result  # -EPERM
    assert "AF_VSOCK" in info.isolation


# Opens pseudo-terminals until the sandbox is refused one or holds ``PTY_PROBE``: how many it got.
PTY_PROBE = 1100
_PTYS = f"""
import os
fds = []
try:
    while len(fds) < {PTY_PROBE}:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
except OSError as exc:
    print("refused", exc.errno)
print("opened", len(fds))
"""


# The pseudo-terminals a sandbox may hold: ``SandboxLimits.max_ptys``'s default (``_ptys``: an instance
# of its own needs a root host process).
MAX_PTYS = 64
_CAPPED = bwrap_works() and running_as_root()


@pytest.mark.skipif(not _CAPPED, reason="a devpts instance of the sandbox's own needs root and bubblewrap")
async def test_one_sandbox_cannot_hold_the_hosts_pseudo_terminals() -> None:
    """Pseudo-terminals are one count for the whole host (kernel.pty.max less kernel.pty.reserve,
    4096 - 1024): bubblewrap's devpts instance had no max=, one program held all 3,071 and every
    other workspace's open of /dev/ptmx failed ENOSPC. Each sandbox now has an instance of its own
    with at most ``max_ptys`` (``_ptys``), and another workspace still gets one meanwhile."""
    holder = computer.Workspace(backends=[PythonBackend(live=True)])
    other = computer.Workspace(backends=[ShellBackend(live=False)])
    try:
        await holder.fs.mkdir("/workspace")
        await other.fs.mkdir("/workspace")
        result = await (await holder.runtime.exec(_PTYS, backend="python", timeout=60)).result()
        assert result.status == "completed", result
        assert result.stdout == f"refused {errno.ENOSPC}\nopened {MAX_PTYS}\n", result.stdout
        [info] = holder.runtime.backends()
        assert f"at most {MAX_PTYS} pseudo-terminals" in info.isolation
        # a background process of the live sandbox holds its whole cap while another workspace runs
        held = await (await holder.runtime.exec(_HOLD, backend="python", timeout=60)).result()
        assert held.stdout.startswith(f"held {MAX_PTYS}"), held
        got = await (
            await other.runtime.exec("script -qc tty /dev/null", backend="shell", timeout=60)
        ).result()
        assert got.status == "completed" and got.stdout.strip() == "/dev/pts/0", got
    finally:
        await holder.close()
        await other.close()
    mounts = await asyncio.to_thread(Path("/proc/self/mountinfo").read_text)
    assert f"max={MAX_PTYS}" not in mounts, mounts  # the instances were the sandboxes' alone


# A background process (a live sandbox's) holding as many pseudo-terminals as it gets, for good.
_HOLD = """
import os, subprocess, sys
code = "import os\\nfds = []\\ntry:\\n    while True: fds.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))\\nexcept OSError: pass\\nprint(len(fds), flush=True)\\nos.close(1)\\nimport time; time.sleep(600)"
p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
print("held", p.stdout.readline().decode().strip())
"""

_TERMINALS = (
    "script -qc tty /dev/null; python3 -c 'import os, pty; pid, fd = pty.fork(); "
    "print(os.read(fd, 100).decode().strip() if pid else os.ttyname(0))'; "
    "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'"
)


@pytest.mark.skipif(not _CAPPED, reason="a devpts instance of the sandbox's own needs root and bubblewrap")
@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_pseudo_terminals_work_in_a_sandbox_of_capped_terminals(live: bool) -> None:
    """script, python's pty.fork and openpty (what ssh -t, expect and tmux use) get a terminal of the
    sandbox's own devpts instance, named as usual."""
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        result = await (await workspace.runtime.exec(_TERMINALS, backend="shell", timeout=60)).result()
    assert result.status == "completed", result
    assert result.stdout.split() == ["/dev/pts/0", "/dev/pts/0", "/dev/pts/0"], result


# io_setup(65536, &ctx) (x86_64 206, aarch64 0): EPERM filtered; without the filter a context of all
# of the host's AIO events, or EAGAIN when another program holds them.
_AIO = """
import ctypes, errno, platform
libc = ctypes.CDLL(None, use_errno=True)
ctx = ctypes.c_ulong(0)
rc = libc.syscall(ctypes.c_long({"x86_64": 206, "aarch64": 0}[platform.machine()]), 65536, ctypes.byref(ctx))
print(errno.errorcode.get(ctypes.get_errno(), "?") if rc == -1 else "context")
"""


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64")
    or not bwrap_works()
    or _seccomp.compiled().program is None,
    reason="bubblewrap and libseccomp on x86_64 or aarch64 (their numbers)",
)
@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_no_native_aio_context_can_be_made(live: bool) -> None:
    """Native AIO contexts are one count for the whole host (``fs.aio-max-nr``, 65,536 events), in no
    namespace nor cgroup: one ``io_setup(65536)`` in a sandbox took all of them, and every other
    workspace's ``io_setup`` (the host's own databases' too) failed ``EAGAIN`` while it was held."""
    async with computer.Workspace(backends=[PythonBackend(live=live)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        result = await (await workspace.runtime.exec(_AIO, backend="python")).result()
    assert result.status == "completed", result
    assert result.stdout.strip() == "EPERM", result


# Opens /dev/null in forked children, each raising its soft descriptor limit to its hard one (as node
# and bundlers do) and opening up to it, until the sandbox holds an eighth of the host's file table
# (``fs.file-max``: one count for every unprivileged process of the host, root's exempt) or is
# refused: a fork past the process cap (EAGAIN) or a child short of its share (EMFILE). With
# ``HOLD`` in its environment, says so in /workspace/held and keeps them until /workspace/release
# appears (at most 60 s).
_FILES = """
import errno, os, resource, sys, time
target = int(open("/proc/sys/fs/file-nr").read().split()[2]) // 8
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
release_r, release_w = os.pipe()
counts_r, counts_w = os.pipe()
total, kids, refused = 0, [], None
while total < target and refused is None:
    want = min(hard - 16, target - total)
    try:
        pid = os.fork()
    except OSError as exc:
        refused = errno.errorcode[exc.errno]
        break
    if pid == 0:
        os.close(release_w)  # the parent's copy alone holds the children
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        n, why = 0, 0
        try:
            while n < want:
                os.open("/dev/null", os.O_RDONLY)
                n += 1
        except OSError as exc:
            why = exc.errno
        os.write(counts_w, n.to_bytes(4, "little") + why.to_bytes(4, "little"))
        os.read(release_r, 1)  # held until the parent counted every child
        os._exit(0)
    kids.append(pid)
    got = os.read(counts_r, 8)
    total += int.from_bytes(got[:4], "little")
    if int.from_bytes(got[:4], "little") < want:
        refused = errno.errorcode.get(int.from_bytes(got[4:], "little"), "short")
if os.environ.get("HOLD"):
    open("/workspace/held", "w").write(str(total))
    for _ in range(600):
        if os.path.exists("/workspace/release"):
            break
        time.sleep(0.1)
os.close(release_w)
for pid in kids:
    os.waitpid(pid, 0)
print("held", total, "of", target, "in", len(kids), "processes of", hard, "refused", refused)
"""


def _skip_unless_the_budget_is_under_an_eighth() -> None:
    """The descriptor budget's floors (``_fd_budget``: 256 processes x 1,024) hold more than an eighth
    of a host's table below ~2.1 million (~21 GB of RAM): a decision, said rather than failed."""
    file_max = host_file_max()
    held = in_force(SandboxLimits()).max_open_files
    if file_max is None or held is None or held >= file_max // 8:
        pytest.skip(f"this host's table ({file_max}) is too small for the budget's floors ({held})")


async def test_one_sandbox_cannot_hold_an_eighth_of_the_hosts_open_files() -> None:
    """Before s64 one run held 500,000 of this host's 2,466,239 (272 processes x 20,000 descriptors,
    the host's own limit); the descriptor budget (``_fd_budget``) gives a sandbox 256 x 1,024 here."""
    _skip_unless_the_budget_is_under_an_eighth()
    await _held_below_an_eighth(_FILES)


async def _held_below_an_eighth(source: str) -> None:
    """Runs ``source`` (``_FILES``, ``_MAPPED``) in a sandbox of its own: refused before an eighth."""
    async with computer.Workspace(backends=[PythonBackend(live=False)]) as workspace:
        await workspace.fs.mkdir("/workspace")
        result = await (await workspace.runtime.exec(source, backend="python", timeout=120)).result()
    assert result.status == "completed", result
    words = result.stdout.split()
    assert words[-1] != "None" and int(words[1]) < int(words[3]), result.stdout


# Opens 900 files (its soft limit raised to the hard one first): what another workspace's program does.
_THOUSANDS = (
    "python3 -c 'import os, resource; h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (h, h)); "
    'print(len([os.open("/dev/null", os.O_RDONLY) for _ in range(900)]))\''
)


async def test_a_sandbox_at_its_descriptor_budget_leaves_other_workspaces_their_files() -> None:
    """While one live sandbox holds every descriptor its budget gives (``_fd_budget``), another
    workspace's program opens 900 files, and the holder's workspace and sandbox keep working."""
    _skip_unless_the_budget_is_under_an_eighth()
    holder = computer.Workspace(backends=[ShellBackend(live=True)])
    other = computer.Workspace(backends=[ShellBackend(live=False)])
    try:
        await holder.fs.mkdir("/workspace")
        await other.fs.mkdir("/workspace")
        await holder.fs.write_file("/workspace/files.py", _FILES.encode())
        handle = await holder.runtime.exec("HOLD=1 python3 files.py", timeout=120)
        run = asyncio.ensure_future(handle.result())
        for _ in range(1200):  # the live sandbox's sync brings /workspace/held within ~100 ms
            if await holder.fs.exists("/workspace/held") or run.done():
                break
            await asyncio.sleep(0.1)
        assert await holder.fs.exists("/workspace/held"), await run
        got = await (await other.runtime.exec(_THOUSANDS, timeout=60)).result()
        assert (got.status, got.stdout) == ("completed", "900\n"), got
        await holder.fs.write_file("/workspace/note", b"written meanwhile")
        assert await holder.fs.read_file("/workspace/note") == b"written meanwhile"
        await holder.fs.write_file("/workspace/release", b"")
        result = await run
        assert result.status == "completed", result
        words = result.stdout.split()
        assert words[-1] in ("EMFILE", "EAGAIN") and int(words[1]) < int(words[3]), result.stdout
        again = await (await holder.runtime.exec(_THOUSANDS, timeout=60)).result()
        assert (again.status, again.stdout) == ("completed", "900\n"), again
    finally:
        await holder.close()
        await other.close()


# Maps one small file again and again, closing each descriptor (a mapping keeps its file open), in
# forked children of up to ``vm.max_map_count`` mappings each, until the sandbox holds an eighth of the
# host's file table or is refused.
_MAPPED = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
target = int(open("/proc/sys/fs/file-nr").read().split()[2]) // 8
each = int(open("/proc/sys/vm/max_map_count").read()) - 1000
open("/tmp/page", "wb").write(b"x" * 4096)
release_r, release_w = os.pipe()
counts_r, counts_w = os.pipe()
total, kids, refused = 0, [], None
while total < target and refused is None:
    want = min(each, target - total)
    try:
        pid = os.fork()
    except OSError as exc:
        refused = exc.errno
        break
    if pid == 0:
        os.close(release_w)
        n = 0
        while n < want:
            try:
                fd = os.open("/tmp/page", os.O_RDONLY)
            except OSError:
                break
            mapped = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            os.close(fd)
            if mapped in (None, ctypes.c_void_p(-1).value):
                break
            n += 1
        os.write(counts_w, n.to_bytes(4, "little"))
        os.read(release_r, 1)
        os._exit(0)
    kids.append(pid)
    got = int.from_bytes(os.read(counts_r, 4), "little")
    total += got
    if got < want:
        refused = "short"
os.close(release_w)
for pid in kids:
    os.waitpid(pid, 0)
print("held", total, "of", target, "in", len(kids), "processes, refused", refused)
"""


@pytest.mark.xfail(
    strict=True,
    reason=(
        "a mapping keeps its file open after its descriptor is closed, counted in fs.file-max and in no "
        "descriptor limit: up to vm.max_map_count (65,530) a process, so the descriptor budget "
        "(_fd_budget: 256 processes x 1,024 descriptors) does not bound them; only the memory group "
        "(~500 bytes of kernel memory a mapped file: 1 GiB holds ~2 million) does. A bound needs a "
        "count of a sandbox's open files (no cgroup v1 or v2 controller has one) or a smaller memory group"
    ),
)
async def test_one_sandbox_cannot_hold_an_eighth_of_the_hosts_open_files_through_mappings() -> None:
    await _held_below_an_eighth(_MAPPED)
