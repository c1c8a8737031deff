"""Wire forms of the runtime: the python guest's channel frames, and lz4-compressed msgpack for sync
payloads crossing processes (a pool worker and the owner).

The guest channel (see ``python.py``) is untrusted input: code in the sandbox can reach its socket
(nothing inside one interpreter can be hidden from code running in it: ``gc``, ``ctypes``,
``/proc/self/fd``), so any per-run secret the guest holds would be readable too: frames are not
authenticated (decision). Instead a frame can ask for nothing a ``workspace`` function could not; no
other process can reach the channel (the guest makes itself non-dumpable before its first frame, so a
child of the run or a background process of the live sandbox, same uid, can neither ``pidfd_getfd`` it
nor read its ``/proc`` fds: ``tests/security/test_guest_channel.py``); and the host reads every frame
within limits (:class:`ChannelLimits`) that bound its memory, whatever the bytes:

- a request is a header ``>II`` (head bytes, body bytes), a msgpack head ``{"op", "args"}`` (and an
  ``id``, a non-negative 64-bit integer the reply carries back: see ``_pyguest._exchange``) and a
  body of raw bytes, which only ``write_file`` has (its ``data``): the head of a request is at most
  ``request_bytes``, of the result frame (``op == "__result__"``) ``result_bytes``, a body
  ``write_bytes``; sizes are checked before anything is read, the body only once the head named
  ``write_file`` (one of at most 64 KiB is read with its head); a ``write_file`` over 32 KiB comes as its head alone, its ``args`` naming how many
  ``parts`` (``__part__`` frames, each a piece of the body, args ``{}``) follow: each frame is one send
  of the guest, which the kernel queues whole or not at all, so a sender killed mid-write (a fork
  pool's worker) leaves no partial frame; ``_pychannel.serve`` joins the pieces and drops a write
  another caller's frame interrupted (its caller died); a part is never empty and ``parts`` is at
  most one per ``MIN_PART`` (4 KiB) of ``write_bytes`` (the guest's are ~32 KiB): before, a write of
  64 Mi parts of no byte each was taken, and 3.2 million empty part frames in 20 s grew the host
  by 25 MiB (a pointer each, held until the write ended: 512 MiB at its end);
- a head is unpacked with msgpack's ``max_*_len`` limits and a budget of ``items`` (elements of all
  maps and arrays together; hooks count them as the unpacker builds them): the worst case of small
  objects (an empty map is 1 byte on the wire and ~70 in Python) stays a few tens of MiB;
- the op must be a known one with arguments of the right names and types (:func:`check_args`); the
  result value and a tool call's arguments are re-checked as JSON-able and at most ``depth`` deep.

A frame that breaks the framing (sizes, msgpack, shape) raises :class:`ChannelError`: the host stops
reading and closes the channel (the stream may be out of step). A well-formed request with a bad
argument is answered with an error, like a bad argument to the ``fs`` method.

Frames from the host to the guest are a ``>I`` length and msgpack (:func:`pack_frame`).
"""

from __future__ import annotations

import asyncio
import codecs
import dataclasses
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import lz4.frame
import msgpack

from ._backend import MirrorDir, MirrorFile, MirrorSymlink, SyncPull, SyncPush
from ._tasks import offload

__all__ = [
    "PART_OP",
    "RESULT_OP",
    "ChannelError",
    "ChannelLimits",
    "GuestRequest",
    "Utf8",
    "check_args",
    "checked_off_loop",
    "decode_sync",
    "encode_sync",
    "frame_pieces",
    "pack_frame",
    "read_request",
    "to_plain",
    "utf8_text",
]

_HEADER = struct.Struct(">I")
REQUEST_HEADER = struct.Struct(">II")  # head bytes, body bytes
_BIN32 = struct.Struct(">BI")
_R = TypeVar("_R")
RESULT_OP = "__result__"
PART_OP = "__part__"  # a piece of a write_file's body (see the module docstring)
_BODY_CHUNK = 1024 * 1024  # a large body is read (and handed to write_file) in pieces of this size
_EARLY_BODY = 64 * 1024  # a body this small is read with its head, before the head is checked
MIN_PART = 4096  # a write_file's parts: at most one per this many bytes of ``write_bytes`` (module doc)


@dataclass(frozen=True, slots=True)
class ChannelLimits:
    """What the host accepts from one guest frame (see the module docstring)."""

    request_bytes: int = 1024 * 1024  # a request's head: paths, patterns, a tool call's arguments
    result_bytes: int = 4 * 1024 * 1024  # the result frame's head: main()'s value
    write_bytes: int = 64 * 1024 * 1024  # the data of one write_file
    items: int = 262_144  # elements of all maps and arrays of one head
    depth: int = 100  # nesting of a JSON-able value
    # What the host answers with at most: results of a listing call (``grep``, ``find``, ``readdir``,
    # ``ls``; more is an error asking for pages) and bytes of a read. The answer is built on the
    # owner's event loop: a grep of 8 MB of matching lines held it 48 s and took 1.8 GB.
    reply_items: int = 10_000
    reply_bytes: int = 64 * 1024 * 1024


class ChannelError(ValueError):
    """The guest broke the channel's framing: the host closes the channel."""


@dataclass(frozen=True, slots=True)
class GuestRequest:
    op: str
    args: dict[str, Any]
    # write_file's data: bytes, or its pieces when larger than one piece (no copy joins them)
    body: bytes | list[bytes] | None = None
    id: int | None = None  # the caller's, echoed in the reply
    parts: int = 0  # a write_file's: how many ``PART_OP`` frames carry its body
    # the bytes of its head (a large one is checked off the loop: ``checked_off_loop``)
    head: int = dataclasses.field(default=0, compare=False)


def pack_frame(obj: Any) -> bytes:
    """One frame from the host: a 4-byte big-endian length, then msgpack."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return _HEADER.pack(len(data)) + data


@dataclass(frozen=True, slots=True)
class Utf8:
    """Bytes known to be UTF-8 (:func:`utf8_text`), a reply's text: sent as a msgpack str, which the
    guest decodes (the host never makes the text a Python ``str``)."""

    data: bytes | bytearray


async def utf8_text(data: bytes | bytearray) -> Utf8:
    """``data`` checked as UTF-8 (strict), ``_BODY_CHUNK`` a turn of the loop: a large ``read_text``'s
    answer (decoded in one step, 60 MiB of text held the loop ~160 ms, and msgpack encoded it again).
    Not UTF-8: the ``UnicodeDecodeError`` the store's ``read_text`` raises, positions and all."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for at in range(0, len(data), _BODY_CHUNK):
            decoder.decode(view[at : at + _BODY_CHUNK], final=at + _BODY_CHUNK >= len(data))
            await asyncio.sleep(0)
    except UnicodeDecodeError:
        view.release()
        data.decode("utf-8")  # raises, with the whole text's positions
        raise
    return Utf8(data)


def frame_pieces(obj: dict[str, Any]) -> list[bytes | memoryview]:
    """:func:`pack_frame`'s bytes as pieces to write one after another: a reply whose ``ok`` is bytes
    over ``_BODY_CHUNK`` long (or :class:`Utf8`) is its head (with that value's msgpack header) and
    then that value's own bytes, cut in ``_BODY_CHUNK`` views (packed into one frame, 60 MiB took
    three copies, ~145 ms in one step of the loop: msgpack, the length put in front, the transport's
    buffer)."""
    data, text = obj.get("ok"), False
    if isinstance(data, Utf8):
        data, text = data.data, True
    elif not isinstance(data, bytes | bytearray) or len(data) <= _BODY_CHUNK:
        return [pack_frame(obj)]
    packer = msgpack.Packer(use_bin_type=True)
    rest = [packer.pack(key) + packer.pack(value) for key, value in obj.items() if key != "ok"]
    head = packer.pack_map_header(len(rest) + 1) + b"".join(rest) + packer.pack("ok")
    head += _BIN32.pack(0xDB if text else 0xC6, len(data))  # msgpack's str 32 or bin 32 header
    view = memoryview(data)
    return [
        _HEADER.pack(len(head) + len(data)) + head,
        *(view[at : at + _BODY_CHUNK] for at in range(0, len(data), _BODY_CHUNK)),
    ]


async def read_request(reader: asyncio.StreamReader, limits: ChannelLimits) -> GuestRequest:
    """Read one guest frame within ``limits``: ``EOFError`` when the guest closed between frames,
    :class:`ChannelError` when it broke the framing."""
    try:
        header = await reader.readexactly(REQUEST_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ChannelError("the channel ended inside a frame header") from None
        raise EOFError from None
    head_size, body_size = REQUEST_HEADER.unpack(header)
    if head_size > max(limits.request_bytes, limits.result_bytes):
        raise ChannelError(f"a frame head of {head_size} bytes is over the limit")
    if body_size > limits.write_bytes:
        raise ChannelError(f"a frame body of {body_size} bytes is over the {limits.write_bytes}-byte limit")
    early: bytes | None = None  # a small body, read with its head (a part of a large write: one read)
    if 0 < body_size <= _EARLY_BODY:
        both = await _read(reader, head_size + body_size)
        head_bytes, early = both[:head_size], both[head_size:]
    else:
        head_bytes = await _read(reader, head_size)
    head = await checked_off_loop(head_size, _unpack_head, head_bytes, limits)  # a large one in a thread
    if not isinstance(head, dict) or set(head) - {"id"} != {"op", "args"}:
        raise ChannelError("a frame head must be a map of exactly 'op' and 'args' (and an 'id')")
    op, args, call = head["op"], head["args"], head.get("id")
    if call is not None and (type(call) is not int or not 0 <= call < 2**63):
        raise ChannelError("a frame's 'id' must be an integer from 0 to 2**63 - 1")
    if not isinstance(op, str) or not isinstance(args, dict):
        raise ChannelError("a frame's 'op' must be a string and its 'args' a map")
    if op != RESULT_OP and head_size > limits.request_bytes:
        raise ChannelError(
            f"a request head of {head_size} bytes is over the {limits.request_bytes}-byte limit"
        )
    if op == RESULT_OP:
        if set(args) != {"value"}:
            raise ChannelError("the result frame carries exactly one argument, 'value'")
        problem = await checked_off_loop(head_size, json_problem, args["value"], limits.depth)
        if problem is not None:
            raise ChannelError(f"main()'s value {problem}")
    parts = 0
    if op == "write_file" and "parts" in args:
        parts = args.pop("parts")
        most = limits.write_bytes // MIN_PART + 1
        if type(parts) is not int or not 0 < parts <= most or body_size:
            raise ChannelError(
                f"a write_file's 'parts' must be a positive integer of at most {most}, with no body of its own"
            )
    if op == PART_OP and args:
        raise ChannelError("a part frame carries no arguments")
    if op == PART_OP and not body_size:
        raise ChannelError("a part frame carries a piece of a write: never none")
    if body_size and op not in ("write_file", PART_OP):
        raise ChannelError(f"only write_file frames carry a body, not {op!r}")
    body: bytes | list[bytes] | None = None
    if op in ("write_file", PART_OP):
        body = early if early is not None else await _read_body(reader, body_size)
    return GuestRequest(op, args, body, call, parts, head_size)


async def _read(reader: asyncio.StreamReader, size: int) -> bytes:
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ChannelError("the channel ended inside a frame") from None


async def _read_body(reader: asyncio.StreamReader, size: int) -> bytes | list[bytes]:
    if size <= _BODY_CHUNK:
        return await _read(reader, size)
    pieces = []
    while size:
        pieces.append(await _read(reader, min(size, _BODY_CHUNK)))
        size -= len(pieces[-1])
    return pieces


def _unpack_head(data: bytes, limits: ChannelLimits) -> Any:
    budget = [limits.items]

    def count(container: Any) -> Any:
        budget[0] -= len(container) + 1
        if budget[0] < 0:
            raise ChannelError(f"a frame head holds more than {limits.items} elements")
        return container

    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            list_hook=count,
            object_hook=count,
            max_str_len=len(data),
            max_bin_len=len(data),
            max_array_len=limits.items,
            max_map_len=limits.items,
            max_ext_len=0,
        )
    except ChannelError:
        raise
    except Exception as exc:  # untrusted bytes: every way msgpack can refuse them
        raise ChannelError(f"a frame head is not valid msgpack ({type(exc).__name__}: {exc})") from None


# A head over this many bytes is unpacked and checked in a thread (``checked_off_loop``): a program's
# 1 MiB tool call's arguments or 4 MiB result of 200,000 items took ~75 ms of the loop
# (``json_problem``) each, a 1 MiB head of 260,000 items ~10 ms to unpack (whatever its op).
OFF_LOOP_HEAD = 64 * 1024


async def checked_off_loop(head_size: int, check: Callable[..., _R], *args: Any) -> _R:
    """``check(*args)`` (the head's unpacking, its JSON check) for a frame head of ``head_size``
    bytes: in a thread of its own when large (the loop gets its turns while it runs), else here."""
    if head_size <= OFF_LOOP_HEAD:
        return check(*args)
    return await offload(None, check, *args)


def json_problem(value: Any, depth: int) -> str | None:
    """Why ``value`` is not JSON-able within ``depth`` levels (None: it is). Iterative: any depth is
    answered without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if item is None or isinstance(item, bool | int | str):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"holds {item}, which JSON cannot represent"
            continue
        if level >= depth:
            return f"is nested deeper than {depth} levels"
        if isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "has a map with keys that are not strings"
            stack.extend((v, level + 1) for v in item.values())
        else:
            return f"holds a {type(item).__name__}, which is not JSON-able"
    return None


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _opt_int(v: Any) -> bool:
    return v is None or _int(v)


def _opt_str(v: Any) -> bool:
    return v is None or _str(v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(_str(s) for s in v)


def _include(v: Any) -> bool:
    return v is None or _str(v) or _strs(v)


def _map(v: Any) -> bool:
    return isinstance(v, dict)


_Check = Callable[[Any], bool]
_PATH: dict[str, _Check] = {"path": _str}
_TWO: dict[str, _Check] = {"src": _str, "dst": _str, "overwrite": _bool}
_PAGE: dict[str, _Check] = {"limit": _opt_int, "offset": _int}
# The arguments each op of the guest may send, by name (the ``workspace`` module's signatures). Not
# here, so refused: ``symlink``, ``readlink`` and anything else an ``ExecContext`` may answer.
# ``agent_tool`` is the agent's op (``computer.agent``'s ``TOOL_OP``): its context answers it for the
# token it issued to one execution; any other context refuses it as an unknown op.
GUEST_ARGS: dict[str, dict[str, _Check]] = {
    "read_file": {**_PATH, "offset": _int, "length": _opt_int},
    "read_text": _PATH,
    "write_file": {**_PATH, "mode": _opt_int},  # data: the frame's body
    "mkdir": {**_PATH, "recursive": _bool, "mode": _int},
    "rm": {**_PATH, "recursive": _bool, "force": _bool},
    "readdir": {**_PATH, **_PAGE},
    "stat": _PATH,
    "exists": _PATH,
    "find": {"directory": _str, "pattern": _opt_str, "exclude": _strs, **_PAGE},
    "grep": {
        "pattern": _str,
        **_PATH,
        "regex": _bool,
        "ignore_case": _bool,
        "context": _int,
        "include": _include,
        "exclude": _strs,
        **_PAGE,
    },
    "ls": {"prefix": _str},
    "rename": _TWO,
    "copy": _TWO,
    "agent_tool": {"token": _str, "name": _str, "args": _map},
}


def check_args(request: GuestRequest, depth: int) -> str | None:
    """What is wrong with a request's op or arguments (None: nothing); the host answers it as an
    invalid argument instead of calling the workspace."""
    allowed = GUEST_ARGS.get(request.op)
    if allowed is None:
        return f"unknown workspace operation {request.op!r}"
    for name, value in request.args.items():
        check = allowed.get(name)
        if check is None:
            return f"{request.op}() got an unexpected argument {name!r}"
        if not check(value):
            return f"{request.op}(): argument {name!r} has the wrong type ({type(value).__name__})"
    if request.op == "agent_tool":
        problem = json_problem(request.args.get("args"), depth)
        if problem is not None:
            return f"a tool call's arguments {problem}"
    return None


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
    """Rebuild a :class:`SyncPush` or :class:`SyncPull` from :func:`encode_sync`.

    The two ends may run different versions of this package (a node upgraded before another): a
    field this version lacks a default for, or one it does not know, raises a :class:`ValueError`
    that names the fields and says so, instead of a bare ``TypeError`` from the constructor (decision:
    nothing sent is ever dropped silently: an unknown field may carry a change the receiver would then
    lose). Fields missing from the sender take their defaults (an older sender).
    """
    plain = msgpack.unpackb(lz4.frame.decompress(data), raw=False)
    unknown = sorted(set(plain) - {f.name for f in dataclasses.fields(kind)})
    if unknown:
        raise _skew(f"{kind.__name__} fields {unknown}")
    for name, item in _ITEMS.items():
        width = len(dataclasses.fields(item))
        rows = plain.get(name, [])
        if any(len(row) > width for row in rows):
            raise _skew(f"{item.__name__} rows of {max(len(r) for r in rows)} fields (this has {width})")
        plain[name] = [item(*row) for row in rows]
    for name in ("moves", "renames"):
        if name in plain:
            plain[name] = [tuple(move) for move in plain[name]]
    return kind(**plain)


def _skew(what: str) -> ValueError:
    return ValueError(
        f"a sync payload from another version of computer carries what this one does not know: {what}; "
        "run the same version of computer on every node of the cluster"
    )


def to_plain(value: Any) -> Any:
    """Dataclass results as dicts (recursively), so they travel as msgpack."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    return value
