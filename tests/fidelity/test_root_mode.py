"""The mode of ``/workspace`` itself round-trips (SPEC section 10: "permission bits (never
setuid/setgid) ... round-trip"), as a directory's below it does: what a run sets (``chmod 700
/workspace``, ``chmod 750 .``) is in the workspace and in every later run, per call and live, and after
a reopen (a mirror rebuilt from the SQLite file); a mode the workspace gives the root (another
mirror's pull: the python backend's) reaches a warm or live mirror without sending it the whole tree
again. Each step is its own exec call, checked by a real ``stat`` in a later one.

Decisions (``computer.runtime._dir_times``): setuid/setgid never survive, on the root either; the
root's owner keeps its search bit (a run starts there), and the workspace stores the mode with it, as
the runs see it (``chmod 000 .``: see ``test_locked_modes``)."""

from __future__ import annotations

import asyncio
import errno
import io
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from computer.runtime._context import LocalExecContext

from ._support import KINDS, PYTHON_LIVE, ROOT, ok, opened, run, settle, shell, started


async def mode_of(ws: object) -> int:
    return (await ws.fs.stat(ROOT)).mode & 0o7777  # type: ignore[attr-defined]


@pytest.mark.parametrize("live", KINDS)
async def test_a_runs_chmod_of_the_workspace_root_is_kept_through_a_reopen(
    tmp_path: Path, live: bool
) -> None:
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "echo x > f")
        made = await ok(ws, "chmod 700 /workspace && stat -c %a /workspace")
        assert made.stdout == "700\n" and made.skipped == []
        assert made.pulled == [ROOT]  # the root's mode changed, as a chmod-ed directory is listed
        assert await mode_of(ws) == 0o700
        assert (await ok(ws, "stat -c %a /workspace")).stdout == "700\n"
        await ok(ws, "chmod 750 .", cwd=ROOT)
        assert await mode_of(ws) == 0o750
        # setgid (a shared directory's ``chmod g+s``) taken off the root too; the sticky bit kept
        assert (await ok(ws, "chmod 2775 . && stat -c %a .")).stdout in ("775\n", "2775\n")
        assert (await ok(ws, "stat -c %a .")).stdout == "775\n"
        assert await mode_of(ws) == 0o775
        await ok(ws, "chmod 1777 .")
        assert (await ok(ws, "stat -c %a .")).stdout == "1777\n"
        assert await mode_of(ws) == 0o1777
        # a time set after the chmod: both kept
        both = await ok(ws, "echo y > g && chmod 710 . && touch -d @1500000000 .")
        assert both.pulled == [ROOT, f"{ROOT}/g"]  # its time moved too: listed all the same
        assert (await ok(ws, "stat -c '%a %Y' . && cat f")).stdout == "710 1500000000\nx\n"
        assert await mode_of(ws) == 0o710
        assert (await ws.fs.stat(ROOT)).mtime == 1_500_000_000_000
    async with opened(db, shell=shell(live), python=False) as ws:  # a new mirror, from the SQLite file
        assert (await ok(ws, "stat -c '%a %Y' . && cat f")).stdout == "710 1500000000\nx\n"
        await ok(ws, "chmod 755 .")
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "stat -c %a .")).stdout == "755\n"  # back to the default mode: kept too


@pytest.mark.parametrize("live", KINDS)
async def test_a_mode_the_workspace_gives_the_root_reaches_a_warm_mirror_in_place(
    tmp_path: Path, live: bool
) -> None:
    """``commit_batch(modes=...)`` on the root is what another mirror's pull of ``chmod . `` does.
    Before, the mirror kept its top's mode (and the change log's entry of the root sent it the whole
    tree again: every file made anew, a new inode)."""
    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        inode = (await ok(ws, "echo x > f && stat -c %i f")).stdout
        ws.fs.commit_batch({}, modes={ROOT: 0o711})
        assert (await ok(ws, "stat -c %a . && stat -c %i f")).stdout == f"711\n{inode}"
        # one that would lock the sandbox's user out of its own directory: the owner's search bit is
        # kept in the sandbox, so the run starts there and can take the mode back
        ws.fs.commit_batch({}, modes={ROOT: 0o000})
        locked = await ok(ws, "stat -c %a . && chmod 700 . && cat f")
        assert locked.stdout == "100\nx\n"
        assert await mode_of(ws) == 0o700


@pytest.mark.parametrize("live", KINDS)
async def test_a_workspace_write_during_a_run_refuses_nothing_of_the_roots_mode(
    tmp_path: Path, live: bool
) -> None:
    """A workspace write below the root while the run chmod-s or touches the root is no conflict
    (before, the root's mode was refused for it and ``/workspace`` listed in ``skipped``, its time
    dropped unsaid); a change of the root's own mode in the workspace meanwhile is, and the workspace's
    mode stays (in the sandbox too)."""
    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, "true")
        handle = await started(ws, "chmod 700 . && touch -d @1500000000 . && echo ready && sleep 0.5")
        written = time.time_ns() // 1_000_000
        await ws.fs.write_file(f"{ROOT}/from-ws", b"w")
        result = await settle(handle)
        assert result.status == "completed" and result.skipped == [], result.skipped_reasons
        assert await mode_of(ws) == 0o700
        # Its time: the later of the two, as on a disk (the workspace's new name came after the run's
        # touch: s63, a name the workspace makes moves its directory's time), no conflict either way.
        assert (await ws.fs.stat(ROOT)).mtime >= written
        assert (await ok(ws, "stat -c %a . && cat from-ws")).stdout == "700\nw"
        handle = await started(ws, "chmod 750 . && echo ready && sleep 0.5")
        ws.fs.commit_batch({}, modes={ROOT: 0o711})
        await settle(handle)
        assert await mode_of(ws) == 0o711
        assert (await ok(ws, "stat -c %a .")).stdout == "711\n"


@pytest.mark.parametrize("live", [pytest.param(False, id="one-off"), pytest.param(True, id="live")])
async def test_the_python_backends_chmod_of_its_cwd_reaches_the_shell(tmp_path: Path, live: bool) -> None:
    if live and not PYTHON_LIVE:
        pytest.skip("no cgroup freezer here")
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=shell(live), python_live=live) as ws:
        await ok(ws, "stat -c %a .")  # the shell's mirror is warm (its sandbox lives, live)
        await ok(ws, "import os\nos.chmod('.', 0o2710)", backend="python", timeout=30.0)
        assert await mode_of(ws) == 0o710
        assert (await ok(ws, "stat -c %a .")).stdout == "710\n"
        seen = await ok(ws, "import os\nprint(oct(os.stat('.').st_mode & 0o7777))", backend="python")
        assert seen.stdout == "0o710\n"
    async with opened(db, shell=shell(live), python_live=live) as ws:
        assert (await ok(ws, "stat -c %a .")).stdout == "710\n"


async def test_a_running_program_sees_the_workspaces_root_mode_within_the_ticks(tmp_path: Path) -> None:
    """A live sandbox whose program keeps running sees the workspace's change of the root's mode within
    its ticks, not only at its next run."""
    async with opened(tmp_path / "ws.sqlite", shell=shell(True), python=False) as ws:
        handle = await started(
            ws,
            "echo ready; for i in $(seq 600); do [ $(stat -c %a .) = 711 ] && break; sleep 0.05; done; "
            "stat -c %a .",
        )
        ws.fs.commit_batch({}, modes={ROOT: 0o711})
        result = await asyncio.wait_for(settle(handle), 120)
        assert result.stdout == "ready\n711\n"


async def test_a_live_pull_that_fails_sends_the_roots_mode_and_time_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live sandbox's pull that fails (a full disk) is sent again by the next one, the root's own mode
    and time too (before: the file came, the top's ``chmod``/``touch`` were lost and the next push put
    the store's back in the sandbox). Every pull fails while the run goes on: under load a live tick
    pulled during the run, took a single injected failure, and the run's own pull then succeeded
    (1 run in 10 with four busy loops beside it)."""
    failing = [True]
    failed_pulls = [0]
    sync_pull = LocalExecContext.sync_pull

    async def full(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        if failing[0]:
            failed_pulls[0] += 1
            raise OSError(errno.ENOSPC, "no space left (the test's)")
        return await sync_pull(self, pull, base_rev)

    async with opened(tmp_path / "ws.sqlite", shell=shell(True), python=False) as ws:
        await ok(ws, "mkdir s")  # (a file made in the root itself would send the root's time anyway)
        monkeypatch.setattr(LocalExecContext, "sync_pull", full)
        failed = await run(ws, "echo y > s/g && chmod 700 . && touch -d @1500000000 .")
        failing[0] = False
        assert failed.status == "failed" and failed_pulls[0] >= 1, (failed.status, failed.error)
        again = await ok(ws, "stat -c '%a %Y' . && cat s/g")
        assert again.stdout == "700 1500000000\ny\n"
        assert await mode_of(ws) == 0o700
        assert (await ws.fs.stat(ROOT)).mtime == 1_500_000_000_000


def _tar_of_the_top(mode: int, mtime: int) -> bytes:
    """A tar whose first entry is ``./`` itself (as ``tar -C dir -cf a.tar .`` makes one), then a file."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        top = tarfile.TarInfo("./")
        top.type, top.mode, top.mtime = tarfile.DIRTYPE, mode, mtime
        tar.addfile(top)
        data = b"from the tar\n"
        member = tarfile.TarInfo("./notes.txt")
        member.size, member.mtime = len(data), mtime
        tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("live", KINDS)
async def test_tar_extracting_into_the_workspace_root_sets_its_mode_and_time(
    tmp_path: Path, live: bool
) -> None:
    """``tar xf`` of an archive made with ``-C dir .`` gives ``.`` the archive's mode and time, as a
    real program sets them: kept, and seen again after a reopen."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/in")
        await ws.fs.write_file(f"{ROOT}/in/a.tar", _tar_of_the_top(0o750, 1_400_000_000))
        result = await ok(ws, "tar -xf in/a.tar --no-same-owner && rm in/a.tar && stat -c '%a %Y' .")
        assert result.stdout == "750 1400000000\n"
        assert await mode_of(ws) == 0o750
        assert (await ws.fs.stat(ROOT)).mtime == 1_400_000_000_000
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "stat -c '%a %Y' . && cat notes.txt")).stdout == "750 1400000000\nfrom the tar\n"


@pytest.mark.parametrize("live", KINDS)
async def test_a_root_the_workspace_removed_comes_back_with_the_default_mode(
    tmp_path: Path, live: bool
) -> None:
    """``fs.rm("/workspace")`` after a run's ``chmod 700 .``: the next run's top is the directory its
    pull makes again (0o755), not the removed one (before, that run saw 700 and its pull made 755)."""
    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, "chmod 700 . && echo x > f")
        await ws.fs.rm(ROOT, recursive=True)
        again = await ok(ws, "stat -c %a . && ls && echo y > g")
        assert again.stdout == "755\n" and again.pulled == [f"{ROOT}/g"]
        assert await mode_of(ws) == 0o755
