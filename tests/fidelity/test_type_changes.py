"""A path a run gives another type: every pair of kinds (file, executable, directory, empty directory,
symlink to a file, to a directory, dangling, hard link) made in one call and changed in the next, all in
one pull. What the run left equals what a later call sees, and what a call sees after a reopen (a
mirror rebuilt from the SQLite file). A symlink the program replaced by a file used to be written
through: the bytes reached the link's target (outside the mount root for ``/secret/config``), or the
whole pull failed for a link to a directory (``IsADirectoryError``), and a live sandbox then failed
every later run."""

from __future__ import annotations

from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend

from ._support import ok, opened

MAKE = {
    "file": "echo F{n} > {p}",
    "exe": "echo E{n} > {p}; chmod 755 {p}",
    "dir": "mkdir {p}; echo D{n} > {p}/in",
    "empty": "mkdir {p}",
    "symf": "echo T{n} > {p}.t{n}; ln -s {p}.t{n} {p}",
    "symd": "mkdir {p}.d{n}; echo TD > {p}.d{n}/in; ln -s {p}.d{n} {p}",
    "dangling": "ln -s nope{n} {p}",
    "hard": "echo H{n} > {p}.h{n}; ln {p}.h{n} {p}",
}
PAIRS = [(a, b) for a in MAKE for b in MAKE if a != b]
# Every entry with its type, mode, link count, size and target, then every file's bytes.
LISTING = (
    "find . -printf '%p|%y|%m|%n|%s|%l\\n' | LC_ALL=C sort; "
    'find . -type f | LC_ALL=C sort | while read -r f; do echo "$f: $(cat "$f")"; done'
)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_every_change_of_kind_a_run_makes_is_what_later_calls_see_and_after_a_reopen(
    db: Path, live: bool
) -> None:
    first = "; ".join(MAKE[a].format(p=f"{a}-{b}", n=1) for a, b in PAIRS)
    second = "; ".join(f"rm -rf {a}-{b}; " + MAKE[b].format(p=f"{a}-{b}", n=2) for a, b in PAIRS)
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, first)
        changed = await ok(ws, second + "; " + LISTING)
        assert changed.skipped == [] and changed.error is None
        assert (await ok(ws, LISTING)).stdout == changed.stdout
        entries = {e.name: e for e in await ws.fs.readdir("/workspace")}
        for a, b in PAIRS:  # the workspace's own view of the kind
            entry = entries[f"{a}-{b}"]
            kind = "link" if entry.is_symlink else "dir" if entry.is_directory else "file"
            assert kind == (
                "link" if b in ("symf", "symd", "dangling") else "dir" if b in ("dir", "empty") else "file"
            ), (a, b)
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, LISTING)).stdout == changed.stdout


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_link_out_of_the_mount_replaced_by_a_file_never_writes_its_target(
    db: Path, live: bool
) -> None:
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir("/secret")
        await ws.fs.write_file("/secret/config", b"original\n")
        await ok(ws, "ln -s /secret/config p; ln -s ../secret/config q; echo orig > real; ln -s real cfg")
        await ok(ws, "rm p q && echo EVIL > p && echo EVIL2 > q && sed -i s/orig/new/ cfg")
        assert await ws.fs.read_file("/secret/config") == b"original\n"
        assert await ws.fs.read_file("/workspace/p") == b"EVIL\n"
        assert await ws.fs.read_file("/workspace/real") == b"orig\n"  # sed -i replaced the link
        assert await ws.fs.read_file("/workspace/cfg") == b"new\n"
        assert {e.name: e.is_symlink for e in await ws.fs.readdir("/workspace")}["cfg"] is False
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, "cat p q real cfg")).stdout == "EVIL\nEVIL2\norig\nnew\n"
        assert await ws.fs.read_file("/secret/config") == b"original\n"


async def test_another_backends_mirror_that_held_the_link_gets_the_file(db: Path) -> None:
    """A second mirror of the workspace (another shell backend) that held the links gets the files
    (the pull logs each link as removed before its file is written)."""
    async with computer.Workspace(str(db), backends=[ShellBackend(), ShellBackend(id="other")]) as ws:
        await ws.fs.mkdir("/workspace")
        await ok(ws, "echo T > target; ln -s target p; mkdir d; ln -s d dl")
        assert (await ok(ws, "readlink p dl", backend="other")).stdout == "target\nd\n"
        await ok(ws, "rm p dl && echo file > p && echo x > dl")
        seen = await ok(ws, "cat p dl target; find . -type l | wc -l", backend="other")
        assert seen.stdout == "file\nx\nT\n0\n"
