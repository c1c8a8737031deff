"""Modes that lock the sync's process out (``computer.runtime._lifts``).

A program may take permission bits away from its own files (``chmod 000 d``, ``chmod 500 e``). On a
host where the sync's process cannot override file modes (not root: the sandbox's files are its own)
a pull lost what it could not see (a locked directory's files were never pulled, or deleted from the
workspace by a full walk; an unreadable file was left out without a word) and a push into a locked
directory failed the run. And on any host, a program that locked the sandbox's top directory (``chmod
000 .``) failed every later run at ``cd`` with nothing left to undo it.

The non-root cases run in a child process without ``CAP_DAC_OVERRIDE`` (``setpriv`` as root, as CI
runs; as it is when not root), through ``_locked_guest``: each step its own exec call, the
workspace's writes below locked directories, a full walk through one, and a reopen.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from child_json import child_report

from ._support import ROOT, opened, run

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BIG_MD5 = hashlib.md5(bytes(range(256)) * (12 * 1024)).hexdigest()


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_locked_top_directory_does_not_fail_every_later_run(tmp_path: Path, live: bool) -> None:
    from computer.runtime import ShellBackend

    async with opened(tmp_path / "ws.db", shell=ShellBackend(live=live), python=False) as ws:
        locked = await run(ws, "chmod 000 . && echo locked")
        assert locked.status == "completed", locked.stderr
        # Decision: the workspace keeps the top's mode as the runs see it (its owner's search bit on)
        assert (await ws.fs.stat(ROOT)).mode & 0o7777 == 0o100
        # Its owner's search bit is back (a run starts there), every other bit as the program set it:
        # writing needs the program's own chmod, as on any machine.
        after = await run(
            ws, "stat -c %a . && (echo x > f) 2>/dev/null || chmod 750 . && echo x > f && cat f"
        )
        assert after.status == "completed", after.stderr
        assert after.stdout == "100\nx\n"
        assert (await run(ws, "stat -c %a .")).stdout == "750\n"
        assert (await ws.fs.read_file(f"{ROOT}/f")) == b"x\n"
        assert (await ws.fs.stat(ROOT)).mode & 0o777 == 0o750  # before: 0o755, it never took the top's
        await run(ws, "chmod 000 .")
    async with opened(tmp_path / "ws.db", shell=ShellBackend(live=live), python=False) as ws:
        again = await run(ws, "stat -c %a . && chmod 700 . && cat f")  # a rebuilt mirror: the same
        assert again.status == "completed" and again.stdout == "100\nx\n", again.stderr


def _guest_command(db: Path, live: bool) -> list[str]:
    argv = [sys.executable, "-m", "tests.fidelity._locked_guest", str(db), "live" if live else "call"]
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to run without CAP_DAC_OVERRIDE as root")
    # Every capability dropped but CAP_SETFCAP: a user namespace that maps uid 0 needs it (bubblewrap's).
    caps = "-all,+setfcap"
    return [setpriv, f"--inh-caps={caps}", f"--ambient-caps={caps}", f"--bounding-set={caps}", "--", *argv]


def _guest(tmp_path: Path, live: bool) -> dict[str, Any]:
    os.chmod(tmp_path, 0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    report: dict[str, Any] = child_report(
        _guest_command(tmp_path / "ws.db", live), env=env, timeout=600, cwd=REPO
    )
    return report


def _file(seen: dict[str, Any], mode: int, data: str | None = None) -> None:
    assert isinstance(seen, dict), seen
    assert seen["mode"] == mode, seen
    if data is not None:
        assert seen["data"] == data, seen


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
def test_what_a_program_locks_is_synced_both_ways_without_mode_overrides(tmp_path: Path, live: bool) -> None:
    seen = _guest(tmp_path, live)
    assert seen["overrides"] is False  # the child really cannot override modes
    steps = ("lock", "modes_inside", "read_back", "moved", "top", "top_after", "top_read_only_after")
    for step in (*steps, "top_read_only", "reopened_run"):
        assert seen[step]["status"] == "completed", (step, seen[step])
        assert seen[step]["skipped"] == {}, (step, seen[step])
    # Pulled whole, with the program's modes: a locked directory's files, an unreadable file.
    assert set(seen["lock"]["pulled"]) >= {f"{ROOT}/{p}" for p in ("d", "d/f", "t", "e", "e/g")}
    after = seen["after_lock"]
    _file(after[f"{ROOT}/d"], 0)
    _file(after[f"{ROOT}/d/f"], 0o644, "hi\n")
    _file(after[f"{ROOT}/t"], 0, "top\n")
    _file(after[f"{ROOT}/e"], 0o500)
    _file(after[f"{ROOT}/e/g"], 0o644, "deep\n")
    # The sandbox still sees what the program set (the sync's lifts are undone), and nothing was
    # pulled again for them.
    assert seen["modes_inside"]["stdout"] == "d 0\nt 0\ne 500\n"
    assert seen["modes_inside"]["pulled"] == []
    # The workspace's writes below and into locked paths reached the sandbox, with their modes.
    back = seen["read_back"]["stdout"].splitlines()
    assert back[:4] == ["d 0", "t 0", "e 500", "big 444"]
    assert back[4:] == [
        "from the workspace",
        "the workspace's t",
        "into a read-only directory",
        f"{BIG_MD5}  -",
    ]
    # A full walk (a moved directory breaks the watch) goes through the locked directory.
    moved = seen["after_move"]
    assert moved[f"{ROOT}/d"].startswith("error: [Errno 2]")
    _file(moved[f"{ROOT}/d2"], 0)
    _file(moved[f"{ROOT}/d2/f"], 0o644, "hi\n")
    _file(moved[f"{ROOT}/d2/new"], 0o644, "from the workspace")
    assert seen["top_after"]["stdout"] == "100\nbig\nd2\ne\nt\n"
    assert seen["top_mode"] == 0o500  # the top's mode is the workspace's (before: it never took it)
    assert seen["top_read_only_after"]["stdout"] == "500\npushed"
    # A race: the workspace writes into a directory a running program keeps read-only.
    race = seen["race"]
    if live:  # the tick's push lifted it, wrote, and put its bits back while the program waited
        assert race["status"] == "completed" and race["skipped"] == {}, race
        assert race["stdout"] == "ready\n500\nfrom the workspace1\n"
    else:  # both made ``r``: the program's file is pulled beside the workspace's, ``r`` keeps the
        # workspace's mode (until s52 ``r`` and ``r/own`` were refused: ``r/own`` lost)
        assert race["stdout"] == "ready\n500\n1\n", race
        assert race["skipped"] == {} and f"{ROOT}/r/own" in race["pulled"], race
    assert seen["after_race"]["status"] == "completed", seen["after_race"]
    assert seen["after_race"]["stdout"] == "from the workspace\n700\n"
    reopened = seen["reopened"]
    _file(reopened[f"{ROOT}/d2"], 0)
    _file(reopened[f"{ROOT}/d2/f"], 0o644, "hi\n")
    _file(reopened[f"{ROOT}/t"], 0, "the workspace's t")
    _file(reopened[f"{ROOT}/e/h"], 0o644, "into a read-only directory")
    _file(reopened[f"{ROOT}/big"], 0o444)
    _file(reopened[f"{ROOT}/r/new"], 0o644, "from the workspace")
    assert seen["reopened_run"]["stdout"] == f"hi\nfrom the workspace{BIG_MD5}  -\n"
