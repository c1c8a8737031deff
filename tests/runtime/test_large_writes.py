"""A program's large ``write_file`` (the python backend's ``workspace`` module, answered by the owner's
``LocalExecContext``) must not hold the event loop every workspace of the process shares: the store
hashes and keeps its content as it comes, one piece a turn of the loop (before: one step, ~40 ms for
60 MiB of repeated content, ~90 ms of new content). Between those turns the path can change, so the
write is checked against the protected directories again right before its commit."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

import computer
from computer.runtime import LocalExecContext
from computer.runtime._journal import JOURNAL_DIR
from computer.runtime._protected import TURN_BYTES

PIECE = 32 * 1024  # what the guest's channel sends a large write's body in


def body(mib: int) -> list[bytes]:
    data = os.urandom(mib * TURN_BYTES)
    return [data[at : at + PIECE] for at in range(0, len(data), PIECE)]


async def test_a_large_write_gives_the_loop_turns_and_lands_whole(tmp_path: Path) -> None:
    """A neighbour on the same loop runs again and again while an 8 MiB write goes in; the file is
    whole afterwards, and after a reopen."""
    pieces = body(8)
    digest = hashlib.sha256(b"".join(pieces)).hexdigest()
    db = str(tmp_path / "w.db")
    async with computer.Workspace(db) as ws:
        await ws.fs.mkdir("/workspace")
        ctx = LocalExecContext(ws)
        write = asyncio.ensure_future(ctx.fs_call("write_file", {"path": "/workspace/big", "data": pieces}))
        turns = 0
        while not write.done() and turns < 10_000:
            await asyncio.sleep(0)
            turns += 1
        await write
        assert turns >= 4, f"the neighbour ran {turns} times while 8 MiB were written"
        data = await ws.fs.read_file("/workspace/big")
        assert hashlib.sha256(data).hexdigest() == digest
    async with computer.Workspace(db) as ws:
        assert hashlib.sha256(await ws.fs.read_file("/workspace/big")).hexdigest() == digest


@pytest.mark.parametrize("data", ["list", "bytes", "text"])
async def test_a_write_whose_directory_became_a_link_to_the_journal_meanwhile_is_refused(
    tmp_path: Path, data: str
) -> None:
    """While a large write into ``/workspace/d`` goes in, ``d`` is replaced by a link to the runs'
    journal (a live sandbox's pull can do that for a program's background process): the write is
    refused at its commit, and the journal holds no such record."""
    pieces = body(4)
    payload: object = {"list": pieces, "bytes": b"".join(pieces), "text": "x" * (4 * TURN_BYTES)}[data]
    async with computer.Workspace(str(tmp_path / "w.db")) as ws:
        await ws.fs.mkdir(JOURNAL_DIR, recursive=True)
        await ws.fs.mkdir("/workspace/d", recursive=True)
        ctx = LocalExecContext(ws)
        write = asyncio.ensure_future(
            ctx.fs_call("write_file", {"path": "/workspace/d/run.json", "data": payload})
        )
        await asyncio.sleep(0)  # the write has started: its path was checked
        assert not write.done()
        await ws.fs.rm("/workspace/d", recursive=True)
        await ws.fs.symlink(JOURNAL_DIR, "/workspace/d")
        with pytest.raises(PermissionError, match="journal"):
            await write
        assert not await ws.fs.exists(f"{JOURNAL_DIR}/run.json")
        # A write checked and done in one go, for comparison: refused up front.
        with pytest.raises(PermissionError, match="journal"):
            await ctx.fs_call("write_file", {"path": "/workspace/d/run.json", "data": b"x"})
