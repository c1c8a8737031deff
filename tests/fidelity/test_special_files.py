"""FIFOs and sockets a program leaves where the workspace has a directory or a symlink (the workspace
holds no special file: ``SPECIAL``), per call and in a live sandbox, checked through ``ws.fs``, by a
later run (the mirror) and after a reopen (a rebuilt mirror). Decisions (``computer/runtime/README.md``,
"Fidelity decisions"; ``_special_dirs``): as a file replaced by one, what the workspace had there is
kept whole, the path listed in ``skipped``, and the special file stays in that sandbox's mirror only;
a workspace write below such a directory brings it back to the sandbox whole; the program's
removals stand wherever the special file does not: removed in the same run or a later
one, replaced by a directory again, or moved away with a renamed parent (a pull sends a program's
rename as the new tree, in which the special file is nothing the workspace keeps)."""

from __future__ import annotations

from pathlib import Path

import pytest

import computer
from computer.runtime._pull_moves import PullRenames

from ._support import KINDS, ROOT, hold_tick_pulls, ok, opened, reasons_cover_skipped, shell


@pytest.fixture(autouse=True)
def _one_pull_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run's removal and its FIFO are seen by one pull (the run's end): a live sandbox's tick
    between ``rm -r d`` and ``mkfifo d`` pulled the removal on its own, and the workspace rightly
    lost ``d`` (every live case of the two-process commands below failed so with the tick at 20 ms).
    A tick can freeze the sandbox between two steps of one process too, so the ticks pull nothing."""
    hold_tick_pulls(monkeypatch)


# ``d`` removed and replaced in one process: a live sandbox's tick between ``rm -r d`` and a ``python3``
# starting up (~50 ms under load, ticks every 100 ms) pulled the removal on its own, 1 run in 8.
REPLACE = "python3 -c \"import os, shutil, socket; shutil.rmtree('d'); {}\""
SOCKET = REPLACE.format("socket.socket(socket.AF_UNIX).bind('d')")
MAKE = {"fifo": (REPLACE.format("os.mkfifo('d')"), "-p"), "socket": (SOCKET, "-S")}
TREE = {"d/a": "a\n", "d/sub/b": "b\n"}


async def _tree(ws: computer.Workspace) -> None:
    await ws.fs.mkdir(f"{ROOT}/d/sub", recursive=True)
    for rel, text in TREE.items():
        await ws.fs.write_file(f"{ROOT}/{rel}", text)


async def _whole(ws: computer.Workspace) -> None:
    """The workspace has ``d`` whole, as before the run."""
    for rel, text in TREE.items():
        assert await ws.fs.read_text(f"{ROOT}/{rel}") == text, rel


@pytest.mark.parametrize("special", sorted(MAKE))
@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_replaced_by_a_fifo_or_socket_is_kept_whole(
    db: Path, live: bool, special: str
) -> None:
    """Before (s64): the workspace kept ``d`` empty, ``d/a`` and ``d/sub`` removed."""
    make, test = MAKE[special]
    async with opened(db, shell=shell(live), python=False) as ws:
        await _tree(ws)
        result = await ok(ws, f"{make} && echo made > made.txt")
        assert result.skipped == [f"{ROOT}/d"], result.skipped_reasons
        assert "FIFO" in result.skipped_reasons[f"{ROOT}/d"]
        reasons_cover_skipped(result)
        await _whole(ws)
        assert await ws.fs.read_text(f"{ROOT}/made.txt") == "made\n"
        later = await ok(ws, f"[ {test} d ] && echo kept; echo again > again.txt")
        assert later.stdout == "kept\n"  # the sandbox's own, in its mirror (per call too: kept warm)
        await _whole(ws)
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "cat d/a d/sub/b made.txt again.txt")).stdout == "a\nb\nmade\nagain\n"


@pytest.mark.parametrize("change", ["write", "mkdir"])
@pytest.mark.parametrize("live", KINDS)
async def test_a_workspace_write_below_the_kept_directory_brings_it_whole_to_the_sandbox(
    db: Path, live: bool, change: str
) -> None:
    """As a workspace write to a file the program replaced by a FIFO replaces the FIFO, one below a
    directory so replaced makes the directory real in the mirror again: the whole of it, not only what
    was written (the push's ``make_parent`` replaced the FIFO and the directory is fetched whole)."""
    async with opened(db, shell=shell(live), python=False) as ws:
        await _tree(ws)
        await ok(ws, "rm -r d && mkfifo d")
        if change == "write":  # (the push makes ``d`` real as the file's parent)
            await ws.fs.write_file(f"{ROOT}/d/a", "new\n")
        else:  # (``d``'s time moved: the push sends ``d`` itself, a directory where its FIFO is)
            await ws.fs.mkdir(f"{ROOT}/d/made")
        seen = await ok(ws, "find d | sort && cat d/a d/sub/b")
        made = "d/made\n" if change == "mkdir" else ""
        text = "new\n" if change == "write" else "a\n"
        assert seen.stdout == f"d\nd/a\n{made}d/sub\nd/sub/b\n{text}b\n"
        assert seen.skipped == []


@pytest.mark.parametrize("live", KINDS)
async def test_a_symlink_replaced_by_a_fifo_is_kept(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/t", "target\n")
        await ws.fs.symlink("t", f"{ROOT}/l")
        result = await ok(ws, "rm l && mkfifo l")
        assert result.skipped == [f"{ROOT}/l"], result.skipped_reasons
        assert await ws.fs.readlink(f"{ROOT}/l") == "t"
        assert (await ok(ws, "[ -p l ] && echo kept")).stdout == "kept\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "readlink l && cat l")).stdout == "t\ntarget\n"


# What the program does after ``mkfifo d``, and the paths left then (workspace and sandbox alike).
AFTER = {"removed": ("rm d", []), "a directory again": ("rm d && mkdir d && echo n > d/n", ["d", "d/n"])}


@pytest.mark.parametrize("after", sorted(AFTER))
@pytest.mark.parametrize("when", ["same run", "later run"])
@pytest.mark.parametrize("live", KINDS)
async def test_what_the_program_puts_where_its_fifo_was_is_what_the_workspace_gets(
    db: Path, live: bool, when: str, after: str
) -> None:
    """The program removed the directory's contents, then the FIFO (in the same run or a later one):
    the directory goes for real, contents and all, or holds only what the program made there again."""
    then, left = AFTER[after]
    async with opened(db, shell=shell(live), python=False) as ws:
        await _tree(ws)
        if when == "same run":
            assert (await ok(ws, f"rm -r d && mkfifo d && {then}")).skipped == []
        else:
            assert (await ok(ws, "rm -r d && mkfifo d")).skipped == [f"{ROOT}/d"]
            await _whole(ws)
            assert (await ok(ws, then)).skipped == []
        assert [e.path for e in await ws.fs.find(ROOT)] == [f"{ROOT}/{rel}" for rel in left]
        assert (await ok(ws, "find . -mindepth 1 | sort")).stdout == "".join(f"./{rel}\n" for rel in left)
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "find . -mindepth 1 | sort")).stdout == "".join(f"./{rel}\n" for rel in left)


@pytest.mark.parametrize("took", ["watch", "walk"])
@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_and_a_file_replaced_by_fifos_then_their_parent_renamed(
    db: Path, live: bool, took: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program renamed ``p`` to ``q``: the workspace's ``p`` is renamed to ``q`` (``_pull_moves``:
    everything the state held below ``p`` was a file or a directory), and ``q/d`` and ``q/f``, FIFOs
    over a directory and a file the workspace holds, are what they are without a rename: skipped, the
    workspace's kept whole at the new name. Before (s66), which of the walk (it judged the new tree: the
    rename sent as a removal and the new tree, ``p/d`` and ``p/f`` gone) or the kept watch (it judged
    the state: kept) took the move decided it; ``walk`` makes the kept watch give every move up."""
    if took == "walk":
        monkeypatch.setattr(PullRenames, "watched_renames", lambda self, moves: False)
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/p/d", recursive=True)
        await ws.fs.write_file(f"{ROOT}/p/d/a", "a\n")
        await ws.fs.write_file(f"{ROOT}/p/f", "f\n")
        await ws.fs.write_file(f"{ROOT}/p/other", "o\n")
        result = await ok(ws, "rm -r p/d p/f && mkfifo p/d p/f && mv p q")
        assert sorted(result.skipped) == [f"{ROOT}/q/d", f"{ROOT}/q/f"], result.skipped_reasons
        kept = [f"{ROOT}/q", f"{ROOT}/q/d", f"{ROOT}/q/d/a", f"{ROOT}/q/f", f"{ROOT}/q/other"]
        assert [e.path for e in await ws.fs.find(ROOT)] == kept
        assert (
            await ws.fs.read_text(f"{ROOT}/q/d/a") == "a\n" and await ws.fs.read_text(f"{ROOT}/q/f") == "f\n"
        )
        assert (await ok(ws, "[ -p q/d ] && [ -p q/f ] && ls -A")).stdout == "q\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "find . | sort")).stdout == ".\n./q\n./q/d\n./q/d/a\n./q/f\n./q/other\n"
