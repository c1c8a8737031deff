"""Wire forms: sync payloads and channel frames survive a round trip."""

from __future__ import annotations

import asyncio
import dataclasses

import msgpack
import pytest

from computer.runtime import MirrorDir, MirrorFile, MirrorSymlink, SyncPull, SyncPush
from computer.runtime._codec import (
    REQUEST_HEADER,
    ChannelError,
    ChannelLimits,
    GuestRequest,
    check_args,
    decode_sync,
    encode_sync,
    read_request,
)


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
        moves=[("/workspace/x", "/workspace/y")],
    )
    wire = encode_sync(push)
    assert len(wire) < 10_000  # repetitive file bytes compress
    assert decode_sync(SyncPush, wire) == push


def test_sync_pull_round_trips() -> None:
    pull = SyncPull(
        root="/workspace",
        files=[MirrorFile("/workspace/b", b"\x00\xff")],
        deleted=["/workspace/c"],
        follow_moves=True,
    )
    assert decode_sync(SyncPull, encode_sync(pull)) == pull


def test_times_finer_than_a_millisecond_cross_a_process_both_ways() -> None:
    """The pool backends' pushes and pulls (``encode_sync``) carry each node's nanoseconds past its ms
    time (``sub_ns``), the root's and the directories' of a pull: a pool worker's mirror sets them."""
    push = SyncPush(
        rev=3,
        root="/workspace",
        full=True,
        files=[MirrorFile("/workspace/a", b"x", 0o644, 123, sub_ns=400_123)],
        dirs=[MirrorDir("/workspace/d", 0o755, 5, 999_999)],
        symlinks=[MirrorSymlink("/workspace/l", "a", 7, 1)],
        root_mtime=9,
        root_sub_ns=42,
    )
    back = decode_sync(SyncPush, encode_sync(push))
    assert back == push
    assert (back.files[0].sub_ns, back.dirs[0].sub_ns, back.symlinks[0].sub_ns, back.root_sub_ns) == (
        400_123,
        999_999,
        1,
        42,
    )
    pull = SyncPull(
        root="/workspace",
        files=[MirrorFile("/workspace/b", b"y", 0o644, 1, sub_ns=2)],
        dir_times={"/workspace/d": 8},
        dir_sub_ns={"/workspace/d": 500_000},
    )
    assert decode_sync(SyncPull, encode_sync(pull)) == pull


def _rewire(payload: SyncPush | SyncPull, change: object) -> bytes:
    import lz4.frame

    plain = msgpack.unpackb(lz4.frame.decompress(encode_sync(payload)), raw=False)
    change(plain)  # type: ignore[operator]
    return bytes(lz4.frame.compress(msgpack.packb(plain, use_bin_type=True)))


def test_a_payload_from_a_newer_version_is_refused_by_name_not_by_a_type_error() -> None:
    """Nodes running two versions of the package: a field or a row item this version does not know
    is a ValueError naming it and the cure, never a bare TypeError (nor dropped silently)."""
    pull = SyncPull(root="/workspace", files=[MirrorFile("/workspace/b", b"y")])
    with pytest.raises(
        ValueError,
        match=r"another version of computer carries what this one does not know: SyncPull fields \['shiny'\]",
    ):
        decode_sync(SyncPull, _rewire(pull, lambda p: p.update(shiny=1)))
    width = len(dataclasses.fields(MirrorFile))
    with pytest.raises(ValueError, match=rf"MirrorFile rows of {width + 1} fields \(this has {width}\)"):
        decode_sync(SyncPull, _rewire(pull, lambda p: p["files"][0].append(0)))


def test_a_payload_from_an_older_version_takes_the_defaults_of_what_it_lacks() -> None:
    pull = SyncPull(root="/workspace", files=[MirrorFile("/workspace/b", b"y", sub_ns=5)], follow_moves=True)

    def older(plain: dict[str, object]) -> None:
        del plain["follow_moves"]
        plain["files"][0].pop()  # type: ignore[attr-defined]

    back = decode_sync(SyncPull, _rewire(pull, older))
    assert back.follow_moves is False and back.files[0].path == "/workspace/b"


def frame(op: object, args: object, body: bytes = b"", *, head: bytes | None = None) -> bytes:
    """A guest frame as ``_pyguest`` writes it (``head`` replaces the msgpack head)."""
    if head is None:
        head = msgpack.packb({"op": op, "args": args}, use_bin_type=True)
    return REQUEST_HEADER.pack(len(head), len(body)) + head + body


async def read_all(data: bytes, limits: ChannelLimits | None = None) -> list[GuestRequest]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    out = []
    while True:
        try:
            out.append(await read_request(reader, limits or ChannelLimits()))
        except EOFError:
            return out


async def test_requests_are_read_back_one_by_one_with_write_data_as_the_body() -> None:
    data = frame("stat", {"path": "/x"}) + frame("write_file", {"path": "/f", "mode": None}, b"\x00\xff")
    data += frame("__result__", {"value": {"a": [1, 2.5, None]}})
    stat, write, result = await read_all(data)
    assert stat == GuestRequest("stat", {"path": "/x"})
    assert write == GuestRequest("write_file", {"path": "/f", "mode": None}, b"\x00\xff")
    assert result.args == {"value": {"a": [1, 2.5, None]}}


async def test_a_request_may_carry_an_id_for_its_reply() -> None:
    """s53: the guest tags each call (a reply whose caller is gone is passed over); ``None``: none."""
    head = msgpack.packb({"op": "stat", "args": {"path": "/x"}, "id": 7 << 32 | 3})
    tagged, untagged = await read_all(frame(None, None, head=head) + frame("stat", {"path": "/x"}))
    assert (tagged.id, untagged.id) == (7 << 32 | 3, None)
    assert tagged == GuestRequest("stat", {"path": "/x"}, None, 7 << 32 | 3)


async def test_a_large_body_arrives_in_pieces_of_one_mib() -> None:
    (write,) = await read_all(frame("write_file", {"path": "/f", "mode": None}, b"x" * (2 * 1024 * 1024 + 5)))
    assert isinstance(write.body, list) and [len(p) for p in write.body] == [1024 * 1024, 1024 * 1024, 5]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (REQUEST_HEADER.pack(16 * 1024 * 1024, 0) + b"\x80" * 100, "head of 16777216 bytes is over"),
        (REQUEST_HEADER.pack(10, 2**31), "body of 2147483648 bytes is over"),
        (frame("stat", {"path": "/" + "x" * 1024 * 1024}), "request head of"),
        (frame("stat", {"path": "/x"}, b"data"), "only write_file frames carry a body"),
        (frame(None, None, head=b"\xc1"), "not valid msgpack"),
        (frame(None, None, head=b"\xd7\xff" + b"\0" * 8), "not valid msgpack"),  # an ext (timestamp)
        (frame(None, None, head=msgpack.packb({1: 2})), "not valid msgpack"),  # a key that is not a string
        (frame(None, None, head=msgpack.packb([{}] * 300_000)), "not valid msgpack"),  # over max_array_len
        (frame(None, None, head=msgpack.packb([[{}] * 1000] * 300)), "more than 262144 elements"),
        (frame(None, None, head=msgpack.packb(["op", "args"])), "exactly 'op' and 'args'"),
        (frame(1, {}), "'op' must be a string"),
        (
            frame(None, None, head=msgpack.packb({"op": "stat", "args": {}, "id": -1})),
            "'id' must be an integer",
        ),
        (frame(None, None, head=msgpack.packb({"op": "stat", "args": {}, "id": 2**63})), "'id' must be"),
        (frame(None, None, head=msgpack.packb({"op": "stat", "args": {}, "id": True})), "'id' must be"),
        (
            frame(None, None, head=msgpack.packb({"op": "stat", "args": {}, "x": 1})),
            "exactly 'op' and 'args'",
        ),
        (frame("__result__", {"value": b"bytes"}), "holds a bytes"),
        (frame("__result__", {"value": {"a": float("nan")}}), "JSON cannot represent"),
        (frame("__result__", {"value": 1, "more": 2}), "exactly one argument"),
        (frame("write_file", {"path": "/f", "parts": 64 * 1024 * 1024}), "at most 16385"),  # 512 MiB of
        (frame("write_file", {"path": "/f", "parts": 0}), "'parts' must be a positive"),  # pointers
        (frame("__part__", {}), "never none"),  # an empty part: a pointer held for no byte
        (REQUEST_HEADER.pack(100, 0) + b"\x80", "ended inside a frame"),
        (b"\x00\x00", "ended inside a frame header"),
    ],
)
async def test_frames_that_break_the_framing_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ChannelError, match=message):
        await read_all(data)


async def test_values_are_checked_iteratively_to_any_depth() -> None:
    deep: list[object] = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ChannelError, match="nested deeper than 100 levels"):
        await read_all(frame("__result__", {"value": deep}))
    assert await read_all(frame("__result__", {"value": deep[0]}))


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (GuestRequest("symlink", {"path": "/l", "target": "/etc"}), "unknown workspace operation 'symlink'"),
        (GuestRequest("readlink", {"path": "/l"}), "unknown workspace operation 'readlink'"),
        (GuestRequest("read_file", {"path": 1}), "argument 'path' has the wrong type"),
        (GuestRequest("read_file", {"path": "/x", "offset": True}), "argument 'offset'"),
        (GuestRequest("write_file", {"path": "/x", "data": b"inline"}, b""), "unexpected argument 'data'"),
        (GuestRequest("find", {"directory": "/", "exclude": ["a", 1]}), "argument 'exclude'"),
        (GuestRequest("agent_tool", {"token": "t", "name": "n", "args": {"x": b"b"}}), "holds a bytes"),
    ],
)
def test_requests_with_unknown_ops_or_bad_arguments_are_answered_with_an_error(
    request_: GuestRequest, problem: str
) -> None:
    assert problem in (check_args(request_, 100) or "")


def test_good_requests_pass() -> None:
    grep = {"pattern": "x", "path": "/", "regex": True, "include": ["*.py"], "exclude": [], "limit": None}
    assert check_args(GuestRequest("grep", grep), 100) is None
    assert check_args(GuestRequest("write_file", {"path": "/x", "mode": 0o644}, b""), 100) is None


def test_the_guest_ops_are_exactly_the_workspace_modules_plus_the_agents_tool_call() -> None:
    from computer.runtime._codec import GUEST_ARGS
    from computer.runtime._context import GUEST_OPS

    assert set(GUEST_ARGS) == {*GUEST_OPS, "agent_tool"}
