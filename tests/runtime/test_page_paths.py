"""A pull's pages are bounded by the length of the paths they name too (``PAGE_PATHS``), not only by
their count: a page is one transaction on the owner's event loop, shared by every workspace of the
process, and its cost grows with its paths' length. A program's chain of 2,000 nested directories
(`mkdir c; cd c` in a loop, 4 MB of paths) came on one page of 2,000 and held the loop ~0.57 s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend
from computer.runtime._backend import PAGE_FILES, PAGE_PATHS
from computer.runtime._context import LocalExecContext

DEPTH = 1200  # "/workspace" + "/c" * 1200: paths up to 2,410 characters, ~1.45 M in all
FILES = 300  # at the bottom: ~0.72 M characters of paths, fewer than a page's ``PAGE_FILES``


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_a_deep_chain_is_pulled_on_pages_of_bounded_path_length(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, live: bool
) -> None:
    pages: list[tuple[int, int, int]] = []  # characters of each page's directories, files, removals
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append(
            (
                sum(len(d.path) for d in pull.dirs),
                sum(len(f.path) for f in pull.files),
                sum(len(p) for p in pull.deleted),
            )
        )
        return await sync_pull(self, pull, base_rev)

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    db = tmp_path / "ws.db"
    chain = "/".join(["c"] * DEPTH)
    async with computer.Workspace(str(db), backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        pages.clear()
        made = await (
            await ws.runtime.exec(
                f"mkdir -p {chain} && cd {chain} && touch f{{1..{FILES}}}",
                timeout=120,
            )
        ).result()
        assert made.status == "completed", made.stderr
        assert made.skipped == []
        listed = await (await ws.runtime.exec("find c -type d | wc -l; find c -type f | wc -l")).result()
        assert listed.stdout == f"{DEPTH}\n{FILES}\n"
        assert len(await ws.fs.readdir(f"/workspace/{chain}")) == FILES
        assert sum(dirs for dirs, _, _ in pages) > 4 * PAGE_PATHS  # the chain came, on several pages
        assert sum(files for _, files, _ in pages) > 2 * PAGE_PATHS
        assert all(dirs <= PAGE_PATHS and files <= PAGE_PATHS for dirs, files, _ in pages), pages
        pages.clear()
        # Fewer removals than a page's ``PAGE_FILES``, more characters than its ``PAGE_PATHS`` (what a
        # live sync saw of ``rm -rf c`` under load, mid-way: one page of 1.4 M characters)
        bottom = await (await ws.runtime.exec(f"cd {chain} && rm f* && echo gone", timeout=120)).result()
        assert bottom.stdout == "gone\n", bottom.stderr
        assert sum(gone for _, _, gone in pages) > 2 * PAGE_PATHS
        assert all(gone <= PAGE_PATHS for _, _, gone in pages), pages
        pages.clear()
        removed = await (await ws.runtime.exec("rm -rf c && echo gone", timeout=120)).result()
        assert removed.stdout == "gone\n", removed.stderr
        assert not await ws.fs.exists("/workspace/c")
        assert sum(gone for _, _, gone in pages) > 4 * PAGE_PATHS
        assert all(gone <= PAGE_PATHS for _, _, gone in pages), pages
        await (
            await ws.runtime.exec(f"mkdir -p {chain[: 2 * 300]} && touch {chain[: 2 * 300]}/kept")
        ).result()
    async with computer.Workspace(str(db), backends=[ShellBackend(live=live)]) as ws:
        assert await ws.fs.exists(f"/workspace/{chain[: 2 * 300]}/kept")
        again = await (await ws.runtime.exec("find c | wc -l")).result()
        assert again.stdout == "301\n"


COUNT = 2500  # symlinks, and names of one file: past a page's ``PAGE_FILES``, made within one sync


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_many_symlinks_and_hard_links_are_pulled_on_pages_of_their_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, live: bool
) -> None:
    """Symlinks and hard links come on pages of at most ``PAGE_FILES`` too (all on one page before:
    27,000 symlinks held the owner's loop 0.6 s, 20,000 names of one file 0.3 s), the directories
    they are in made first; everything is there after a reopen."""
    pages: list[tuple[int, int, int]] = []  # each page's directories, symlinks and files
    names: set[str] = set()  # the files' paths pulled
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append((len(pull.dirs), len(pull.symlinks), len(pull.files)))
        names.update(f.path for f in pull.files)
        return await sync_pull(self, pull, base_rev)

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    db = tmp_path / "ws.db"
    make = (
        "import os\n"
        "os.makedirs('d/e')\n"
        "open('d/a', 'w').write('shared')\n"
        f"for i in range({COUNT}):\n"
        "    os.symlink('../a' * (i % 3 + 1), f'd/e/s{i}')\n"
        "    os.link('d/a', f'd/l{i}')\n"
    )
    async with computer.Workspace(str(db), backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        pages.clear()
        names.clear()
        made = await (await ws.runtime.exec(f'python3 -c "{make}"', timeout=120)).result()
        assert made.status == "completed", made.stderr
        assert made.skipped == []
        assert sum(links for _, links, _ in pages) == COUNT
        assert len(names) == COUNT + 1
        if not live:  # live: a sync during the run (a loaded host) pulls the file again as names are added
            assert sum(files for _, _, files in pages) == COUNT + 1
        assert all(links <= PAGE_FILES and files <= PAGE_FILES for _, links, files in pages), pages
        assert await ws.fs.readlink(f"/workspace/d/e/s{COUNT - 1}") == "../a" * ((COUNT - 1) % 3 + 1)
        assert await ws.fs.read_text(f"/workspace/d/l{COUNT - 1}") == "shared"
    async with computer.Workspace(str(db), backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.write_file("/workspace/d/l7", "changed")  # one file, many names
        seen = await (
            await ws.runtime.exec("find d/e -type l | wc -l; stat -c %h d/a; cat d/a; readlink d/e/s4")
        ).result()
        assert seen.stdout == f"{COUNT}\n{COUNT + 1}\nchanged../a../a\n"
