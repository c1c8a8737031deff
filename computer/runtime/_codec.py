"""Wire forms of the runtime: length-prefixed msgpack frames (the python sandbox channel) and
lz4-compressed msgpack for sync payloads crossing processes (a pool worker and the owner)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from typing import Any, TypeVar

import lz4.frame
import msgpack

from ._backend import MirrorDir, MirrorFile, MirrorSymlink, SyncPull, SyncPush

__all__ = ["decode_sync", "encode_sync", "pack_frame", "read_frame"]

_HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024


def pack_frame(obj: Any) -> bytes:
    """One frame: a 4-byte big-endian length, then msgpack."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return _HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """Read one frame; ``EOFError`` when the peer closed between frames."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError:
        raise EOFError from None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes is over the {MAX_FRAME}-byte limit")
    return msgpack.unpackb(await reader.readexactly(size), raw=False)


T = TypeVar("T", SyncPush, SyncPull)

_ITEMS: dict[str, type[Any]] = {"files": MirrorFile, "dirs": MirrorDir, "symlinks": MirrorSymlink}


def encode_sync(payload: SyncPush | SyncPull) -> bytes:
    """msgpack of the payload's fields, lz4-framed (file bytes compress well in bulk)."""
    plain = {
        f.name: (
            [dataclasses.astuple(i) for i in getattr(payload, f.name)]
            if f.name in _ITEMS
            else getattr(payload, f.name)
        )
        for f in dataclasses.fields(payload)
    }
    return bytes(lz4.frame.compress(msgpack.packb(plain, use_bin_type=True)))


def decode_sync(kind: type[T], data: bytes) -> T:
    """Rebuild a :class:`SyncPush` or :class:`SyncPull` from :func:`encode_sync`."""
    plain = msgpack.unpackb(lz4.frame.decompress(data), raw=False)
    for name, item in _ITEMS.items():
        plain[name] = [item(*row) for row in plain.get(name, [])]
    return kind(**plain)
