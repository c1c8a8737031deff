"""A program's large ``write_file`` and ``read_file`` (the python backend's ``workspace`` module,
answered by the owner's ``LocalExecContext``) must not hold the event loop every workspace of the
process shares: the store hashes and keeps a write's content as it comes, one piece a turn of the loop
(before: one step, ~40 ms for 60 MiB of repeated content, ~90 ms of new content), and a read comes a
chunk a turn from the version its call found (before: ~60 ms, then ~145 ms more to frame the reply
for the guest: ``_codec.frame_pieces``). Between those turns the path can change, so a write is
checked against the protected directories again right before its commit."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from pathlib import Path

import msgpack
import pytest

import computer
from computer.runtime import LocalExecContext, _codec
from computer.runtime._codec import ChannelLimits, Utf8, frame_pieces, pack_frame
from computer.runtime._journal import JOURNAL_DIR
from computer.runtime._protected import TURN_BYTES
from computer.runtime._pychannel import _bounded_call

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


async def test_a_mirrors_fill_of_a_large_file_gives_the_loop_turns(tmp_path: Path) -> None:
    """A mirror filling a large file asks for a page of its chunks (``read_chunks``, up to 32 MiB):
    a neighbour on the same loop runs while 8 MiB of them are read (before: one step, ~20 ms for a
    page of a 60 MiB file), and replaces the file meanwhile: every chunk returned is the one its hash
    names; a chunk dropped meanwhile may be left out (the mirror reads its range instead)."""
    first = b"".join(body(8))
    async with computer.Workspace(str(tmp_path / "w.db")) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/big", first)
        ctx = LocalExecContext(ws)
        refs = await ctx.fs_call("file_chunks", {"path": "/workspace/big"})
        hashes = [ref["hash"] for ref in refs]
        assert len(hashes) >= 8
        read = asyncio.ensure_future(ctx.fs_call("read_chunks", {"hashes": hashes}))
        turns = 0
        while not read.done() and turns < 10_000:
            await asyncio.sleep(0)
            turns += 1
            if turns == 1:
                await ws.fs.write_file("/workspace/big", b"".join(body(8)))
        got = await read
        assert turns >= 4, f"the neighbour ran {turns} times while 8 MiB of chunks were read"
        at = 0
        for ref in refs:
            if ref["hash"] in got:
                assert got[ref["hash"]] == first[at : at + ref["size"]]
            at += ref["size"]
        assert set(got) <= set(hashes)


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


async def test_a_large_read_gives_the_loop_turns_and_returns_one_version(tmp_path: Path) -> None:
    """A neighbour on the same loop runs again and again while 8 MiB are read, and replaces the file
    meanwhile: the read returns the version its call found, whole; a range of it too."""
    first, second = b"".join(body(8)), b"".join(body(8))
    async with computer.Workspace(str(tmp_path / "w.db")) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/big", first)
        ctx = LocalExecContext(ws)
        read = asyncio.ensure_future(ctx.fs_call("read_file", {"path": "/workspace/big"}))
        turns = 0
        while not read.done() and turns < 10_000:
            await asyncio.sleep(0)
            turns += 1
            if turns == 1:
                await ws.fs.write_file("/workspace/big", second)
        data = await read
        assert turns >= 4, f"the neighbour ran {turns} times while 8 MiB were read"
        assert hashlib.sha256(data).hexdigest() == hashlib.sha256(first).hexdigest()
        part = await ctx.fs_call(
            "read_file", {"path": "/workspace/big", "offset": 100, "length": 3 * TURN_BYTES}
        )
        assert bytes(part) == second[100 : 100 + 3 * TURN_BYTES]
        with pytest.raises(IsADirectoryError):
            await ctx.fs_call("read_file", {"path": "/workspace"})


@pytest.mark.parametrize("size", [0, 10, 1 << 20, (1 << 20) + 1, 5 * (1 << 20) + 7])
def test_a_reply_in_pieces_is_the_same_frame(size: int) -> None:
    """A reply whose bytes go in pieces (no piece over 1 MiB past the head) reads back as the reply."""
    data = os.urandom(size)
    for ok in (data, bytearray(data)):
        reply = {"ok": ok, "id": 7}
        pieces = frame_pieces(reply)
        assert all(len(piece) <= 1 << 20 for piece in pieces[1:])
        frame = b"".join(pieces)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        assert msgpack.unpackb(frame[4:], raw=False) == {"ok": data, "id": 7}
        assert len(frame) == len(pack_frame({"ok": data, "id": 7}))


async def test_a_program_reads_back_what_it_wrote_in_several_mib(ws: computer.Workspace) -> None:
    """Through the guest's channel: 5 MiB written, read back whole and in a range, as later calls see."""
    source = (
        "import hashlib, os\nimport workspace\n"
        "def main(input):\n"
        "    data = os.urandom(5 * 1024 * 1024 + 3)\n"
        "    workspace.write_file('/workspace/big', data)\n"
        "    back = workspace.read_file('/workspace/big')\n"
        "    part = workspace.read_file('/workspace/big', offset=7, length=2 * 1024 * 1024)\n"
        "    return [hashlib.sha256(data).hexdigest(), back == data, part == data[7 : 7 + 2 * 1024 * 1024]]\n"
    )
    result = await (await ws.runtime.exec(source, backend="python")).result()
    assert result.status == "completed", result
    digest, whole, ranged = result.value
    assert whole and ranged
    assert hashlib.sha256(await ws.fs.read_file("/workspace/big")).hexdigest() == digest
    check = await (await ws.runtime.exec("sha256sum big")).result()
    assert check.stdout.split()[0] == digest


async def test_a_large_read_text_gives_the_loop_turns_and_decodes_as_the_store_does(tmp_path: Path) -> None:
    """8 MiB of text with multi-byte characters across every MiB boundary read with turns of the loop,
    the same text as the store's; bytes that are not UTF-8 fail with the store's own error."""
    text = "é€😀a" * (8 * TURN_BYTES // 10)
    async with computer.Workspace(str(tmp_path / "w.db")) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/t", text)
        ctx = LocalExecContext(ws)
        read = asyncio.ensure_future(ctx.fs_call("read_text", {"path": "/workspace/t"}))
        turns = 0
        while not read.done() and turns < 10_000:
            await asyncio.sleep(0)
            turns += 1
        assert await read == text
        assert turns >= 4, f"the neighbour ran {turns} times while 8 MiB were read"
        bad = text.encode()[: 3 * TURN_BYTES + 1] + b"\xff" + text.encode()[3 * TURN_BYTES + 1 :]
        await ws.fs.write_file("/workspace/bad", bad)
        with pytest.raises(UnicodeDecodeError) as store:
            await ws.fs.read_text("/workspace/bad")
        with pytest.raises(UnicodeDecodeError) as ours:
            await ctx.fs_call("read_text", {"path": "/workspace/bad"})
        assert str(ours.value) == str(store.value)


def test_a_text_reply_in_pieces_reads_back_as_text() -> None:
    text = "é€😀a" * 300_000
    frame = b"".join(frame_pieces({"ok": Utf8(text.encode()), "id": 3}))
    assert msgpack.unpackb(frame[4:], raw=False) == {"ok": text, "id": 3}


async def test_a_program_reads_several_mib_of_text_and_is_told_what_is_not_utf8(
    ws: computer.Workspace,
) -> None:
    """Through the guest's channel: 5 MiB of text with characters of every width read whole; a file
    that is not UTF-8 fails as the store's own ``read_text`` does."""
    text = "é€😀a" * (TURN_BYTES // 2)
    bad = text.encode()[: 3 * TURN_BYTES] + b"\xff" + text.encode()[3 * TURN_BYTES :]
    await ws.fs.write_file("/workspace/t", text)
    await ws.fs.write_file("/workspace/bad", bad)
    with pytest.raises(UnicodeDecodeError) as store:
        await ws.fs.read_text("/workspace/bad")
    source = (
        "import hashlib\nimport workspace\n"
        "def main(input):\n"
        "    text = workspace.read_text('/workspace/t')\n"
        "    try:\n"
        "        workspace.read_text('/workspace/bad')\n"
        "        said = None\n"
        "    except OSError as exc:\n"
        "        said = exc.strerror\n"
        "    return [hashlib.sha256(text.encode()).hexdigest(), len(text), said]\n"
    )
    result = await (await ws.runtime.exec(source, backend="python")).result()
    assert result.status == "completed", result
    assert result.value == [hashlib.sha256(text.encode()).hexdigest(), len(text), str(store.value)]


async def test_the_guest_hosts_answer_to_a_large_read_text_gives_the_loop_turns(tmp_path: Path) -> None:
    """The guest host's answer to a ``read_text`` of 8 MiB is the file's bytes checked a MiB a turn,
    framed as text, never one decode (and one encode again) in one step."""
    text = "é€😀a" * (8 * TURN_BYTES // 10)
    async with computer.Workspace(str(tmp_path / "w.db")) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/t", text)
        answer = asyncio.ensure_future(
            _bounded_call("read_text", {"path": "/workspace/t"}, LocalExecContext(ws), ChannelLimits())
        )
        turns = 0
        while not answer.done() and turns < 10_000:
            await asyncio.sleep(0)
            turns += 1
        reply = await answer
        assert isinstance(reply, Utf8)  # never made a str here: the guest decodes it
        assert turns >= 8, f"the neighbour ran {turns} times while 8 MiB of text were answered"
        frame = b"".join(frame_pieces({"ok": reply, "id": 1}))
        assert msgpack.unpackb(frame[4:], raw=False)["ok"] == text


async def test_a_programs_large_tool_arguments_and_result_are_checked_off_the_loop(
    ws: computer.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any program can send a tool call of 1 MiB of arguments (checked as JSON before its token is),
    again and again, and return 4 MiB: each check of 200,000 items took ~75 ms of the loop every
    workspace of the process shares (and ~10 ms to unpack each head). Those of a large head run in a
    thread; the answers are as before."""
    loop_thread = threading.get_ident()
    checked_on: list[int] = []
    check = _codec.json_problem

    def recorded(value: object, depth: int) -> str | None:
        checked_on.append(threading.get_ident())  # two tool calls' arguments, the result
        return check(value, depth)

    monkeypatch.setattr(_codec, "json_problem", recorded)
    unpacked_on: list[int] = []
    unpack = _codec._unpack_head

    def unpacking(data: bytes, limits: ChannelLimits) -> object:
        if len(data) > _codec.OFF_LOOP_HEAD:
            unpacked_on.append(threading.get_ident())
        return unpack(data, limits)

    monkeypatch.setattr(_codec, "_unpack_head", unpacking)
    source = (
        "import workspace\n"
        "def main(input):\n"
        "    said = []\n"
        "    for args in ({'a': list(range(200000))}, {'a': [float('nan')] + list(range(200000))}):\n"
        "        try:\n"
        "            workspace.call('agent_tool', token='t', name='n', args=args)\n"
        "        except OSError as exc:\n"
        "            said.append(exc.strerror)\n"
        "    return [said, list(range(200000))]\n"
    )
    result = await (await ws.runtime.exec(source, backend="python")).result()
    assert result.status == "completed", result
    said, value = result.value
    assert value == list(range(200_000))
    assert said[1] == "a tool call's arguments holds nan, which JSON cannot represent"
    assert len(checked_on) == 3 and loop_thread not in checked_on, said
    assert len(unpacked_on) == 3 and loop_thread not in unpacked_on
