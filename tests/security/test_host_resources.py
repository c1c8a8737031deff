"""What a program in one workspace's sandbox can take of what the host shares with every other
workspace: the scratch tmpfs (its memory and inodes) that warm mirrors keep after a run."""

from __future__ import annotations

import contextlib
import errno
import os
import platform
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import MirrorPool, ShellBackend, _seccomp
from computer.runtime._bwrap import bwrap_works
from computer.runtime._mirror import Mirror
from computer.runtime._mirror_pool import ScratchBudget


async def test_a_warm_mirror_of_many_empty_entries_counts_against_the_scratch_budget(tmp_path: Path) -> None:
    """An empty file or directory costs no byte but a tmpfs inode and dentry on the host (~1 KB of
    kernel memory) and a row of the mirror's state: a mirror of a million of them counted 0 bytes and
    stayed warm for good. The budget now counts entries too: one alone over it is not kept."""
    budget = ScratchBudget(1 << 30)
    budget.entries = 1000
    shell = ShellBackend(live=False, mirror_pool=lambda base, root: MirrorPool(base, root, budget=budget))
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        small = await (await ws.runtime.exec("mkdir small && touch small/a small/b")).result()
        assert small.status == "completed", small.stderr
        assert budget.held() == 0 and len(shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id)) == 1
        made = await (
            await ws.runtime.exec("mkdir d && cd d && seq 3000 | xargs touch && mkdir -p x/y/z")
        ).result()
        assert made.status == "completed", made.stderr
        assert shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id) == [], "3,000 empty entries kept"
        assert len(await ws.fs.readdir("/workspace/d")) == 3001
        again = await (await ws.runtime.exec("ls d | wc -l; test -d d/x/y/z && echo deep")).result()
        assert again.stdout.split() == ["3001", "deep"], again.stdout  # a full push brought it back


_HOLDER = """
import select, socket, time
held = []
for _ in range(300):
    c = socket.socket(socket.AF_UNIX)
    c.connect("/run/computer/assets.sock")
    held.append(c)
ended = set()
deadline = time.monotonic() + 20
while len(ended) < len(held) - 16 and time.monotonic() < deadline:
    for c in select.select([c for c in held if c not in ended], [], [], 1)[0]:
        if c.recv(1) == b"":
            ended.add(c)
print("held", len(held), "ended", len(ended), flush=True)
time.sleep(60)  # holds them until killed
"""


def _host_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("live", [True, False])
async def test_connections_held_to_the_assets_bridge_take_no_host_descriptors(
    tmp_path: Path, live: bool
) -> None:
    """Each connection to a run's ``assets`` socket was a descriptor of the host process, which every
    workspace it serves shares, held while the program said nothing: 19,990 of them took every
    descriptor of a host under ``ulimit -n 20000``. Past a few per bridge, the host now closes them
    as they come."""
    shell = ShellBackend(live=live)
    if live and not shell.live:
        pytest.skip("no live sandboxes here (cgroup freezer)")
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        await ws.fs.write_file("/workspace/hold.py", _HOLDER.encode())
        before = _host_descriptors()
        handle = await ws.runtime.exec("python3 hold.py")
        seen = ""
        async for snapshot in handle:
            seen = snapshot.stdout
            if "held" in seen:
                break
        during = _host_descriptors()
        await handle.kill()
        assert seen.split()[:2] == ["held", "300"], seen
        assert int(seen.split()[3]) >= 300 - 16, seen
        assert during - before < 100, f"{during - before} host descriptors for 300 connections"


# Writes two files in turn as fast as it can (inotify merges only an event equal to the last one
# queued, so each write is an event): ~1-2.5 million a second here, for ``seconds``.
_FLOOD = """
import os, sys, time
fa = os.open("a", os.O_WRONLY | os.O_CREAT, 0o644)
fb = os.open("b", os.O_WRONLY | os.O_CREAT, 0o644)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(1000):
        os.pwrite(fa, b"x", 0)
        os.pwrite(fb, b"y", 0)
"""


async def test_an_event_flood_in_one_live_sandbox_leaves_the_other_mirrors_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every mirror of a process shares one inotify queue (16,384 events): a program writing two
    files in turn overflowed it 52 times in 4 s, and each overflow broke every mirror's watch, so each
    live sandbox of the process walked its whole tree and watched it anew. Near an overflow the watch
    holding the most events now gives its watches back (its mirror walked for a while instead)."""
    shell = ShellBackend()
    if not shell.live:
        pytest.skip("no live sandboxes here (cgroup freezer)")
    walked: list[Path] = []
    scan = Mirror.scan

    def recorded(mirror: Mirror, *args: object, **kwargs: object) -> object:
        walked.append(mirror.directory)
        return scan(mirror, *args, **kwargs)  # type: ignore[arg-type]

    async with (
        computer.Workspace(str(tmp_path / "a.sqlite"), backends=[shell]) as flooder,
        computer.Workspace(str(tmp_path / "v.sqlite"), backends=[shell]) as victim,
    ):
        for ws in (flooder, victim):
            await ws.fs.mkdir("/workspace/src", recursive=True)
        for i in range(50):
            await victim.fs.write_file(f"/workspace/src/f{i}", b"x")
        started = await (await victim.runtime.exec("(sleep 60 &) ; ls src | wc -l")).result()
        assert started.stdout.strip() == "50"
        await flooder.fs.write_file("/workspace/flood.py", _FLOOD.encode())
        monkeypatch.setattr(Mirror, "scan", recorded)
        flood = await (await flooder.runtime.exec("python3 flood.py 4")).result()
        assert flood.status == "completed", flood.stderr
        after = await (await victim.runtime.exec("echo more > src/g; ls src | wc -l")).result()
        monkeypatch.undo()
        assert after.stdout.strip() == "51" and await victim.fs.read_text("/workspace/src/g") == "more\n"
        assert sorted(e.name for e in await flooder.fs.readdir("/workspace")) == ["a", "b", "flood.py", "src"]
        flooded = {d for d in walked if (d / "flood.py").exists()}
        others = [d for d in walked if d not in flooded]
        assert len(others) <= 1, f"the other workspace's mirror was walked {len(others)} times"


async def test_a_sparse_file_counts_what_it_holds_against_the_scratch_budget(tmp_path: Path) -> None:
    """A warm mirror counted its files' sizes: a sparse ``truncate -s 12M`` (no byte held) counted
    12 MB and pushed another workspace's warm mirror (real bytes) out of the process's budget."""
    command = "truncate -s 12M disk.img && du -k disk.img"
    async with _beside_a_warm_mirror(tmp_path, command) as (sparse, budget, made):
        assert made.stdout.split()[0] == "0", made.stdout
        assert budget.held() < 7 << 20
        assert (await sparse.fs.stat("/workspace/disk.img")).size == 12 << 20


@contextlib.asynccontextmanager
async def _beside_a_warm_mirror(
    tmp_path: Path, command: str
) -> AsyncIterator[tuple[computer.Workspace, ScratchBudget, Any]]:
    """A warm mirror of 6 MB of real bytes (another workspace's), then ``command`` run in a workspace
    of the same backend and a 16 MB scratch budget; both warm mirrors are still held after it (neither
    pushed the other out). The command's workspace and the budget, and its result."""
    budget = ScratchBudget(16 << 20)
    shell = ShellBackend(live=False, mirror_pool=lambda base, root: MirrorPool(base, root, budget=budget))
    async with (
        computer.Workspace(str(tmp_path / "a.sqlite"), backends=[shell]) as ws,
        computer.Workspace(str(tmp_path / "b.sqlite"), backends=[shell]) as other,
    ):
        for each in (ws, other):
            await each.fs.mkdir("/workspace", recursive=True)
        real = await (await other.runtime.exec("head -c 6000000 /dev/urandom > data.bin")).result()
        assert real.status == "completed", real.stderr
        assert len(shell.mirrors.idle_mirrors(other.runtime.context.workspace_id)) == 1
        made = await (await ws.runtime.exec(command)).result()
        assert made.status == "completed", made.stderr
        assert len(shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id)) == 1
        assert len(shell.mirrors.idle_mirrors(other.runtime.context.workspace_id)) == 1, "pushed out"
        yield ws, budget, made


async def test_a_warm_mirror_of_long_symlinks_counts_their_pages_against_the_scratch_budget(
    tmp_path: Path,
) -> None:
    """A symlink's target of 128 bytes or more takes a page of tmpfs (4 KiB of the host's memory): a
    warm mirror of 60,000 links of 4,000-byte targets held ~400 MB and counted 0 bytes (only files'
    sizes counted; its 60,000 entries ~60 MB of the entry budget)."""
    budget = ScratchBudget(4 << 20)
    shell = ShellBackend(live=False, mirror_pool=lambda base, root: MirrorPool(base, root, budget=budget))
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        short = await (
            await ws.runtime.exec("mkdir s && cd s && for i in $(seq 100); do ln -s t $i; done")
        ).result()
        assert short.status == "completed", short.stderr
        assert len(shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id)) == 1
        made = await (
            await ws.runtime.exec(
                "mkdir d && cd d && python3 -c 'import os\nfor i in range(2000): os.symlink(\"x\" * 4000, str(i))'"
            )
        ).result()
        assert made.status == "completed", made.stderr
        assert shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id) == [], "8 MB of link pages kept"
        assert len(await ws.fs.readdir("/workspace/d")) == 2000


async def test_a_file_of_many_names_counts_once_against_the_scratch_budget(tmp_path: Path) -> None:
    """A warm mirror counted each name of a hard-linked file as a file of its own: 1 MB linked under
    12 names (1 MB of the host) counted 12 MB and pushed another workspace's warm mirror (6 MB of
    real bytes) out of the process's budget, as a sparse file did before (their next runs push in
    full)."""
    command = "head -c 1000000 /dev/urandom > f && for i in $(seq 11); do ln f l$i; done"
    async with _beside_a_warm_mirror(tmp_path, command) as (_, budget, _made):
        assert budget.held() < 8 << 20


# Sets 1,000 bytes of ``user.`` attributes on a file, a directory and the sandbox's /tmp, through
# ``setxattr`` and through ``setxattrat`` by number (Linux 6.13; 463 on x86_64 and aarch64, unknown to
# libseccomp before 2.6), and prints what each answered.
_XATTRS = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
value = ctypes.create_string_buffer(b"v" * 1000)
class Args(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32)]
def at(path):
    args = Args(ctypes.addressof(value), 1000, 0)
    done = libc.syscall(ctypes.c_long(463), ctypes.c_int(-100), path.encode(), ctypes.c_uint(0),
                        b"user.b", ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    return "ok" if done == 0 else errno.errorcode[ctypes.get_errno()]
def plain(path):
    try:
        os.setxattr(path, "user.a", b"v" * 1000)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
os.mkdir("d")
open("f", "w").close()
print(*[call(p) for call in (plain, at) for p in ("f", "d", "/tmp")])
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="setxattrat's number")
@pytest.mark.parametrize("live", [False, True])
async def test_a_program_cannot_hang_memory_on_its_mirror_through_extended_attributes(
    tmp_path: Path, live: bool
) -> None:
    """The workspace keeps no extended attributes, but a program could set them in its mirror: on
    tmpfs (6.6+) ``user.`` attributes have no size limit per file, each run's charged to its own
    memory group and then kept by the warm mirror, which the scratch budget counts by file sizes and
    entries: four runs of 190 MB each under a 256 MiB limit held 751 MB of the host's memory in 21
    entries of 371 bytes, after the workspace closed too. Setting one now fails as on a filesystem
    without them (``EOPNOTSUPP``), ``setxattrat`` (which libseccomp 2.5 cannot name) too."""
    if not _seccomp.compiled().program or not bwrap_works():
        pytest.skip("no seccomp filter here")
    shell = ShellBackend(live=live)
    if live and not shell.live:
        pytest.skip("no live sandboxes here (cgroup freezer)")
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        await ws.fs.write_file("/workspace/x.py", _XATTRS.encode())
        result = await (await ws.runtime.exec("python3 x.py && sleep 0.2")).result()
        assert result.status == "completed", result.stderr
        assert result.stdout.split() == [errno.errorcode[errno.EOPNOTSUPP]] * 6, result.stdout
        held = [
            path
            for mirror in shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id)
            for path in (mirror.directory / "f", mirror.directory / "d")
            if path.exists() and os.listxattr(path, follow_symlinks=False)
        ]
        assert held == []


@pytest.mark.parametrize("live", [False, True])
async def test_a_program_cannot_hang_memory_on_its_mirror_by_preallocating_past_a_files_end(
    tmp_path: Path, live: bool
) -> None:
    """``fallocate --keep-size`` gives a file tmpfs pages past its end (the host's memory) while its
    size stays 0: each run's within its own memory group, then kept by the warm mirror, which the
    scratch budget counts by sizes (and a sparse file's holes): four runs of 200 MB held 821 MB of the
    host in 5 entries counted as 371 bytes, after the workspace closed too. Preallocating past the end
    now fails as on a filesystem that cannot (``EOPNOTSUPP``); an allocation that grows the file (what
    ``posix_fallocate`` asks) and punching holes stay."""
    if not _seccomp.compiled().program or not bwrap_works():
        pytest.skip("no seccomp filter here")
    shell = ShellBackend(live=live)
    if live and not shell.live:
        pytest.skip("no live sandboxes here (cgroup freezer)")
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        result = await (
            await ws.runtime.exec(
                "touch f && fallocate -n -l 8M f; fallocate -n -z -l 8M f;"
                " fallocate -l 1M g && fallocate -p -o 0 -l 1M g && du -k f g"
            )
        ).result()
        assert result.status == "completed", result.stderr
        assert result.stderr.count("mode is unsupported") == 2, result.stderr  # util-linux on EOPNOTSUPP
        assert result.stdout.split() == ["0", "f", "0", "g"], result.stdout
        assert (await ws.fs.stat("/workspace/g")).size == 1 << 20
        for mirror in shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id):
            assert os.lstat(mirror.directory / "f").st_blocks == 0


# POSIX message queues of 80 KiB (10 messages of 8 KiB) opened until the kernel refuses one (at most
# 100), held (``fill``: then queues of one 1 KiB message, at most 1,000 in all); ``probe`` opens one
# of 80 KiB and says whether it could.
_MQUEUES = """
import ctypes, os, sys, time
rt = ctypes.CDLL("librt.so.1", use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("current", ctypes.c_long), ("reserved", ctypes.c_long * 4)]
def queue(name, count=10, size=8192):
    attr = Attr(0, count, size, 0)
    return rt.mq_open(name.encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr)) >= 0
if sys.argv[1] == "probe":
    print("ok" if queue("/probe") else os.strerror(ctypes.get_errno()))
else:
    held = 0
    while held < 100 and queue("/q%d" % held):
        held += 1
    while sys.argv[1] == "fill" and held < 1000 and queue("/q%d" % held, 1, 1024):  # the rest, too
        held += 1
    print("held", held, flush=True)
    time.sleep(60)
"""


async def test_a_program_holding_its_message_queue_bytes_leaves_other_workspaces_theirs(
    tmp_path: Path,
) -> None:
    """Every sandbox of the host's sandbox uid shares the ceiling the user namespaces' creator had:
    a program holding its own 800 KiB of POSIX message queues made every other workspace's
    ``mq_open`` fail (EMFILE) until it was killed. Each sandbox now holds at most ``MSGQUEUE_CAP``
    (two such queues) of them (was a strict xfail)."""
    seen, probe = await _hold_and_probe(
        tmp_path, {"mq.py": _MQUEUES}, "python3 mq.py hold", "python3 mq.py probe"
    )
    assert 0 < int(seen.split()[1]) < 100, seen  # the program's own limit still binds
    assert probe == "ok", probe


# Real-time signals queued to itself (blocked) until the kernel refuses one (at most 200,000), held;
# ``probe`` queues one and says whether it could.
_SIGNALS = """
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
def queued():
    return libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0)) == 0
if sys.argv[1] == "probe":
    print("ok" if queued() else os.strerror(ctypes.get_errno()))
else:
    held = 0
    while held < 200000 and queued():
        held += 1
    print("held", held, flush=True)
    time.sleep(60)
"""


async def test_a_program_holding_queued_signals_leaves_other_workspaces_theirs(tmp_path: Path) -> None:
    """Queued signals are counted as message queue bytes are (per user namespace, then for every
    sandbox of the host uid against bubblewrap's limit, 96,367 here): a program that queued them all
    made another workspace's ``sigqueue``, ``timer_create`` (coreutils ``timeout`` warned) and
    real-time ``kill`` fail (EAGAIN) until it ended. Each sandbox now holds at most ``SIGPENDING_CAP``."""
    seen, probe = await _hold_and_probe(
        tmp_path, {"sig.py": _SIGNALS}, "python3 sig.py hold", "python3 sig.py probe"
    )
    assert 0 < int(seen.split()[1]) < 200000, seen  # the program's own limit binds
    assert probe == "ok", probe


async def test_programs_of_four_workspaces_holding_message_queue_bytes_leave_a_fifth_its_own(
    tmp_path: Path,
) -> None:
    """The kernel counts POSIX message queue bytes (and queued signals) of every user namespace of one
    host uid against the rlimit its creator had (bubblewrap's: this process's, 800 KiB): with each
    sandbox capped at ``MSGQUEUE_CAP`` (200 KiB), 4 sandboxes took them all and a fifth's ``mq_open``
    failed. Each sandbox now runs as a host uid of its own (``_uid_lease``): each counts alone (was a
    strict xfail)."""
    shell = ShellBackend(live=False)
    async with contextlib.AsyncExitStack() as stack:
        spaces = [
            await stack.enter_async_context(
                computer.Workspace(str(tmp_path / f"{i}.sqlite"), backends=[shell])
            )
            for i in range(5)
        ]
        for ws in spaces:
            await ws.fs.mkdir("/workspace", recursive=True)
            await ws.fs.write_file("/workspace/mq.py", _MQUEUES.encode())
        handles = []
        try:
            for hog in spaces[:4]:
                handles.append(handle := await hog.runtime.exec("python3 mq.py fill"))
                await _held(handle)
            result = await (await spaces[4].runtime.exec("python3 mq.py probe")).result()
        finally:
            for handle in handles:
                await handle.kill()
    assert result.stdout.strip() == "ok", result.stdout


async def _held(handle: Any) -> str:
    """Follow a run's output until it printed ``held ...`` (what it printed by then)."""
    seen = ""
    async for snapshot in handle:
        seen = snapshot.stdout
        if "held" in seen:
            break
    assert seen.startswith("held"), seen
    return seen


async def _hold_and_probe(tmp_path: Path, files: dict[str, str], hold: str, probe: str) -> tuple[str, str]:
    """Run ``hold`` in one workspace until it prints ``held ...`` (what it printed), then ``probe`` in
    another workspace of the same backend while it holds: (the hold's output, the probe's stdout)."""
    shell = ShellBackend(live=False)
    async with (
        computer.Workspace(str(tmp_path / "a.sqlite"), backends=[shell]) as hog,
        computer.Workspace(str(tmp_path / "v.sqlite"), backends=[shell]) as victim,
    ):
        for ws in (hog, victim):
            await ws.fs.mkdir("/workspace", recursive=True)
            for name, text in files.items():
                await ws.fs.write_file(f"/workspace/{name}", text.encode())
        handle = await hog.runtime.exec(hold)
        try:
            seen = await _held(handle)
            result = await (await victim.runtime.exec(probe)).result()
        finally:
            await handle.kill()
        return seen, result.stdout.strip()


# Takes inotify instances until the kernel refuses one (at most 1,024), says how many, and holds them.
_INOTIFY_HOG = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 1024:
    fd = libc.inotify_init()
    if fd < 0:
        break
    held.append(fd)
print("held", len(held), flush=True)
time.sleep(60)
"""
_INOTIFY_PROBE = (
    "python3 -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True);"
    ' print("ok" if l.inotify_init() >= 0 else os.strerror(ctypes.get_errno()))\''
)


async def test_a_program_holding_every_inotify_instance_leaves_other_workspaces_theirs(
    tmp_path: Path,
) -> None:
    """``tail -F``, file watchers of dev servers and test runners: a program in one workspace took the
    128 inotify instances of the sandboxes' host user (and all 192,540 watches), and another
    workspace's ``inotify_init`` failed with EMFILE until it was killed: the kernel's inotify limits
    are per host uid (``fs.inotify.max_user_instances``). Each sandbox now runs as a uid of its own
    (``_uid_lease``; was a strict xfail)."""
    _, probe = await _hold_and_probe(tmp_path, {"hog.py": _INOTIFY_HOG}, "python3 hog.py", _INOTIFY_PROBE)
    assert probe == "ok", probe


async def test_a_write_through_one_name_of_a_file_with_many_names_commits_no_change_per_name(
    tmp_path: Path,
) -> None:
    """A program's own hard links cost the host at every sync of a change to the file: a background
    ``echo x >> f`` every 50 ms on a file of 20,000 names held the owner's event loop (every workspace
    of the process) ~60 % of the time, loop lag up to 190 ms, a neighbour's exec p90 6 → 117 ms, a
    kill of that run 2.6 s with 60,000 names. The workspace already shares the file between its names:
    a write through one name needs no change at the others."""
    shell = ShellBackend(live=False)
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        made = await (await ws.runtime.exec("echo a > f && for i in $(seq 500); do ln f l$i; done")).result()
        assert made.status == "completed", made.stderr
        before = ws.fs.rev
        wrote = await (await ws.runtime.exec("echo b >> f")).result()
        assert wrote.status == "completed", wrote.stderr
        assert await ws.fs.read_text("/workspace/l500") == "a\nb\n"  # every name holds the write
        changes = ws.fs.changes_since(before, "/workspace")
        assert changes.complete
        assert len(changes.changes) < 10, f"{len(changes.changes)} changes for one append"


# Empty pipes, held: each is charged its 16 pages to the host uid's pipe buffers whatever it holds.
# Three processes of 370 each (2,220 descriptors in all: past one process's share of the descriptor
# budget, ``_fd_budget``, 1,024 here); the pages are the uid's whichever process holds them.
_PIPES_HOG = """
import os, time
ready_r, ready_w = os.pipe()
for _ in range(2):
    if os.fork() == 0:
        held = [os.pipe() for _ in range(370)]
        os.write(ready_w, b"x")
        time.sleep(60)
        os._exit(0)
held = [os.pipe() for _ in range(370)]
got = b""
while len(got) < 2:
    got += os.read(ready_r, 2)
print("held", 3 * len(held), flush=True)
time.sleep(60)
"""
# A new pipe's size, then whether it may be grown to 1 MiB (``F_GETPIPE_SZ``, ``F_SETPIPE_SZ``).
_PIPES_PROBE = """
import fcntl, os
r, w = os.pipe()
size = fcntl.fcntl(w, 1032)
try:
    fcntl.fcntl(w, 1031, 1 << 20)
except OSError as exc:
    print(size, exc)
else:
    print("ok" if size == 65536 else size)
"""


async def test_a_program_holding_empty_pipes_leaves_other_workspaces_full_pipes(tmp_path: Path) -> None:
    """Pipelines of another workspace ran through 8 KiB pipes while one program held its pipes, and a
    program growing its pipe (``F_SETPIPE_SZ``) failed there: the kernel charges pipe buffers to the
    host uid (``fs.pipe-user-pages-soft``), and every sandbox was one. Each sandbox now runs as a uid
    of its own (``_uid_lease``; was a strict xfail)."""
    _, probe = await _hold_and_probe(
        tmp_path, {"hog.py": _PIPES_HOG, "probe.py": _PIPES_PROBE}, "python3 hog.py", "python3 probe.py"
    )
    assert probe == "ok", probe


# Descriptors sent over unix sockets and never received, until the kernel refuses more (held).
_IN_FLIGHT_HOG = """
import array, os, socket, time
fds = array.array("i", [os.open("/dev/null", os.O_RDONLY) for _ in range(253)])
held, sent = [], 0
while sent < 100000 and len(held) < 1000:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    held.append((a, b))
    try:
        while sent < 100000:
            a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            sent += len(fds)
    except BlockingIOError:
        continue
    except OSError:
        break
print("held", sent, flush=True)
time.sleep(60)
"""
_IN_FLIGHT_PROBE = (
    'python3 -c \'import socket; a, b = socket.socketpair(); socket.send_fds(a, [b"x"], [0]);'
    ' print("ok" if socket.recv_fds(b, 1, 1)[1] else "none")\' 2>&1 | tail -1'
)


async def test_a_program_holding_descriptors_in_flight_leaves_other_workspaces_theirs(tmp_path: Path) -> None:
    """The kernel counts descriptors in flight over unix sockets per host uid (``unix_inflight``,
    against the sender's ``RLIMIT_NOFILE``): a program sending 20,240 descriptors it never received
    made every other workspace's ``SCM_RIGHTS`` fail (ETOOMANYREFS: multiprocessing's forkserver,
    ``socket.send_fds``) until it ended, every sandbox being one host uid. Each sandbox now runs as a
    uid of its own (``_uid_lease``; was a strict xfail)."""
    _, probe = await _hold_and_probe(tmp_path, {"hog.py": _IN_FLIGHT_HOG}, "python3 hog.py", _IN_FLIGHT_PROBE)
    assert probe == "ok", probe


# Holds ``argv[2]`` copies of a read-only descriptor of the file ``argv[1]`` (one open file, no memory).
_DUPS = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
held = [os.dup(fd) for _ in range(int(sys.argv[2]))]
print("held", flush=True)
time.sleep(60)
"""


def test_the_readers_a_push_asks_for_cost_a_bounded_look_however_many_descriptors_are_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live sandbox's push of a file the workspace wrote asks which of its files the sandbox's
    processes hold for reading only (``read_only_held``): it looked at every descriptor of every
    process, two system calls each, and a program's 40 processes holding 19,000 copies of one
    descriptor (``dup``: no memory) made every such push ~20 s of a host core, the sandbox frozen
    through it. Now at most ``FDS_LOOKED`` descriptors in all, past which nothing is known (every file
    written in place, as before this look)."""
    import subprocess
    import sys

    from computer.runtime import _mapped

    held = tmp_path / "held"
    held.write_bytes(b"x")
    dev, ino = os.stat(held).st_dev, os.stat(held).st_ino
    looked: list[str] = []
    real_stat = os.stat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).startswith("/proc/"):
            looked.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(_mapped.os, "stat", counted)
    bound = getattr(_mapped, "FDS_LOOKED", 8192)  # (the test ran before there was one)
    few, many = bound // 1000, bound // 2 + 10
    procs = [
        subprocess.Popen([sys.executable, "-c", _DUPS, str(held), str(n)], stdout=subprocess.PIPE)
        for n in (few, many, many)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
        assert ino in _mapped.read_only_held([procs[0].pid], dev)  # within the bound: the reader is found
        looked.clear()
        assert _mapped.read_only_held([p.pid for p in procs], dev) == set()  # past it: nothing known
        assert len(looked) <= bound, len(looked)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_descriptors_past_the_readers_bound_are_known_from_a_count_not_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes holding more descriptors than ``FDS_LOOKED`` in all: ``read_only_held`` knows nothing
    (every file written in place) and finds that out from the kernel's count of each process's
    descriptors, one ``stat`` a process, no descriptor and no ``maps`` looked at. Before, it looked at
    the bound's 8,192 descriptors (two system calls each) before it gave up, at every push of a file
    the workspace wrote: 40 processes with 19,000 ``dup``s each, ~70-90 ms of the frozen sandbox a
    push here, 0.2-0.6 s on a loaded host."""
    import subprocess
    import sys

    from computer.runtime import _mapped

    held = tmp_path / "held"
    held.write_bytes(b"x")
    if os.stat(f"/proc/{os.getpid()}/fd").st_size == 0:
        pytest.skip("a kernel that does not count a process's descriptors (Linux < 6.2)")
    dev = os.stat(held).st_dev
    stats: list[str] = []
    listed: list[str] = []
    maps: list[int] = []
    real_stat, real_scandir, real_maps = os.stat, os.scandir, _mapped._maps

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).startswith("/proc/"):
            stats.append(str(path))
        return real_stat(path, *args, **kwargs)

    def counted_scandir(path: Any) -> Any:
        listed.append(str(path))
        return real_scandir(path)

    def counted_maps(pid: int) -> bytes | None:
        maps.append(pid)
        return real_maps(pid)

    monkeypatch.setattr(_mapped.os, "stat", counted)
    monkeypatch.setattr(_mapped.os, "scandir", counted_scandir)
    monkeypatch.setattr(_mapped, "_maps", counted_maps)
    each = _mapped.FDS_LOOKED // 3 + 10
    procs = [
        subprocess.Popen([sys.executable, "-c", _DUPS, str(held), str(each)], stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
        assert _mapped.read_only_held([p.pid for p in procs], dev) == set()  # past it: nothing known
        assert len(stats) <= len(procs), stats[:10]  # one count a process at most
        assert listed == [] and maps == []
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
