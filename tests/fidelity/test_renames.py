"""A workspace rename keeps the file itself in the sandbox, as a rename does on any machine: a program
holding the file open goes on writing into it under its new name, hard links stay links, a process
working in a renamed directory stays in it, and an unchanged file keeps its inode from run to run.
Real programs (bash, coreutils) across separate calls, checked through ``ws.fs``, later runs and a
reopen with fresh backends."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from computer.runtime import ShellBackend

from ._support import ROOT, ok, opened, sandbox_view, until, workspace_view

LIVE = ShellBackend(live=True).live


def _shell(live: bool) -> ShellBackend:
    return ShellBackend(live=live)


def _inodes(stdout: str) -> dict[str, str]:
    return {name: inode for inode, name in (line.split(" ", 1) for line in stdout.splitlines())}


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_hard_link_stays_a_link_when_the_workspace_renames_one_name(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next pull after the workspace's rename walks the whole mirror: the rename of z changed the
    ctime of both names, which the walk takes in (nothing else to pull). The walk is made certain by
    the watch saying "only a walk can tell": before, a ``mkdir p && mv p p2`` was to break the watch,
    but the watch now follows directory moves (paired when the reader thread watched ``p`` before the
    ``mv``: no walk), and in a live sandbox a tick between ``mkdir`` and ``mv`` pulled ``p`` too (CI's
    load: ``pulled == [p, p2]``)."""
    from computer.runtime._mirror_watch import MirrorWatch

    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=_shell(live), python=False) as ws:
        await ok(ws, "echo one > x && ln x y")
        await ws.fs.rename(f"{ROOT}/x", f"{ROOT}/z")
        walked: list[int] = []
        touched = MirrorWatch.touched
        monkeypatch.setattr(MirrorWatch, "touched", lambda self: walked.append(1))  # None: a walk
        assert (await ok(ws, "mkdir p2")).pulled == [f"{ROOT}/p2"]
        assert walked, "the pull never asked its watch"
        monkeypatch.setattr(MirrorWatch, "touched", touched)
        seen = await ok(ws, "echo two >> y && stat -c %h z && cat z")
        assert seen.stdout == "2\none\ntwo\n"  # was "1\none\n": z had become a copy
        assert await ws.fs.read_text(f"{ROOT}/z") == "one\ntwo\n"
        assert await ws.fs.read_text(f"{ROOT}/y") == "one\ntwo\n"
    async with opened(db, python=False) as ws:
        again = await ok(ws, "echo three >> z && stat -c %h y && cat y")
        assert again.stdout == "2\none\ntwo\nthree\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_files_the_workspace_renames_keep_their_inode_from_run_to_run(
    tmp_path: Path, live: bool
) -> None:
    """One batch of workspace renames between two runs (the mirror stays warm): a file, a file over
    another, a directory, a chain, into a directory made in the same batch, and out of a renamed
    directory; each file is the same inode afterwards. A file the workspace rewrites after renaming
    it has the new content (no claim on its inode)."""
    async with opened(tmp_path / "ws.sqlite", shell=_shell(live), python=False) as ws:
        made = await ok(
            ws,
            "mkdir -p d/s && for f in a c e g j d/x d/s/y w; do echo $f > $f; done && "
            "stat -c '%i %n' a c g j d/x d/s/y",
        )
        before = _inodes(made.stdout)
        fs = ws.fs
        await fs.rename(f"{ROOT}/a", f"{ROOT}/b")
        await fs.rename(f"{ROOT}/c", f"{ROOT}/e", overwrite=True)
        await fs.rename(f"{ROOT}/d", f"{ROOT}/f")
        await fs.rename(f"{ROOT}/f/s/y", f"{ROOT}/y")
        await fs.rename(f"{ROOT}/g", f"{ROOT}/h")
        await fs.rename(f"{ROOT}/h", f"{ROOT}/i")
        await fs.mkdir(f"{ROOT}/n")
        await fs.rename(f"{ROOT}/j", f"{ROOT}/n/j")
        await fs.rename(f"{ROOT}/w", f"{ROOT}/v")
        await fs.write_file(f"{ROOT}/v", b"rewritten\n")
        after = _inodes(
            (await ok(ws, "stat -c '%i %n' b e f/x y i n/j && cat v && ls")).stdout.split("rewritten")[0]
        )
        assert after == {
            "b": before["a"],
            "e": before["c"],
            "f/x": before["d/x"],
            "y": before["d/s/y"],
            "i": before["g"],
            "n/j": before["j"],
        }
        view = await workspace_view(ws)
        assert await sandbox_view(ws) == view
        assert sorted(p[len(ROOT) + 1 :] for p in view) == ["b", "e", "f/x", "i", "n/j", "v", "y"]
        assert await fs.read_text(f"{ROOT}/v") == "rewritten\n"


@pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")
async def test_a_program_holding_a_file_open_writes_on_into_it_after_workspace_renames(
    tmp_path: Path,
) -> None:
    """A background program appends 400 lines to a descriptor it keeps (``exec 3>>``) while the
    workspace renames the file, then moves it into another directory, then renames that directory:
    every line ends up, in order, in the file under its last name (before: the rename made a new
    file and the program's later lines went to the old, unlinked one: ~55 of 200 survived)."""
    db = tmp_path / "ws.sqlite"
    expected = "".join(f"{i}\n" for i in range(1, 401))
    async with opened(db, shell=_shell(True), python=False) as ws:
        fs = ws.fs
        await fs.mkdir(f"{ROOT}/logs")
        await ok(
            ws, "(exec 3>>app.log; for i in $(seq 1 400); do echo $i >&3; sleep 0.01; done) >/dev/null 2>&1 &"
        )

        async def lines(path: str) -> int:
            return (await fs.read_text(path)).count("\n") if await fs.exists(path) else 0

        async def grown(path: str, at_least: int) -> bool:
            return await lines(path) >= at_least

        await until(lambda: grown(f"{ROOT}/app.log", 30))
        await fs.rename(f"{ROOT}/app.log", f"{ROOT}/renamed.log")
        await until(lambda: grown(f"{ROOT}/renamed.log", 120))
        await fs.rename(f"{ROOT}/renamed.log", f"{ROOT}/logs/renamed.log")
        await until(lambda: grown(f"{ROOT}/logs/renamed.log", 220))
        await fs.rename(f"{ROOT}/logs", f"{ROOT}/kept")
        final = f"{ROOT}/kept/renamed.log"

        async def complete() -> bool:
            return await fs.exists(final) and (await fs.read_text(final)).endswith("\n400\n")

        await until(complete)
        assert await fs.read_text(final) == expected
        assert sorted(await fs.ls(ROOT)) == [final]
        assert (await ok(ws, "cat kept/renamed.log")).stdout == expected
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "cat kept/renamed.log && ls")).stdout == expected + "kept\n"


@pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")
async def test_a_process_goes_on_working_in_a_directory_the_workspace_renames(tmp_path: Path) -> None:
    """A background loop appends by name (``>> log``) in its working directory; the workspace renames
    that directory meanwhile: every line lands in the directory's new name, and the old name does not
    come back (before: the directory was removed and made again; the loop went on in the removed one,
    and 6 of 30 lines reached the workspace)."""
    async with opened(tmp_path / "ws.sqlite", shell=_shell(True), python=False) as ws:
        fs = ws.fs
        await ok(
            ws,
            "mkdir app && cd app && (for i in $(seq 1 60); do echo $i >> log; sleep 0.02; done) >/dev/null 2>&1 &",
        )
        await until(lambda: fs.exists(f"{ROOT}/app/log"))
        await fs.rename(f"{ROOT}/app", f"{ROOT}/app2")

        async def complete() -> bool:
            path = f"{ROOT}/app2/log"
            return await fs.exists(path) and (await fs.read_text(path)).endswith("\n60\n")

        await until(complete)
        assert await fs.read_text(f"{ROOT}/app2/log") == "".join(f"{i}\n" for i in range(1, 61))
        assert not await fs.exists(f"{ROOT}/app")
        assert (await ok(ws, "ls; wc -l < app2/log")).stdout == "app2\n60\n"


# A server on a unix socket in ``run/``, its log there held open (``print`` per request, flushed).
_SOCKET_SERVER = """
import os, socket, sys
log = open("run/srv.log", "a", buffering=1)
s = socket.socket(socket.AF_UNIX)
s.bind("run/app.sock")
s.listen(5)
print("started", file=log)
while True:
    c, _ = s.accept()
    name = c.recv(100).decode()
    print("served", name, file=log)
    c.sendall(open(name, "rb").read())
    c.close()
"""

_ASK = (
    'python3 -c "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);'
    " s.sendall(sys.argv[2].encode()); print(s.recv(100).decode(), end='')\" {} {}"
)


@pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")
@pytest.mark.parametrize("special", ["socket", "fifo"])
async def test_a_directory_holding_a_socket_or_fifo_keeps_it_and_its_open_log_through_a_workspace_rename(
    tmp_path: Path, special: str
) -> None:
    """A server listens on ``run/app.sock`` and logs to ``run/srv.log`` (kept open); the workspace
    renames ``run`` to ``srv`` (a FIFO beside them, or not): the server still answers on
    ``srv/app.sock``, its later lines are in ``srv/srv.log``, every file keeps its inode. Before, a
    path only the sandbox holds (a socket, a FIFO) refused the move: the directory was removed and
    sent whole, the socket was gone ("No such file or directory") and the log's later lines went to
    the removed file."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=_shell(True), python=False) as ws:
        fs = ws.fs
        await fs.write_file(f"{ROOT}/server.py", _SOCKET_SERVER)
        fifo = "mkfifo run/pipe && " if special == "fifo" else ""
        started = await ok(
            ws,
            f"mkdir run && echo hello > run/data.txt && {fifo}(python3 server.py >/dev/null 2>&1 &)"
            " && for i in $(seq 1 200); do [ -S run/app.sock ] && break; sleep 0.05; done"
            " && stat -c '%i %n' run/data.txt run/srv.log",
        )
        assert "/workspace/run/app.sock" in started.skipped
        await fs.rename(f"{ROOT}/run", f"{ROOT}/srv")
        asked = await ok(ws, _ASK.format("srv/app.sock", "srv/data.txt") + " && stat -c '%i %n' srv/*")
        assert asked.stdout.splitlines()[0] == "hello"
        inodes = _inodes(asked.stdout.split("\n", 1)[1])
        assert {inodes[f"srv/{n}"] for n in ("data.txt", "srv.log")} == set(_inodes(started.stdout).values())
        assert ("srv/pipe" in inodes) == (special == "fifo")

        async def logged() -> bool:
            return "served srv/data.txt\n" in await fs.read_text(f"{ROOT}/srv/srv.log")

        await until(logged)
        assert await fs.read_text(f"{ROOT}/srv/srv.log") == "started\nserved srv/data.txt\n"
        assert await workspace_view(ws) == await sandbox_view(ws)
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "cat srv/srv.log && ls srv")).stdout == (
            "started\nserved srv/data.txt\ndata.txt\nsrv.log\n"
        )


# Appends a line to ``log`` in its working directory each time ``../go`` appears (and removes it).
ON_GO = (
    "cd d; n=0; until [ -e ../stop ]; do if [ -e ../go ]; then rm ../go; n=$((n + 1)); "
    'echo "line $n" >> log; fi; sleep 0.01; done'
)


@pytest.mark.skipif(not LIVE, reason="no live sandboxes here (cgroup freezer)")
async def test_a_process_stays_in_a_directory_the_workspace_wrote_into_and_then_renamed(
    tmp_path: Path,
) -> None:
    """A background process works in ``d``; the workspace writes ``d/x`` and then renames ``d`` to
    ``e`` (in one sync interval): the process is in ``e`` and its next line reaches ``e/log``, in the
    workspace and after a reopen. Before, the push did not follow a rename of a directory changed
    below since the mirror's revision: it removed ``d`` and sent ``e`` whole, and the process went on
    in a removed directory, every later line lost with nothing in ``skipped``."""
    db = tmp_path / "ws.sqlite"

    async def lines() -> list[str]:
        return (await ws.fs.read_text(f"{ROOT}/e/log")).splitlines()

    async with opened(db, python=False) as ws:
        await ok(ws, f"mkdir d && touch go && (setsid bash -c {shlex.quote(ON_GO)} > /dev/null 2>&1 &)")
        await until(lambda: ws.fs.exists(f"{ROOT}/d/log"))
        await ws.fs.write_file(f"{ROOT}/d/x", "the workspace's\n")
        await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/e")
        await ws.fs.write_file(f"{ROOT}/go", "")
        await until(lambda: _gone(ws, f"{ROOT}/go"))
        await ws.fs.write_file(f"{ROOT}/go", "")
        await until(lambda: _gone(ws, f"{ROOT}/go"))
        seen = await ok(ws, "sleep 0.3; cat e/log e/x; ls")
        assert seen.stdout == "line 1\nline 2\nline 3\nthe workspace's\ne\n"
        assert await lines() == ["line 1", "line 2", "line 3"]
        await ws.fs.write_file(f"{ROOT}/stop", "")
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "cat e/log")).stdout == "line 1\nline 2\nline 3\n"


async def _gone(ws: Any, path: str) -> bool:
    return not await ws.fs.exists(path)


CHATTY = (
    "cd d; n=0; until [ -e ../stop ]; do echo $n >> log; n=$((n + 1)); sleep 0.01; done; echo $n > ../count"
)


@pytest.mark.skipif(not LIVE, reason="no live sandboxes here (cgroup freezer)")
async def test_a_process_writing_in_a_directory_the_workspace_wrote_into_and_renamed_loses_nothing(
    tmp_path: Path,
) -> None:
    """As above, with the process appending to ``d/log`` every 10 ms, so the sync that brings the
    rename pulls its lines too: they go to ``e/log``, the process goes on there, and every line is
    kept, in order. Before, the pull refused its lines below the renamed directory (a conflict, as
    the rename could not be followed), the push removed ``d``, and every later line was lost."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, python=False) as ws:
        await ok(ws, f"mkdir d && (setsid bash -c {shlex.quote(CHATTY)} > /dev/null 2>&1 &)")
        await until(lambda: ws.fs.exists(f"{ROOT}/d/log"))
        await ws.fs.write_file(f"{ROOT}/d/x", "the workspace's\n")
        await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/e")
        before = len((await ws.fs.read_text(f"{ROOT}/e/log")).splitlines())

        async def grew() -> bool:
            return len((await ws.fs.read_text(f"{ROOT}/e/log")).splitlines()) > before + 20

        await until(grew, within=20)
        await ws.fs.write_file(f"{ROOT}/stop", "")
        await until(lambda: ws.fs.exists(f"{ROOT}/count"))
        count = int(await ws.fs.read_text(f"{ROOT}/count"))
        seen = await ok(ws, "cat e/x; ls")
        assert seen.stdout == "the workspace's\ncount\ne\nstop\n"
        assert seen.skipped == [], seen.skipped_reasons
        assert await ws.fs.read_text(f"{ROOT}/e/log") == "".join(f"{i}\n" for i in range(count))
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "wc -l < e/log")).stdout == f"{count}\n"
