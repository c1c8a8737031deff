"""The shell backend's sync bracket (CASES 36): push, run, pull; protected files; concurrent changes."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any

import pytest
from exec_cases import (
    a_conflicted_path_comes_back_with_the_workspace_version,
    a_file_changed_during_a_run_keeps_the_workspace_version,
    a_write_during_a_run_that_changes_nothing_reaches_the_next_run,
)

import computer
from computer.runtime import (
    LocalExecContext,
    PullResult,
    PythonBackend,
    Runtime,
    ShellBackend,
    SyncPull,
    _mirror_pull,
)
from computer.runtime.types import ExecResult


async def test_cat_copy_append_and_rm_are_reflected_in_the_workspace(ws: computer.Workspace) -> None:
    await ws.fs.write_file("/workspace/a.txt", "alpha\n")
    await ws.fs.write_file("/workspace/gone.txt", "bye\n")
    result = await (await ws.runtime.exec("cat a.txt > copy.txt; echo beta >> a.txt; rm gone.txt")).result()
    assert result.status == "completed"
    assert await ws.fs.read_text("/workspace/copy.txt") == "alpha\n"
    assert await ws.fs.read_text("/workspace/a.txt") == "alpha\nbeta\n"
    assert not await ws.fs.exists("/workspace/gone.txt")
    assert set(result.pulled) >= {"/workspace/copy.txt", "/workspace/a.txt", "/workspace/gone.txt"}


async def test_workspace_files_appear_at_the_mount_root_and_cwd_defaults_there(
    ws: computer.Workspace,
) -> None:
    await ws.fs.mkdir("/workspace/src/deep", recursive=True)
    await ws.fs.write_file("/workspace/src/deep/x.txt", "x")
    result = await (await ws.runtime.exec("pwd; cat /workspace/src/deep/x.txt; echo; ls src")).result()
    assert result.stdout == "/workspace\nx\ndeep\n"


async def test_cwd_env_and_stdin_reach_the_command(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/sub")
    result = await (
        await ws.runtime.exec(
            "pwd; echo $GREETING; cat", cwd="/workspace/sub", env={"GREETING": "hi"}, stdin="in\n"
        )
    ).result()
    assert result.stdout == "/workspace/sub\nhi\nin\n"


async def test_directories_created_and_removed_are_synced(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/old/inner", recursive=True)
    await ws.fs.write_file("/workspace/old/inner/f", "f")
    result = await (await ws.runtime.exec("mkdir -p new/empty; rm -r old")).result()
    assert result.status == "completed"
    assert (await ws.fs.stat("/workspace/new/empty")).is_directory
    assert not await ws.fs.exists("/workspace/old")


async def test_mode_changes_are_synced(ws: computer.Workspace) -> None:
    await ws.fs.write_file("/workspace/run.sh", "#!/bin/sh\necho ran\n")
    result = await (await ws.runtime.exec("chmod 755 run.sh && ./run.sh")).result()
    assert result.stdout == "ran\n"
    assert (await ws.fs.stat("/workspace/run.sh")).mode & 0o777 == 0o755


async def test_directory_modes_are_synced(ws: computer.Workspace) -> None:
    result = await (
        await ws.runtime.exec("mkdir -m 700 private && mkdir -p private/sub/leaf public/x")
    ).result()
    assert result.status == "completed"
    assert (await ws.fs.stat("/workspace/private")).mode & 0o777 == 0o700
    assert (await ws.fs.stat("/workspace/private/sub")).mode & 0o777 == 0o755
    assert (await ws.fs.stat("/workspace/private/sub/leaf")).is_directory
    assert (await ws.fs.stat("/workspace/public/x")).is_directory


async def test_only_changes_since_the_last_run_are_pushed(ws: computer.Workspace) -> None:
    for i in range(20):
        await ws.fs.write_file(f"/workspace/f{i}.txt", f"{i}")
    first = await (await ws.runtime.exec("true")).result()
    assert first.pushed == 20
    await ws.fs.write_file("/workspace/f3.txt", "changed")
    second = await (await ws.runtime.exec("cat f3.txt")).result()
    assert (second.pushed, second.stdout) == (1, "changed")
    third = await (await ws.runtime.exec("echo made > new.txt")).result()
    assert third.pushed == 0
    fourth = await (await ws.runtime.exec("cat new.txt")).result()
    assert (fourth.pushed, fourth.stdout) == (0, "made\n")  # the run's own pull is not sent back


async def test_workspace_changes_between_runs_reach_the_mirror(ws: computer.Workspace) -> None:
    await ws.fs.write_file("/workspace/keep.txt", "1")
    await ws.fs.mkdir("/workspace/d")
    await ws.fs.write_file("/workspace/d/in.txt", "in")
    await (await ws.runtime.exec("true")).result()
    await ws.fs.rm("/workspace/d", recursive=True)
    await ws.fs.rename("/workspace/keep.txt", "/workspace/moved.txt")
    await ws.fs.mkdir("/workspace/d")
    await ws.fs.write_file("/workspace/d/other.txt", "o")
    result = await (await ws.runtime.exec("find . | sort")).result()
    assert result.stdout == ".\n./d\n./d/other.txt\n./moved.txt\n"


async def test_file_above_an_explicit_size_limit_is_protected_and_reported() -> None:
    async with computer.Workspace(backends=[ShellBackend(max_file_bytes=1024 * 1024)]) as ws:
        await ws.fs.mkdir("/workspace")
        await _file_above_the_limit_is_protected(ws)


async def _file_above_the_limit_is_protected(ws: computer.Workspace) -> None:
    big = os.urandom(1024 * 1024 + 1)
    await ws.fs.write_file("/workspace/big.bin", big)
    await ws.fs.write_file("/workspace/small.txt", "s")
    result = await (await ws.runtime.exec("ls; echo overwritten > big.bin; cat small.txt")).result()
    assert result.stdout == "small.txt\ns"
    assert "/workspace/big.bin" in result.skipped
    assert "max_file_bytes" in result.skipped_reasons["/workspace/big.bin"]
    assert await ws.fs.read_file("/workspace/big.bin") == big
    result = await (await ws.runtime.exec("rm -f big.bin; rm -rf /workspace/*")).result()
    assert await ws.fs.read_file("/workspace/big.bin") == big
    assert not await ws.fs.exists("/workspace/small.txt")


async def test_files_beyond_the_mirror_count_are_protected() -> None:
    backend = ShellBackend(max_files=3)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        for i in range(5):
            await ws.fs.write_file(f"/workspace/{i}.txt", str(i))
        result = await (await ws.runtime.exec("ls | wc -l; rm -f *.txt")).result()
        assert result.stdout == "3\n"
        assert len(result.skipped) == 2
        assert sorted(await ws.fs.ls("/workspace")) == sorted(result.skipped)
        assert all("max_files" in result.skipped_reasons[p] for p in result.skipped)


async def test_a_file_changed_in_the_workspace_during_the_run_keeps_the_workspace_version(
    ws: computer.Workspace,
) -> None:
    await a_file_changed_during_a_run_keeps_the_workspace_version(ws)


async def test_a_write_during_a_run_that_changes_nothing_reaches_the_next_run(ws: computer.Workspace) -> None:
    await a_write_during_a_run_that_changes_nothing_reaches_the_next_run(ws)


async def test_a_conflicted_path_comes_back_with_the_workspace_version(ws: computer.Workspace) -> None:
    await a_conflicted_path_comes_back_with_the_workspace_version(ws)


def _alive(marker: str) -> list[int]:
    """Host pids (not zombies) whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(pid))
    return found


async def _gone_soon(marker: str) -> bool:
    """Wait (at most 5 s) for every process carrying ``marker`` to exit, through pidfds."""
    loop = asyncio.get_running_loop()
    for pid in _alive(marker):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        exited = loop.create_future()
        loop.add_reader(fd, lambda f=exited: f.done() or f.set_result(None))
        try:
            await asyncio.wait_for(exited, 5)
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    return not _alive(marker)


def _marker() -> str:
    return f"1000.{secrets.randbelow(10**8):08d}"


async def test_timeout_ends_background_children(ws: computer.Workspace) -> None:
    marker = _marker()
    # 3 s (was 1): the echo must run before the timeout, and a loaded machine can take longer to
    # start the sandbox (the timeout is the test's own timer: it cannot wait for an event).
    result = await (await ws.runtime.exec(f"sleep {marker} & echo started; wait", timeout=3)).result()
    assert (result.status, result.exit_code, result.stdout) == ("cancelled", 124, "started\n")
    assert await _gone_soon(marker)


async def test_kill_ends_background_children(ws: computer.Workspace) -> None:
    marker = _marker()
    handle = await ws.runtime.exec(f"(sleep {marker} &); sleep {marker} & echo started; wait")
    async for snapshot in handle:
        if "started" in snapshot.stdout:
            assert _alive(marker)
            break
    await handle.kill()
    assert (await handle.result()).status == "cancelled"
    assert await _gone_soon(marker)


async def test_background_children_end_with_the_command(ws: computer.Workspace) -> None:
    marker = _marker()
    result = await (await ws.runtime.exec(f"sleep {marker} > /dev/null 2>&1 & echo left")).result()
    assert result.stdout == "left\n"
    assert await _gone_soon(marker)


async def test_a_cwd_outside_the_mount_root_fails_clearly(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("pwd", cwd="/elsewhere")).result()
    assert result.status == "failed" and result.error is not None and "outside the mount root" in result.error


async def test_a_missing_mount_root_is_created_by_the_first_write() -> None:
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        result = await (await ws.runtime.exec("echo hi > hello.txt")).result()
        assert result.status == "completed"
        assert await ws.fs.read_text("/workspace/hello.txt") == "hi\n"


async def test_concurrent_runs_of_one_workspace_each_sync_their_changes(ws: computer.Workspace) -> None:
    await ws.fs.write_file("/workspace/base.txt", "base")
    first = await ws.runtime.exec("sleep 0.5; cat base.txt > one.txt")
    second = await ws.runtime.exec("sleep 0.5; cat base.txt > two.txt")
    results = [await first.result(), await second.result()]
    assert [r.status for r in results] == ["completed", "completed"]
    assert await ws.fs.read_text("/workspace/one.txt") == "base"
    assert await ws.fs.read_text("/workspace/two.txt") == "base"
    third = await (await ws.runtime.exec("ls")).result()
    assert third.stdout == "base.txt\none.txt\ntwo.txt\n"


async def _killed_once_ready(ws: computer.Workspace, source: str, **options: Any) -> ExecResult:
    """Start ``source``, kill it once it printed ``ready``: its result."""
    handle = await ws.runtime.exec(source, **options)
    async for snapshot in handle:
        if "ready" in snapshot.stdout:
            break
    await handle.kill()
    return await handle.result()


async def test_a_killed_run_leaves_the_next_run_a_consistent_mirror(ws: computer.Workspace) -> None:
    await ws.fs.write_file("/workspace/kept.txt", "kept")
    # SPEC section 10: a kill keeps what the program already wrote (pulled after the tree is killed),
    # and the killed run's result lists it.
    killed = await _killed_once_ready(ws, "echo partial > lost.txt; echo ready; sleep 30")
    assert (killed.status, killed.exit_code, killed.pulled) == ("cancelled", 137, ["/workspace/lost.txt"])
    assert await ws.fs.read_text("/workspace/lost.txt") == "partial\n"
    result = await (await ws.runtime.exec("ls; cat lost.txt")).result()
    assert result.stdout == "kept.txt\nlost.txt\npartial\n"
    assert result.pushed == 0  # the kill's pull settled the mirror


async def test_names_the_workspace_cannot_hold_are_skipped_without_losing_the_rest(
    ws: computer.Workspace,
) -> None:
    result = await (
        await ws.runtime.exec("touch $'bad\\xff' 'ok é 😀' $'new\\nline'; ln -s ok link; mkfifo pipe")
    ).result()
    assert result.status == "completed"
    assert sorted(await ws.fs.ls("/workspace")) == ["/workspace/new\nline", "/workspace/ok é 😀"]
    assert await ws.fs.readlink("/workspace/link") == "ok"
    assert "/workspace/bad\\xff" in result.skipped
    assert "UTF-8" in result.skipped_reasons["/workspace/bad\\xff"]
    assert "FIFO" in result.skipped_reasons["/workspace/pipe"]


async def test_a_push_larger_than_a_page_arrives_whole_in_pages() -> None:
    backend = ShellBackend(max_sync_bytes=2500)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        for i in range(4):
            await ws.fs.write_file(f"/workspace/{i}.bin", bytes([i]) * 1000)
        await ws.fs.write_file("/workspace/big.bin", os.urandom(10_000))  # in pieces of a page
        result = await (await ws.runtime.exec("ls | wc -l; sha256sum big.bin; cat 3.bin | wc -c")).result()
        digest = hashlib.sha256(await ws.fs.read_file("/workspace/big.bin")).hexdigest()
        assert result.stdout == f"5\n{digest}  big.bin\n1000\n"
        assert result.skipped == []
        assert result.pushed == 5


async def test_a_pull_larger_than_a_page_reaches_the_workspace_whole() -> None:
    backend = ShellBackend(max_sync_bytes=2500)
    async with computer.Workspace(backends=[backend]) as ws:
        result = await (
            await ws.runtime.exec(
                "head -c 2000 /dev/zero > a.bin; head -c 2000 /dev/zero > b.bin; head -c 9000 /dev/urandom > c"
            )
        ).result()
        assert result.status == "completed"
        assert result.skipped == []
        assert sorted(await ws.fs.ls("/workspace")) == [
            "/workspace/a.bin",
            "/workspace/b.bin",
            "/workspace/c",
        ]
        assert (await ws.fs.stat("/workspace/c")).size == 9000
        again = await (await ws.runtime.exec("wc -c < c")).result()
        assert again.stdout == "9000\n" and again.pushed == 0


async def test_symlinks_made_by_a_run_are_synced_verbatim_whatever_they_point_at(
    ws: computer.Workspace,
) -> None:
    await ws.fs.write_file("/workspace/target.txt", "t")
    await ws.fs.write_file("/workspace/was-file", "f")
    result = await (
        await ws.runtime.exec(
            "ln -s target.txt rel && ln -s /workspace/target.txt abs && ln -s /etc/passwd out"
            " && ln -s ../../etc/passwd up && rm was-file && ln -s target.txt was-file"
        )
    ).result()
    assert result.status == "completed"
    assert await ws.fs.readlink("/workspace/rel") == "target.txt"
    assert await ws.fs.readlink("/workspace/abs") == "/workspace/target.txt"
    assert await ws.fs.read_text("/workspace/was-file") == "t"
    # Links out of the mount root are kept as written: they resolve inside the sandbox only.
    assert await ws.fs.readlink("/workspace/out") == "/etc/passwd"
    assert await ws.fs.readlink("/workspace/up") == "../../etc/passwd"
    assert result.skipped == []
    seen = await (await ws.runtime.exec("readlink out up; head -c 5 out")).result()
    assert seen.stdout == "/etc/passwd\n../../etc/passwd\nroot:"
    again = await (await ws.runtime.exec("ln -sfn abs rel; readlink rel; cat was-file")).result()
    assert again.stdout == "abs\nt"
    assert again.pushed == 0  # the run's own links were not sent back
    assert await ws.fs.readlink("/workspace/rel") == "abs"


async def test_python_in_the_shell_sees_a_same_size_edit_and_leaves_no_bytecode(
    ws: computer.Workspace,
) -> None:
    await ws.fs.write_file("/workspace/mod.py", "VALUE = 1\n")
    first = await (await ws.runtime.exec("python3 -c 'import mod; print(mod.VALUE)'")).result()
    assert first.stdout == "1\n"
    # Same size, same second: a bytecode cache keyed on (mtime in seconds, size) would replay VALUE = 1.
    await ws.fs.write_file("/workspace/mod.py", "VALUE = 2\n")
    second = await (await ws.runtime.exec("python3 -c 'import mod; print(mod.VALUE)'")).result()
    assert second.stdout == "2\n"
    assert not await ws.fs.exists("/workspace/__pycache__")


async def test_mtimes_hard_links_and_outside_symlinks_survive_a_reopen(tmp_path: Path) -> None:
    """Issue 16: a rebuilt mirror used to stamp the sync time, split hard links and drop links that
    point outside the mount root (a venv's ``bin/python``)."""
    path = str(tmp_path / "ws.db")
    async with computer.Workspace(path, backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        made = await (
            await ws.runtime.exec(
                "echo x > f && touch -d '2001-02-03 04:05:06.789' f && ln f hard"
                " && mkdir -p .venv/bin && ln -s /usr/bin/python3 .venv/bin/python"
            )
        ).result()
        assert made.status == "completed" and made.skipped == []
        first, second = await ws.fs.stat("/workspace/f"), await ws.fs.stat("/workspace/hard")
        assert first.mtime == 981173106789 and first.ino == second.ino and first.nlink == 2
    async with computer.Workspace(path, backends=[ShellBackend()]) as ws:
        seen = await (
            await ws.runtime.exec(
                "stat -c '%y %h' f; [ f -ef hard ] && echo same; .venv/bin/python -c 'print(3)';"
                " echo y >> hard; cat f"
            )
        ).result()
        assert seen.stdout == "2001-02-03 04:05:06.789000000 +0000 2\nsame\n3\nx\ny\n", seen.stderr
        assert await ws.fs.read_text("/workspace/f") == "x\ny\n"
        await ws.fs.write_file("/workspace/f", "z\n")  # through one name: both names in the next run
        assert (await (await ws.runtime.exec("cat hard")).result()).stdout == "z\n"


class _CountingContext(LocalExecContext):
    """Counts the chunk bytes that cross the seam in each direction."""

    def __init__(self, workspace: computer.Workspace) -> None:
        super().__init__(workspace)
        self.staged = 0  # new chunk bytes a pull sent
        self.fetched = 0  # chunk bytes a push fetched

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> PullResult:
        self.staged += sum(len(piece) for piece in pull.stage)
        return await super().sync_pull(pull, base_rev)

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        result = await super().fs_call(op, args)
        if op == "read_chunks":
            self.fetched += sum(len(v) for v in result.values())
        return result


async def test_a_small_change_in_a_large_file_moves_one_chunk_each_way(tmp_path: Path) -> None:
    """Issue 16: a page changed inside a large file moves a chunk, not the file, in both directions;
    the file is exact everywhere, and no staging is left behind."""
    backend = ShellBackend(
        live=False, max_sync_bytes=4 << 20
    )  # per call; pages smaller than the file: staged across pages
    async with computer.Workspace(str(tmp_path / "ws.db"), backends=[backend]) as ws:
        ctx = _CountingContext(ws)
        runtime = Runtime(ws, [backend], context=ctx)
        await ws.fs.mkdir("/workspace")
        made = await (await runtime.exec("head -c 20000000 /dev/urandom > big.db")).result()
        assert made.status == "completed" and made.skipped == []
        assert ctx.staged == 20_000_000  # a new file: every chunk is new
        ctx.staged = 0
        page = "dd if=/dev/urandom of=big.db bs=4096 count=1 seek=1000 conv=notrunc status=none"
        look = "; sha256sum big.db | cut -c1-64; stat -c %i big.db"
        changed = await (await runtime.exec(page + look)).result()
        assert ctx.staged == 512 * 1024  # one chunk
        digest = hashlib.sha256(await ws.fs.read_file("/workspace/big.db")).hexdigest()
        assert changed.stdout.split()[0] == digest
        chunks = [c.hash for c in ws.fs.file_chunks("/workspace/big.db")]
        await ws.fs.write_chunks("/workspace/big.db", [*chunks[:5], b"x" * (512 * 1024), *chunks[6:]])
        seen = await (await runtime.exec("true" + look)).result()
        assert ctx.fetched == 512 * 1024  # the push fetched the one chunk the mirror lacked
        digest = hashlib.sha256(await ws.fs.read_file("/workspace/big.db")).hexdigest()
        assert seen.stdout.split() == [digest, changed.stdout.split()[1]]  # written into the same file
        # Replaced (removed, written again): a new file, made from the held copy: still one chunk.
        data = bytearray(await ws.fs.read_file("/workspace/big.db"))
        data[7 * 512 * 1024 : 8 * 512 * 1024] = b"y" * (512 * 1024)
        await ws.fs.rm("/workspace/big.db")
        await ws.fs.write_file("/workspace/big.db", bytes(data))
        ctx.fetched = 0
        replaced = await (await runtime.exec("true" + look)).result()
        await runtime.close()
        assert ctx.fetched == 512 * 1024
        digest = hashlib.sha256(await ws.fs.read_file("/workspace/big.db")).hexdigest()
        assert (
            replaced.stdout.split()[0] == digest and replaced.stdout.split()[1] != changed.stdout.split()[1]
        )
        assert not await ws.fs.exists("/.computer/sync/x") and await ws.fs.ls("/.computer/sync") == []


class _CountingSha256:
    """Stands in for ``hashlib`` in the mirror's pull: counts the SHA-256 computations."""

    def __init__(self) -> None:
        self.calls = 0

    def sha256(self, data: bytes) -> Any:
        self.calls += 1
        return hashlib.sha256(data)


async def test_a_pull_hashes_only_the_chunks_whose_fingerprint_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16 (4 KiB in 100 MB): a pull reads a large file whole but SHA-256s only the chunks
    whose keyed fingerprint differs from the last pull's; the file stays exact in the workspace,
    also after a push replaced it (its fingerprints no longer apply: everything is hashed once)."""
    counting = _CountingSha256()
    monkeypatch.setattr(_mirror_pull, "hashlib", counting)
    backend = ShellBackend(live=False)
    async with computer.Workspace(str(tmp_path / "ws.db"), backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")

        async def step(command: str) -> int:
            counting.calls = 0
            result = await (await ws.runtime.exec(command + "; sha256sum big.db")).result()
            assert result.status == "completed", result
            stored = hashlib.sha256(await ws.fs.read_file("/workspace/big.db")).hexdigest()
            assert result.stdout.split()[0] == stored
            return counting.calls

        page = "dd if=/dev/urandom of=big.db bs=4096 count=1 seek={} conv=notrunc status=none"
        chunks = -(-20_000_000 // (512 * 1024))
        assert await step("head -c 20000000 /dev/urandom > big.db") == chunks
        assert await step(page.format(1000)) == 1
        assert await step(page.format(10) + "; " + page.format(3000)) == 2
        assert await step(page.format(3000)) == 1  # the same chunk again: compared with the last pull
        assert await step("head -c 4096 /dev/urandom >> big.db") == 1  # the last chunk grew
        listed = [c.hash for c in ws.fs.file_chunks("/workspace/big.db")]
        await ws.fs.write_chunks("/workspace/big.db", [*listed[:5], b"x" * (512 * 1024), *listed[6:]])
        assert await step(page.format(2000)) == chunks  # pushed since: no fingerprint applies
        assert await step(page.format(4000)) == 1


async def test_a_run_that_fills_its_scratch_space_says_why_and_loses_nothing() -> None:
    """Issue 16 (bad input): files under /workspace live on tmpfs and count against the run's memory
    cgroup; a run writing past it is killed by the kernel. The result says so; what it wrote before
    is kept; the workspace and the next run are fine."""
    async with computer.Workspace(backends=[ShellBackend(memory_mb=64)]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/kept.txt", "kept\n")
        result = await (
            await ws.runtime.exec("echo first > a.txt; head -c 300000000 /dev/zero > big; echo after > b.txt")
        ).result()
        assert result.exit_code == 137 and result.error is not None
        assert "out of memory" in result.error and "/workspace" in result.error
        assert await ws.fs.read_text("/workspace/a.txt") == "first\n"
        assert not await ws.fs.exists("/workspace/b.txt")
        assert await ws.fs.read_text("/workspace/kept.txt") == "kept\n"
        after = await (await ws.runtime.exec("rm big; cat a.txt kept.txt")).result()
        assert (after.status, after.stdout, after.error) == ("completed", "first\nkept\n", None)


async def test_a_killed_python_run_lists_the_files_it_wrote() -> None:
    """Per call, as live (``_live_support.kill_after_the_loop_wrote``): the kill's pull is in the result."""
    source = "import time\nopen('made.txt', 'w').write('x')\nprint('ready', flush=True)\ntime.sleep(30)\n"
    async with computer.Workspace(backends=[PythonBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await _killed_once_ready(ws, source, backend="python")
        assert (result.status, result.exit_code, result.pulled) == ("cancelled", 137, ["/workspace/made.txt"])
        assert await ws.fs.read_text("/workspace/made.txt") == "x"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_script_past_the_argument_limit_runs(live: bool) -> None:
    """One argument of a program is at most 128 KiB: a heredoc writing a 300 KiB file failed with
    "Argument list too long" (127). Such a script is sourced from a file of the run's bridge directory,
    which a live sandbox's later runs do not see; a small one still goes as the argument."""
    body = "".join(f"line {i:06d} é\n" for i in range(20_000))  # 300,000 bytes, 2-byte characters
    script = f'cat > gen.txt <<\'EOF\'\n{body}EOF\necho "$0" $# "$1"; exit 3'
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(script)).result()
        assert (result.exit_code, result.stdout, result.stderr) == (3, "/bin/bash 0 \n", "")
        assert await ws.fs.read_text("/workspace/gen.txt") == body
        later = await (await ws.runtime.exec('ls /run/computer; echo "$0"')).result()
        assert later.exit_code == 0 and "script-" not in later.stdout and later.stdout.endswith("/bin/bash\n")


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_write_through_one_hard_link_conflicts_for_every_name(live: bool) -> None:
    """a, b, c are one file. The workspace writes ``a`` while the program appends to ``b``: every
    name changed in the workspace, so every name keeps the workspace's version and they stay one file
    (a sandbox per call pulled ``b`` and ``c`` over it, unreported, and split the names: a with 1
    link, b and c with 2)."""
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("echo base > a; ln a b; ln a c")).result()
        handle = await ws.runtime.exec("echo started; sleep 1; echo prog >> b; sleep 0.3")
        async for snapshot in handle:  # the run started (its files pushed): 0.4 s after the call was
            if "started" in snapshot.stdout:  # not always, on a loaded machine (the write went in first)
                break
        # Within the run, before its append (a live sandbox's syncs push it).
        await ws.fs.write_file("/workspace/a", b"WS\n")
        result = await handle.result()
        names = [f"/workspace/{n}" for n in "abc"]
        stats = [await ws.fs.stat(n) for n in names]
        assert len({s.ino for s in stats}) == 1 and {s.nlink for s in stats} == {3}, (stats, result)
        contents = {await ws.fs.read_file(n) for n in names}
        assert len(contents) == 1, (contents, result)
        if not live:  # a live sandbox pushed the write before the append: both land, nothing refused
            assert contents == {b"WS\n"} and set(result.skipped) == set(names), result


@pytest.mark.parametrize(
    ("source", "options", "named"),
    [
        ("echo a\0b > f", {}, "NUL byte (at character 6)"),
        ("echo \ud83d > f", {}, "command is not UTF-8"),
        ("echo hi > f", {"env": {"A\ud83d": "x"}}, "environment variable name 'A\\ud83d': not UTF-8"),
        ("echo hi > f", {"env": {"A": "x\udfff"}}, "value of environment variable 'A': not UTF-8"),
        ("echo hi > f", {"cwd": "/workspace/\ud83d"}, "cwd '/workspace/\\ud83d' is not UTF-8"),
    ],
)
async def test_a_command_no_shell_runs_as_sent_is_refused_before_it_starts(
    ws: computer.Workspace, source: str, options: dict[str, Any], named: str
) -> None:
    """bash drops a NUL: ``echo a<NUL>b`` ran as ``echo ab`` and answered "completed". A lone surrogate
    (a model's text cut inside a pair) in an env name or value, or in cwd, failed the run at its start
    with a bare ``UnicodeEncodeError ... in position 289``. Now a ``ValueError`` names it, nothing runs."""
    with pytest.raises(ValueError) as refused:
        await ws.runtime.exec(source, **options)
    assert named in str(refused.value)
    assert not await ws.fs.exists("/workspace/f")
