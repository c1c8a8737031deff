"""A tree with more directories than a watch may hold (``_watch.MAX_DIRS``, cut to 200 here) is walked,
not watched: the watch gives its inotify watches back (they are the host user's, shared with every
other process), every run's pull is still whole, a live sandbox's ticks still bring a background
process's files (walking at most a tenth of the time), and once the tree is small again it is watched
again."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import time
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend, _watch
from computer.runtime._mirror import Mirror


def _mirror(backend: ShellBackend, ws: computer.Workspace) -> Mirror:
    live = backend._lives._live.get(ws.fs.instance)
    if live is not None:
        return live.mirror
    (mirror,) = backend.mirrors.idle_mirrors(ws.fs.instance)
    return mirror


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_tree_past_a_watchs_share_is_walked_whole_and_watched_again_once_small(
    monkeypatch: pytest.MonkeyPatch, live: bool
) -> None:
    monkeypatch.setattr(_watch, "MAX_DIRS", 200)
    backend = ShellBackend(live=live)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        made = await (
            await ws.runtime.exec("mkdir -p t/d{0..29}/{0..9} && touch t/d{0..29}/{0..9}/f")
        ).result()
        assert made.status == "completed" and len(made.pulled) == 631
        mirror = _mirror(backend, ws)
        assert mirror.unwatched and mirror.watch is None
        await ws.fs.write_file("/workspace/t/d0/0/from-ws", b"w")
        seen = await (
            await ws.runtime.exec("cat t/d0/0/from-ws; touch t/d29/9/g; find t -type f | wc -l")
        ).result()
        assert (seen.stdout, seen.pulled) == ("w302\n", ["/workspace/t/d29/9/g"])
        assert mirror.unwatched and mirror.watch is None
        if live:  # a background writer's file still arrives, from a paced walk
            await (await ws.runtime.exec("(sleep 0.3; echo bg > t/d5/5/bg) > /dev/null 2>&1 &")).result()
            deadline = time.monotonic() + 20
            while not await ws.fs.exists("/workspace/t/d5/5/bg"):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert mirror.quiet(paced=True) or mirror.walk_next <= time.monotonic()
            # The ticks walk no more while ``rm`` runs: one landing inside it (``rm`` descheduled, as on
            # CI's loaded machine) saw ``t/d14/2`` gone and ``t/d14`` still there, and the run's pulled
            # listed both (reproduced with ``rm -rf t/d14/2 && sleep 1.5`` first). The run's end walks.
            quiet = mirror.quiet
            monkeypatch.setattr(mirror, "quiet", lambda paced=False: paced or quiet(paced))
        small = await (await ws.runtime.exec("rm -rf t/d{1..29}")).result()
        assert small.pulled == [f"/workspace/t/d{i}" for i in sorted(range(1, 30), key=str)]
        if live:
            monkeypatch.setattr(mirror, "quiet", quiet)
        again = await (await ws.runtime.exec("touch t/d0/new")).result()  # its push arms a watch
        assert again.pulled == ["/workspace/t/d0/new"]
        assert not mirror.unwatched and mirror.watch is not None and not mirror.watch.over


class _OutOfWatches:
    """libc as ``_watch`` calls it, but ``inotify_add_watch`` refused (ENOSPC) after ``allowed`` calls:
    the host user's ``max_user_watches`` spent by other processes of the uid."""

    def __init__(self, libc: object, allowed: int) -> None:
        self.libc, self.allowed = libc, allowed

    def __getattr__(self, name: str) -> object:
        return getattr(self.libc, name)

    def inotify_add_watch(self, fd: int, path: bytes, mask: int) -> int:
        if self.allowed <= 0:
            ctypes.set_errno(errno.ENOSPC)
            return -1
        self.allowed -= 1
        return int(self.libc.inotify_add_watch(fd, path, mask))  # type: ignore[attr-defined]


def test_a_watch_the_kernel_refuses_gives_its_watches_back_and_is_walked_paced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of the user's watches (ENOSPC), a watch only broke: the mirror armed a new one at every
    live sandbox tick, was refused again and walked the whole tree each time, unpaced (9,000 files
    took 25 % of a core with nothing running). Now it is over, as a tree past ``MAX_DIRS``: its
    watches go back and the mirror walks it at most a tenth of the time."""
    for d in range(5):
        (tmp_path / f"d{d}" / "e").mkdir(parents=True)
    monkeypatch.setattr(_watch, "_libc", _OutOfWatches(_watch._libc, allowed=3))
    watch = _watch.TreeWatch(tmp_path)
    assert watch.over and watch.drain() is None
    shared = _watch._instance()
    assert all(held is not watch._held for held in shared.owners.values())
    watch.close()


async def test_a_live_sandbox_out_of_watches_still_syncs_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = ShellBackend()
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        monkeypatch.setattr(_watch, "_libc", _OutOfWatches(_watch._libc, allowed=0))
        started = await (
            await ws.runtime.exec(
                "mkdir -p t/d{0..9}; (sleep 0.3; echo bg > t/d5/bg; sleep 600) > /dev/null 2>&1 &"
            )
        ).result()
        assert started.status == "completed" and "/workspace/t/d9" in started.pulled
        mirror = _mirror(backend, ws)
        assert mirror.watch is None  # given up (it held a broken watch, armed again every tick)
        deadline = time.monotonic() + 20
        while not await ws.fs.exists("/workspace/t/d5/bg"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await ws.fs.write_file("/workspace/t/d0/from-ws", b"w")
        seen = await (await ws.runtime.exec("cat t/d0/from-ws t/d5/bg")).result()
        assert seen.stdout == "wbg\n"
