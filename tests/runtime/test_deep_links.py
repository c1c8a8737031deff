"""Many symlinks at the end of a deep chain of directories: every step of their sync stays linear in
the size of their paths. Before, each step was quadratic in the depth: a pull's plan opened every
directory on the way for each link (``readlink_beneath``), a push made each link's parents real from
the top (``make_parent``), and forgetting paths walked up from every key of the mirror's state
(``forget``): 20,000 links 2,000 levels deep took hours in a thread of the owner's pool."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend, _mirror_push
from computer.runtime._forget import forget

DEPTH = 600
LINKS = 1000


async def test_links_at_the_end_of_a_deep_chain_sync_without_a_walk_per_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = "/".join(["c"] * DEPTH)
    opened = [0]  # directories named ``c`` opened by a descriptor (a walk down the chain)
    real_open = os.open

    def counted(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "c" and kwargs.get("dir_fd") is not None:
            opened[0] += 1
        return real_open(path, flags, *args, **kwargs)

    made = [0]
    make_parent = _mirror_push.make_parent

    def counted_parent(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return make_parent(*args, **kwargs)  # (the nodes it replaced: ``MirrorPush._parent`` refetches them)

    db = tmp_path / "ws.db"
    async with computer.Workspace(str(db), backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec(f"mkdir -p {chain}")).result()
        monkeypatch.setattr(os, "open", counted)
        source = f"import os\nfor i in range({LINKS}): os.symlink('../' * (i % 4 + 1), 's%d' % i)"
        result = await (await ws.runtime.exec(f'cd {chain} && python3 -c "{source}"', timeout=120)).result()
        monkeypatch.setattr(os, "open", real_open)
        assert result.status == "completed", result.stderr
        assert len(await ws.fs.readdir(f"/workspace/{chain}")) == LINKS
        assert opened[0] < 10 * DEPTH  # before: the chain walked down once a link (600,000)
    monkeypatch.setattr(_mirror_push, "make_parent", counted_parent)
    async with computer.Workspace(str(db), backends=[ShellBackend()]) as ws:  # a fresh mirror: a full push
        seen = await (
            await ws.runtime.exec(f"find c -type l | wc -l; readlink {chain}/s7", timeout=120)
        ).result()
        assert seen.stdout == f"{LINKS}\n../../../../\n", seen.stderr
        assert made[0] < 10  # before: once a link


class _Key(str):
    """A path that counts the steps up taken from it (``rpartition``), and from what they give."""

    steps = 0

    def rpartition(self, sep: str) -> tuple[str, str, str]:  # type: ignore[override]
        _Key.steps += 1
        head, mid, tail = super().rpartition(sep)
        return _Key(head), mid, tail


def test_forgetting_below_a_deep_chain_looks_each_directory_up_once() -> None:
    """``forget`` of the chain's top with 300 levels and 1,000 entries at the end: a step up per
    directory, not per key and level (before: each key walked up all its levels, ~345,000 steps
    here; 20,000 links 2,000 deep, ~80 GB of copies)."""
    chain = "/".join(["c"] * 300)
    state: dict[str, Any] = {_Key("/".join(["c"] * n)): ("d",) for n in range(1, 301)}
    state.update({_Key(f"{chain}/s{i}"): ("l",) for i in range(1000)})
    state[_Key("d")] = ("d",)
    chunks: dict[str, Any] = {f"{chain}/s{i}": object() for i in range(10)}
    _Key.steps, keys = 0, len(state)
    forget(state, [chunks], ["c/c/c", f"{chain}/s5"])
    assert _Key.steps < 3 * keys
    assert set(state) == {"c", "c/c", "d"}
    assert chunks == {}


async def test_a_push_of_many_symlinks_gives_the_loop_turns_between_them(tmp_path: Path) -> None:
    """A fresh mirror's push reads each symlink's target from the workspace on the owner's loop:
    between every 256 of them the loop runs other work (20,000 at the end of a 2,000-level chain
    held every workspace of the process ~0.7 s a page)."""
    from computer.runtime._context import LocalExecContext

    count = 1100
    db = tmp_path / "ws.db"
    async with computer.Workspace(str(db), backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace/d", recursive=True)
        for i in range(count):
            await ws.fs.symlink(f"t{i}", f"/workspace/d/s{i}")
    turns = [0]
    pages: list[tuple[int, int]] = []  # (symlinks on the page, turns the loop took while it was made)
    sync_push = LocalExecContext.sync_push

    async def recorded(self: LocalExecContext, *args: Any) -> Any:
        before = turns[0]
        page = await sync_push(self, *args)
        pages.append((len(page.symlinks), turns[0] - before))
        return page

    async def turning() -> None:
        while True:
            turns[0] += 1
            await asyncio.sleep(0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LocalExecContext, "sync_push", recorded)
        async with computer.Workspace(str(db), backends=[ShellBackend()]) as ws:
            turner = asyncio.ensure_future(turning())
            seen = await (await ws.runtime.exec("ls d | wc -l; readlink d/s7")).result()
            turner.cancel()
            assert seen.stdout == f"{count}\nt7\n"
    assert [turned >= links // 256 for links, turned in pages if links] == [True], pages
