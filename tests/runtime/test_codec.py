"""Wire forms: sync payloads and channel frames survive a round trip."""

from __future__ import annotations

import asyncio

from computer.runtime import MirrorDir, MirrorFile, MirrorSymlink, SyncPull, SyncPush
from computer.runtime._codec import decode_sync, encode_sync, pack_frame, read_frame


def test_sync_push_round_trips_through_msgpack_and_lz4() -> None:
    push = SyncPush(
        rev=7,
        root="/workspace",
        full=False,
        files=[MirrorFile("/workspace/a", b"x" * 100_000, 0o755, 123)],
        dirs=[MirrorDir("/workspace/d", 0o700)],
        symlinks=[MirrorSymlink("/workspace/l", "a")],
        deleted=["/workspace/old"],
        protected=["/workspace/big"],
    )
    wire = encode_sync(push)
    assert len(wire) < 10_000  # repetitive file bytes compress
    assert decode_sync(SyncPush, wire) == push


def test_sync_pull_round_trips() -> None:
    pull = SyncPull(
        root="/workspace", files=[MirrorFile("/workspace/b", b"\x00\xff")], deleted=["/workspace/c"]
    )
    assert decode_sync(SyncPull, encode_sync(pull)) == pull


async def test_frames_are_read_back_one_by_one() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(pack_frame({"op": "stat", "args": {"path": "/x"}}) + pack_frame([1, b"\x00"]))
    reader.feed_eof()
    assert await read_frame(reader) == {"op": "stat", "args": {"path": "/x"}}
    assert await read_frame(reader) == [1, b"\x00"]
    try:
        await read_frame(reader)
    except EOFError:
        pass
    else:
        raise AssertionError("expected EOFError at the end of the stream")
