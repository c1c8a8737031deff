"""One regression test per defect of issue 16 (exec fidelity) and per finding 1, 2, 3 and 6 of issue 17
(hardening), through the public API only: each step its own exec call, checked by later calls, through
``ws.fs`` and after a reopen with fresh backends (a rebuilt mirror)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from exec_cases import setuid_root_files

import computer
from computer.runtime import MirrorPool, ShellBackend

from ._support import (
    THREADS,
    digest,
    ok,
    opened,
    reasons_cover_skipped,
    run,
    settle,
    started,
    until,
)

MiB = 1024 * 1024


# ---------------------------------------------------------------------------------------------- issue 16


async def test_an_edit_made_while_a_run_that_changes_nothing_is_in_flight_reaches_later_runs(
    db: Path,
) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/a.txt", "v1\n")
        assert (await ok(ws, "cat a.txt")).stdout == "v1\n"
        handle = await started(ws, "echo ready; sleep 1.5")
        await ws.fs.write_file("/workspace/a.txt", "v2\n")
        assert (await settle(handle)).status == "completed"
        seen = await ok(ws, "cat a.txt")
        assert seen.stdout == "v2\n"
        await ok(ws, "sed -i s/v/w/ a.txt")
        assert await ws.fs.read_text("/workspace/a.txt") == "w2\n"
    async with opened(db) as ws:
        assert await ws.fs.read_text("/workspace/a.txt") == "w2\n"
        assert (await ok(ws, "cat a.txt")).stdout == "w2\n"


async def test_a_conflicted_file_comes_back_into_the_sandbox_with_the_workspace_version(db: Path) -> None:
    async with opened(db, shell=_per_call()) as ws:
        await ok(ws, "true")  # the mirror is in use: the file then arrives in it by an incremental push
        await ws.fs.write_file("/workspace/shared.txt", "before\n")
        # the run's only change is the conflicted one (its pull is then empty)
        handle = await started(ws, "echo ready; sleep 1.5; echo sandbox > shared.txt")
        await ws.fs.write_file("/workspace/shared.txt", "workspace\n")
        result = await settle(handle)
        assert "/workspace/shared.txt" in result.skipped
        assert await ws.fs.read_text("/workspace/shared.txt") == "workspace\n"
        after = await ok(ws, "cat shared.txt")
        assert after.stdout == "workspace\n"
        # an edit in the sandbox now starts from the workspace's version
        await ok(ws, "echo more >> shared.txt")
        assert await ws.fs.read_text("/workspace/shared.txt") == "workspace\nmore\n"
    async with opened(db, shell=_per_call()) as ws:
        assert (await ok(ws, "cat shared.txt")).stdout == "workspace\nmore\n"


def _per_call() -> ShellBackend:
    """A sandbox per run: the tests using it pin down the per-run bracket's conflict rule (a live
    sandbox syncs while the program runs, so the same steps there are ordinary later writes; see
    tests/runtime/test_live.py and the live state machine)."""
    return ShellBackend(live=False)


@asynccontextmanager
async def _rebuilt(
    how: str, db: Path, ws: computer.Workspace, shell: ShellBackend
) -> AsyncIterator[computer.Workspace]:
    """The same workspace, seen by a run whose mirror is rebuilt from the store: by a reopen in a new
    process (fresh backends), by a run concurrent with another one (its own mirror), or after the
    mirror was evicted (a pool keeping one workspace, which another workspace's run took over)."""
    if how == "reopen":
        await ws.close()
        async with opened(db) as again:
            yield again
    elif how == "concurrent":
        busy = await started(ws, "echo ready; sleep 3")
        try:
            yield ws
        finally:
            await settle(busy)
    else:
        async with opened(None, shell=shell) as other:
            await ok(other, "echo other > o.txt")
            yield ws


def _evicting_shell() -> ShellBackend:
    return ShellBackend(mirror_pool=lambda base, root: MirrorPool(base, root, max_workspaces=1))


@pytest.mark.parametrize("how", ["reopen", "concurrent", "eviction"])
async def test_a_file_over_1_mib_survives_a_mirror_rebuild(db: Path, how: str) -> None:
    shell = _evicting_shell()
    async with opened(db, shell=shell) as ws:
        made = await ok(ws, "head -c 3145728 /dev/urandom > big.bin && sha256sum big.bin")
        expected = made.stdout.split()[0]
        assert digest(await ws.fs.read_file("/workspace/big.bin")) == expected
        async with _rebuilt(how, db, ws, shell) as seen:
            result = await ok(seen, "sha256sum big.bin")
            assert result.stdout.split()[0] == expected
            assert result.skipped == []


@pytest.mark.slow
async def test_a_tree_over_10000_files_survives_a_reopen(db: Path) -> None:
    async with opened(db) as ws:
        await ok(ws, "mkdir t && cd t && seq 1 12002 | xargs touch", timeout=120)
        assert len(await ws.fs.ls("/workspace/t")) == 12002
    async with opened(db) as ws:
        result = await ok(ws, "find t -type f | wc -l", timeout=120)
        assert result.stdout == "12002\n"
        assert result.skipped == []


@pytest.mark.slow
async def test_a_tree_of_a_million_entries_is_mirrored_whole_and_then_incrementally(db: Path) -> None:
    """Issue 16: trees of at least 1,000,000 entries (pushed in pages of at most 50,000 entries); a
    later run moves only its own change. About 100 s and 1 GiB here."""
    async with opened(db, python=False) as ws:
        for d in range(1000):
            ws.fs.commit_batch({f"/workspace/t/d{d}/f{i}": b"" for i in range(999)})
        whole = await ok(ws, "find t | wc -l", timeout=600)
        assert whole.stdout == "1000001\n" and whole.pushed == 999_000 and whole.skipped == []
        small = await ok(ws, "touch t/d5/new && rm t/d7/f3 && find t -type f | wc -l", timeout=120)
        assert small.stdout == "999000\n" and small.pushed == 0
        assert sorted(small.pulled) == ["/workspace/t/d5/new", "/workspace/t/d7/f3"]
        assert await ws.fs.exists("/workspace/t/d5/new") and not await ws.fs.exists("/workspace/t/d7/f3")


async def test_a_symlink_out_of_the_workspace_is_kept_verbatim(db: Path) -> None:
    async with opened(db) as ws:
        await ok(
            ws, "mkdir -p .venv/bin && ln -s /usr/bin/python3 .venv/bin/python && ln -s ../../x dangling"
        )
        assert await ws.fs.readlink("/workspace/.venv/bin/python") == "/usr/bin/python3"
        assert await ws.fs.readlink("/workspace/dangling") == "../../x"
        assert (await ok(ws, ".venv/bin/python -c 'print(6 * 7)'")).stdout == "42\n"
    async with opened(db) as ws:
        result = await ok(ws, ".venv/bin/python -c 'print(6 * 7)'; readlink dangling")
        assert result.stdout == "42\n../../x\n"


async def test_mtimes_round_trip_through_the_workspace_and_a_reopen(db: Path) -> None:
    async with opened(db) as ws:
        await ok(ws, "echo old > old.txt && touch -d @1577836800.250 old.txt")
        assert (await ws.fs.stat("/workspace/old.txt")).mtime == 1577836800250
        # a build and an edit after it, in one run: the output is older than its source
        await ok(
            ws,
            "echo src > src.txt && touch -d @1600000000 src.txt && cp src.txt out.txt && touch -d @1500000000 out.txt",
        )
    async with opened(db) as ws:
        result = await ok(ws, "stat -c %Y old.txt src.txt out.txt; [ src.txt -nt out.txt ] && echo stale")
        assert result.stdout == "1577836800\n1600000000\n1500000000\nstale\n"
        assert (await ws.fs.stat("/workspace/out.txt")).mtime == 1500000000000


async def test_hard_links_show_the_same_bytes_in_every_view(db: Path) -> None:
    async with opened(db) as ws:
        await ok(ws, "echo one > a && ln a b")
        await ok(ws, "echo two >> b")
        assert (await ok(ws, "cat a; cat b")).stdout == "one\ntwo\none\ntwo\n"
        assert await ws.fs.read_text("/workspace/a") == "one\ntwo\n"
        assert await ws.fs.read_text("/workspace/b") == "one\ntwo\n"
    async with opened(db) as ws:
        assert (await ok(ws, "cat a; cat b")).stdout == "one\ntwo\none\ntwo\n"


async def test_64_threads_start_in_one_program(db: Path) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/threads.py", THREADS)
        result = await ok(ws, "python3 threads.py")
        assert result.stdout == "64\n"


async def test_the_python_backend_reads_and_writes_workspace_files_through_open(db: Path) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/data.csv", "a,b\n1,2\n")
        source = textwrap.dedent(
            """
            import os, pathlib
            print(os.getcwd())
            print(open("data.csv").read().splitlines()[1])
            with open("out.txt", "w") as f:
                f.write("written by open\\n")
            pathlib.Path("sub").mkdir()
            pathlib.Path("sub/p.txt").write_text("pathlib\\n")
            """
        )
        result = await ok(ws, source, backend="python")
        assert result.stdout == "/workspace\n1,2\n"
        assert await ws.fs.read_text("/workspace/out.txt") == "written by open\n"
        assert await ws.fs.read_text("/workspace/sub/p.txt") == "pathlib\n"
        assert (await ok(ws, "cat out.txt sub/p.txt")).stdout == "written by open\npathlib\n"
    async with opened(db) as ws:
        result = await ok(ws, "print(open('out.txt').read(), end='')", backend="python")
        assert result.stdout == "written by open\n"


async def test_every_skipped_path_has_a_reason(db: Path) -> None:
    async with opened(db, shell=_per_call()) as ws:
        await ws.fs.write_file("/workspace/shared.txt", "before\n")
        handle = await started(ws, "echo ready; sleep 1.5; echo sandbox > shared.txt; touch $'bad\\xffname'")
        await ws.fs.write_file("/workspace/shared.txt", "workspace\n")
        result = await settle(handle)
        assert "/workspace/shared.txt" in result.skipped
        assert len(result.skipped) >= 2, result.skipped  # the conflict and the name that is not UTF-8
        reasons_cover_skipped(result)
        assert set(result.skipped_reasons) == set(result.skipped)


# ---------------------------------------------------------------------------------------------- issue 17


async def test_a_setuid_program_made_in_the_sandbox_is_not_setuid_root_on_the_host(db: Path) -> None:
    since = time.time() - 1
    async with opened(db) as ws:
        await ok(ws, "cp /usr/bin/id x && chmod 4755 x && cp /usr/bin/id y && chmod 2755 y")
        roots = ["/dev/shm", tempfile.gettempdir()]
        found = await asyncio.to_thread(setuid_root_files, roots, since)
        assert found == []
        for name in ("x", "y"):
            assert (await ws.fs.stat(f"/workspace/{name}")).mode & 0o6000 == 0
    async with opened(db) as ws:
        assert (await ok(ws, "stat -c %a x y")).stdout == "755\n755\n"
        assert await asyncio.to_thread(setuid_root_files, ["/dev/shm", tempfile.gettempdir()], since) == []


async def test_write_file_never_stores_setuid_or_setgid_bits(db: Path) -> None:
    """Issue 17 (1), the write paths: ``ws.fs.write_file`` and the python guest's (a guard: this held)."""
    async with opened(db) as ws:
        for name, mode in (("u", 0o4755), ("g", 0o2755)):
            try:
                await ws.fs.write_file(f"/workspace/{name}", b"#!/bin/sh\n", mode=mode)
            except (OSError, ValueError):
                continue  # refusing the bits is as good as stripping them
            assert (await ws.fs.stat(f"/workspace/{name}")).mode & 0o7777 == 0o755
        guest = "import workspace\ntry:\n    workspace.write_file('p', b'x', mode=0o4755)\nexcept Exception:\n    pass\n"
        await run(ws, guest, backend="python")
        if await ws.fs.exists("/workspace/p"):
            assert (await ws.fs.stat("/workspace/p")).mode & 0o6000 == 0


class _Publisher:
    """An assets surface that records what it shares (see tests/runtime/test_assets_command.py)."""

    def __init__(self) -> None:
        self.shared: list[str] = []

    async def share(self, path: str, *, expires_after: float = 3600.0, **options: object) -> str:
        self.shared.append(path)
        return f"http://127.0.0.1:8787/share/{len(self.shared)}"


async def test_assets_publish_in_the_sandbox_leaves_a_protected_file_alone(db: Path) -> None:
    # A protected file: one the backend's explicit size limit keeps out of the mirror.
    shell = ShellBackend(max_file_bytes=1024)
    async with opened(db, shell=shell, assets=_Publisher()) as ws:
        original = os.urandom(4096)
        await ws.fs.write_file("/workspace/big.bin", original)
        result = await run(ws, "echo sandbox > big.bin; assets publish big.bin")
        assert "/workspace/big.bin" in result.skipped
        assert await ws.fs.read_file("/workspace/big.bin") == original


async def test_assets_publish_in_the_sandbox_keeps_a_workspace_change_made_during_the_run(db: Path) -> None:
    async with opened(db, shell=_per_call(), assets=_Publisher()) as ws:
        await ws.fs.write_file("/workspace/s.txt", "before\n")
        handle = await started(ws, "echo ready; sleep 1.5; echo sandbox > s.txt; assets publish s.txt")
        await ws.fs.write_file("/workspace/s.txt", "workspace\n")
        result = await settle(handle)
        assert await ws.fs.read_text("/workspace/s.txt") == "workspace\n"
        assert "/workspace/s.txt" in result.skipped
        assert (await ok(ws, "cat s.txt")).stdout == "workspace\n"


class _Ticker:
    """An event-loop ticker (every 20 ms) recording the largest gap between two ticks."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.worst = 0.0

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(0.02)
            now = time.monotonic()
            self.worst = max(self.worst, now - self.last)
            self.last = now


def _unblock_fifos(directory: Path, ticker: _Ticker, done: threading.Event) -> None:
    """Watchdog thread: when the loop has not ticked for 5 s, open every FIFO under ``directory`` for
    reading, so a writer blocked opening one returns and the test ends (bounded: 180 s at most)."""
    deadline = time.monotonic() + 180
    while not done.wait(0.5) and time.monotonic() < deadline:
        if time.monotonic() - ticker.last < 5:
            continue
        for path in directory.rglob("*"):
            try:
                if stat.S_ISFIFO(path.lstat().st_mode):
                    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                    done.wait(0.5)
                    os.close(fd)
            except OSError:
                pass


@pytest.mark.slow
async def test_a_fifo_where_the_workspace_writes_a_file_blocks_nothing(db: Path) -> None:
    # a short scratch path of our own (the run's unix socket lives there), so the watchdog knows where
    scratch = Path(tempfile.mkdtemp(prefix="fid-", dir="/tmp"))
    os.chmod(scratch, 0o711)  # the sandbox's unprivileged user must reach its mirrors below it
    shell = ShellBackend(scratch_dir=str(scratch))
    ticker = _Ticker()
    task = asyncio.ensure_future(ticker.tick())
    done = threading.Event()
    watchdog = threading.Thread(target=_unblock_fifos, args=(scratch, ticker, done), daemon=True)
    watchdog.start()
    try:
        async with opened(db, shell=shell) as ws:
            made = await run(ws, "mkfifo f && echo made")
            assert made.stdout == "made\n", made
            await ws.fs.write_file("/workspace/f", "from the workspace\n")
            began = time.monotonic()
            result = await run(ws, "sleep 30", timeout=2)
            took = time.monotonic() - began
            assert result.status == "cancelled" and result.exit_code == 124
            assert took < 30  # ended by its timeout, not by the program
            # A writer blocked opening the FIFO stalls the loop until the watchdog opens it, 5 s on:
            # anything below that is a loaded machine's pause, not the defect (was < 2.0).
            assert ticker.worst < 4.5, f"the event loop stalled {ticker.worst:.1f} s"
            assert await ws.fs.read_text("/workspace/f") == "from the workspace\n"
            assert (await run(ws, "echo next", timeout=10)).stdout == "next\n"
    finally:
        done.set()
        task.cancel()
        watchdog.join(10)
        shutil.rmtree(scratch, ignore_errors=True)


SCRATCH_CHILD = """
import asyncio, os, sys
import computer
from computer.runtime import ShellBackend

def used():
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize

DEEP = "import os\\nfor _ in range(3000):\\n    os.mkdir('d')\\n    os.chdir('d')\\nopen('leaf', 'w').close()\\n"

async def main():
    before = used()
    shell = ShellBackend()
    for i in range(3):
        async with computer.Workspace(sys.argv[1] + f"/{i}.sqlite", backends=[shell], max_bytes=32 << 20) as ws:
            await ws.fs.mkdir("/workspace")
            if i == 0:
                await ws.fs.write_file("/workspace/deep.py", DEEP)
                h = await ws.runtime.exec("python3 deep.py", timeout=240)
                r = await asyncio.wait_for(h.result(), 400)
                assert r.status == "completed", (r.status, r.error, r.stderr)
            h = await ws.runtime.exec("head -c 200000000 /dev/zero > big.bin", timeout=240)
            r = await asyncio.wait_for(h.result(), 400)
            print("run", i, r.status, r.error, r.skipped, file=sys.stderr)
    for _ in range(75):  # a removal in progress may finish (15 s at most)
        if used() - before < 64 << 20:
            break
        await asyncio.sleep(0.2)
    print(os.getpid(), before, used(), flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
def test_mirrors_leave_nothing_behind_in_dev_shm(tmp_path: Path) -> None:
    """Three workspaces (each with a 32 MiB quota) write 200 MB each, one also a tree 3,000 deep; then
    they close and the process exits. What the pulls left out is not held in /dev/shm after the runs,
    and nothing of the process is left there after it exits."""
    script = tmp_path / "child.py"
    script.write_text(SCRATCH_CHILD)
    before = os.statvfs("/dev/shm")
    child = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=900, check=False
    )
    assert child.returncode == 0, child.stderr[-4000:]
    pid, start, closed = (int(x) for x in child.stdout.split())
    after = os.statvfs("/dev/shm")
    held_while_open = closed - start
    left_after_exit = (after.f_blocks - after.f_bfree - (before.f_blocks - before.f_bfree)) * after.f_frsize
    leftovers = [p.name for p in Path("/dev/shm").glob(f"*-{pid}-*")]  # today's names carry the pid
    for name in leftovers:  # the test leaves nothing itself (rm -rf: any depth)
        subprocess.run(["rm", "-rf", "--one-file-system", f"/dev/shm/{name}"], timeout=120, check=False)
    assert held_while_open < 64 * MiB, f"{held_while_open / MiB:.0f} MiB held by closed workspaces"
    assert left_after_exit < 64 * MiB, f"{left_after_exit / MiB:.0f} MiB left after exit"
    assert leftovers == []


async def test_a_refused_directory_comes_back_whole_from_the_workspace(tmp_path: Path) -> None:
    """A run changes ``d``'s mode while the workspace renames ``d`` away and back and changes ``d/w0``:
    the pull refuses ``d`` and drops it from the mirror. The next run sees the workspace's ``d``
    whole: its changed ``d/w0`` and its untouched ``d/w1`` (an incremental push sent only ``d/w0``:
    ``d/w1`` was gone from the sandbox for good, while the workspace held it), also after a reopen
    with the same backend (its warm mirror) and with a fresh one. (Until s55 the write of ``d/w0``
    alone refused the run's ``chmod``: see the test below.)"""
    shell = ShellBackend(live=False)
    async with opened(tmp_path / "ws.db", shell=shell, python=False) as ws:
        await ok(ws, "mkdir d && echo 0 > d/w0 && echo 1 > d/w1")
        handle = await started(ws, "echo ready; sleep 1; chmod 700 d")
        await ws.fs.rename("/workspace/d", "/workspace/away")
        await ws.fs.rename("/workspace/away", "/workspace/d")
        await ws.fs.write_file("/workspace/d/w0", "changed\n")
        result = await settle(handle)
        assert "/workspace/d" in result.skipped, result.skipped
        reasons_cover_skipped(result)
    for backend in (shell, None):
        async with opened(tmp_path / "ws.db", shell=backend, python=False) as ws:
            seen = await ok(ws, "for f in d/*; do echo $f $(cat $f); done")
            assert seen.stdout.split("\n")[:-1] == ["d/w0 changed", "d/w1 1"]
            assert sorted(e.name for e in await ws.fs.readdir("/workspace/d")) == ["w0", "w1"]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_runs_chmod_of_a_directory_the_workspace_wrote_below_is_kept_with_its_open_files(
    tmp_path: Path, live: bool
) -> None:
    """A run's ``chmod 700 d`` while the workspace writes ``d/w0`` in the same sync window: both are
    kept (the mode is the directory's own; nothing of the workspace's changed there). Before, ``d``
    was refused and the mirror dropped it and fetched it whole: in a live sandbox a background
    program appending through a file it held open (``d/log``) wrote into a removed file from then
    on, and every later line was lost (s55). Checked by later runs and after a reopen."""
    shell = ShellBackend(live=live)
    async with opened(tmp_path / "ws.db", shell=shell, python=False) as ws:
        await ok(ws, "mkdir d && echo 0 > d/w0 && echo 1 > d/w1")
        if live:  # a program holding d/log open across the calls, a line each time go/ holds a name
            await ok(
                ws,
                "mkdir go; (exec 3>>d/log; n=0; while [ $n -lt 600 ]; do "
                'for f in go/*; do [ -e "$f" ] && echo "${f#go/}" >&3 && rm "$f"; done; '
                "[ -e stop ] && break; n=$((n+1)); sleep 0.05; done) > /dev/null 2>&1 &",
            )
            await ok(ws, "touch go/before")
            await until(lambda: _has_line(ws, "before"), within=30)
        handle = await started(ws, "echo ready; sleep 1; chmod 700 d")
        if live:
            sandbox = shell._lives._live[ws.fs.instance]
            async with sandbox.lock:  # no sync until the run's chmod: the two meet in one window
                await ws.fs.write_file("/workspace/d/w0", "changed\n")
                await until(lambda: _mode_is(sandbox.mirror.directory / "d", 0o700), within=30)
        else:
            await ws.fs.write_file("/workspace/d/w0", "changed\n")
        result = await settle(handle)
        assert result.skipped == [], result.skipped_reasons
        assert "/workspace/d" in result.pulled
        assert (await ws.fs.stat("/workspace/d")).mode & 0o777 == 0o700
        if live:
            await ok(ws, "touch go/after")
            await until(lambda: _has_line(ws, "after"), within=30)
            await ok(ws, "touch stop")
    for backend in (shell, None):
        async with opened(tmp_path / "ws.db", shell=backend, python=False) as ws:
            seen = await ok(ws, "stat -c %a d; cat d/w0 d/w1")
            assert seen.stdout == "700\nchanged\n1\n"
            if live:
                assert await ws.fs.read_file("/workspace/d/log") == b"before\nafter\n"


async def _has_line(ws: computer.Workspace, line: str) -> bool:
    try:
        data = await ws.fs.read_file("/workspace/d/log")
    except FileNotFoundError:
        return False
    return f"{line}\n".encode() in data


async def _mode_is(path: Path, mode: int) -> bool:
    return await asyncio.to_thread(lambda: os.lstat(path).st_mode & 0o7777 == mode)
