"""Large files (over 1 MiB: pulled and pushed as chunks) through what programs do to them: removed in
one call and made again with the same bytes in a later one (an archive restored, a file gunzipped),
replaced by a rename while another name still holds the old file (an editor's save next to a hard
link). Real programs across calls, checked through ``ws.fs``, later runs and a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import ROOT, digest, ok, opened

BIG = "head -c 2500000 /dev/urandom"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_large_file_removed_then_restored_with_the_same_bytes_reaches_the_workspace(
    tmp_path: Path, live: bool
) -> None:
    """Before: the mirror kept the chunk list of a large file after pulling its removal, so the next
    pull took those chunks as held by the store (which had freed them): "unknown chunk", the restored
    file refused, and dropped from the sandbox too: gone on both sides."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(ws, f"mkdir d && {BIG} > d/big && ln d/big d/big2 && sha256sum d/big | cut -c1-64")
        expected = made.stdout.strip()
        await ok(ws, "tar cf t.tar d && gzip -c d/big > big.gz")
        await ok(ws, "rm -r d")
        restored = await ok(ws, "tar xf t.tar && rm t.tar && stat -c %h d/big")
        assert restored.stdout == "2\n" and restored.skipped == [], restored.skipped_reasons
        for name in ("d/big", "d/big2"):
            assert digest(await ws.fs.read_file(f"{ROOT}/{name}")) == expected
            assert (await ws.fs.stat(f"{ROOT}/{name}")).nlink == 2
        await ok(ws, "rm -r d")
        unzipped = await ok(ws, "mkdir d && gunzip -c big.gz > d/big && rm big.gz")
        assert unzipped.skipped == [], unzipped.skipped_reasons
        assert digest(await ws.fs.read_file(f"{ROOT}/d/big")) == expected
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "sha256sum d/big | cut -c1-64")).stdout.strip() == expected


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_large_file_replaced_by_a_rename_leaves_its_other_name_alone(
    tmp_path: Path, live: bool
) -> None:
    """``ln data.bin data.bak``, then a program saves data.bin as editors do (a new file renamed over
    it): data.bak keeps the old bytes. Before: the pull wrote the new data.bin into the file the
    workspace's two names shared, so data.bak took the new bytes in the workspace (and in the sandbox
    after a reopen): the old version was lost (seen once the run's hard link to a large file reached
    the workspace at all, the fix before this one)."""
    save = "import os; open('tmp', 'wb').write(os.urandom(2_500_000)); os.replace('tmp', 'data.bin')"
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        old = (await ok(ws, f"{BIG} > data.bin && ln data.bin data.bak && sha256sum data.bin")).stdout[:64]
        new = (await ok(ws, f'python3 -c "{save}" && sha256sum data.bin')).stdout[:64]
        assert new != old
        assert digest(await ws.fs.read_file(f"{ROOT}/data.bak")) == old
        assert digest(await ws.fs.read_file(f"{ROOT}/data.bin")) == new
        assert (await ws.fs.stat(f"{ROOT}/data.bak")).nlink == 1
    async with opened(db, python=False) as ws:
        seen = await ok(ws, "sha256sum data.bin data.bak | cut -c1-64")
        assert seen.stdout.split() == [new, old]


async def test_a_pull_removes_the_staging_left_by_pulls_that_never_finished(tmp_path: Path) -> None:
    """A pull cut into pages stages new chunks under ``/.computer/sync/<id>`` until its last page; one
    cancelled between pages (or whose worker was lost) left that directory, its chunks and their
    quota, forever. The next pull with large files removes those untouched for an hour, and only
    those."""
    import time

    old = int((time.time() - 2 * 3600) * 1000)
    async with opened(tmp_path / "ws.sqlite", python=False) as ws:
        ws.fs.commit_batch(
            {"/.computer/sync/dead/c1": b"x" * 1000, "/.computer/sync/recent/c2": b"y" * 1000},
            mkdirs=["/.computer/sync/dead", "/.computer/sync/recent"],
            mtimes={
                "/.computer/sync/dead": old,
                "/.computer/sync/dead/c1": old,
                "/.computer/sync/recent": old,
            },
        )
        made = await ok(ws, f"{BIG} > big && sha256sum big")
        assert made.skipped == [], made.skipped_reasons
        assert not await ws.fs.exists("/.computer/sync/dead")
        assert await ws.fs.read_file("/.computer/sync/recent/c2") == b"y" * 1000  # touched lately: kept
        assert digest(await ws.fs.read_file(f"{ROOT}/big")) == made.stdout[:64]
