"""Directories of the workspace that a run's program may read but not change (``refuse_protected_change``).

The runtime's journal (``/.computer/exec``: the records ``get_exec`` trusts after a restart) is one:
the python backend's ``workspace`` module reaches every workspace path, and a program rewrote an
earlier run's record (``failed 1`` read back as ``completed 0`` with output of its choosing). The
agent's state is another (``computer.agent``). A path is checked where it really leads (symlinks
followed, as the change would follow them), and a change to an ancestor (removing or replacing
``/.computer``, ``/``) is refused too; ``mkdir`` of an ancestor is harmless and allowed.

:func:`checked_call` makes a program's call once it is checked. A large ``write_file`` goes to the
store in pieces with a turn of the event loop between them (the store hashes and keeps each piece as
it comes), checked again right before its commit, since the path may have changed meanwhile; a large
``read_file`` is read the same way, from the version of the file its call found (``fs.stream``), and
a large ``read_chunks`` (a mirror filling a large file) a MiB of chunks a turn.
"""

from __future__ import annotations

import asyncio
import codecs
import errno
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..storage import CHUNK_SIZE
from ..storage.paths import canonical, is_within, real_path

__all__ = [
    "CHANGES",
    "OWN",
    "SYSTEM_DIR",
    "TURN_BYTES",
    "call_guard",
    "checked_call",
    "reaches_protected",
    "refuse_protected_change",
    "root_refused",
    "system_refused",
]

# The workspace's own bookkeeping (SPEC section 1: the runs' journal, the output logs, pull staging, an
# agent's state). A program's calls (the python guest's ``workspace`` module) read it, change nothing.
SYSTEM_DIR = "/.computer"
# The prefix of the runtime's own ``fs_call`` ops (``OWN + op``: a live sandbox's background logs,
# ``LiveJobs.flush_logs``), the only ones that may change ``/.computer/output`` through a context; a
# program's calls can never name one (``_codec.GUEST_ARGS``: its ops, by name).
OWN = "runtime:"

# fs operation -> (argument names it changes, whether the last segment is followed, ancestors too)
CHANGES: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    "write_file": (("path",), True, True),
    "mkdir": (("path",), False, False),
    "rm": (("path",), False, True),
    "rename": (("src", "dst"), False, True),
    "copy": (("dst",), True, True),
    "symlink": (("path",), False, True),
    "link": (("new",), False, True),
}


def reaches_protected(real: str, protected: str, *, ancestors: bool) -> bool:
    """True when a change at canonical ``real`` reaches the directory ``protected``."""
    return is_within(real, protected) or (ancestors and is_within(protected, real))


def system_refused(path: str, changer: str = "a program's workspace calls") -> PermissionError:
    """What a change under :data:`SYSTEM_DIR` by ``changer`` gets: a program's ``workspace`` calls
    here, the tools (``computer.tools``) theirs."""
    return PermissionError(
        errno.EACCES,
        f"Permission denied: {SYSTEM_DIR} is the workspace's own (run journal, output logs): "
        f"{changer} read it but do not change it; write under /workspace",
        path,
    )


def root_refused(op: str, path: str) -> OSError:
    """What a change of the root itself gets (SPEC section 1: ``/`` cannot be removed, EPERM, nor
    written as a file, EISDIR, nor created, EEXIST), said as such: it was refused as a change of
    :data:`SYSTEM_DIR` (an ancestor's), and ``delete {"path": "/"}`` read "/.computer is the
    workspace's own", which names neither the root nor the fix. ``path`` is the path as the caller
    spelled it (canonical), which may be a link that leads to ``/``."""
    where = "/ (the workspace root)" if path == "/" else f"{path} (it leads to /, the workspace root)"
    if op in ("write_file", "copy"):
        return IsADirectoryError(
            errno.EISDIR,
            f"Is a directory: {where} cannot be written as a file; write a file under /workspace",
            path,
        )
    if op in ("symlink", "link"):
        return FileExistsError(
            errno.EEXIST, f"File exists: {where} cannot be replaced; name a path under /workspace", path
        )
    return PermissionError(
        errno.EPERM,
        f"Operation not permitted: {where} cannot be removed or renamed; name a path under it, such as /workspace/...",
        path,
    )


def call_guard(
    op: str, protected: Mapping[str, Callable[[str], Exception]]
) -> tuple[str, Mapping[str, Callable[[str], Exception]]]:
    """The fs op a context's ``fs_call`` of ``op`` makes, and the directories it may not change: the
    runtime's own (:data:`OWN`) the ``protected`` ones; a program's all of :data:`SYSTEM_DIR` besides
    (checked after them: their refusals say more). Before, a program's calls could write, remove and
    rename the runtime's logs (``/.computer/output``), which its own log writes took the same way:
    forge another run's background log, or remove it."""
    if op.startswith(OWN):
        return op[len(OWN) :], protected
    return op, {**protected, SYSTEM_DIR: system_refused}


async def refuse_protected_change(
    fs: Any, op: str, args: dict[str, Any], protected: Mapping[str, Callable[[str], Exception]]
) -> None:
    """Raise ``protected[directory](path)`` when fs operation ``op`` with ``args`` would change one of
    the ``protected`` directories (each path's links are resolved once, for all of them)."""
    spec = CHANGES.get(op)
    if spec is None or not protected:
        return
    names, follow, ancestors = spec
    for name in names:
        path = args.get(name)
        if not isinstance(path, str):
            continue
        spelled = canonical(path)
        if ancestors and spelled == "/":
            raise root_refused(op, spelled)
        for directory, refuse in protected.items():
            if reaches_protected(spelled, directory, ancestors=ancestors):
                raise refuse(spelled)
        real = await real_path(fs, path, follow=follow)
        if ancestors and real == "/":
            raise root_refused(op, spelled)
        for directory, refuse in protected.items():
            if reaches_protected(real, directory, ancestors=ancestors):
                raise refuse(spelled)


# A write of more bytes than this is fed to the store with a turn of the event loop after each such
# piece: in one call, the hashing and storing of a program's 60 MiB write held the owner's loop, every
# workspace of the process, ~40 ms (~90 ms of new content) at each write.
TURN_BYTES = 1024 * 1024


async def checked_call(
    fs: Any, op: str, args: dict[str, Any], protected: Mapping[str, Callable[[str], Exception]]
) -> Any:
    """``fs.<op>(**args)`` for a program, refused when it would change a ``protected`` directory; a
    ``write_file``, ``read_file`` or ``read_text`` of over ``TURN_BYTES`` in pieces, with turns of
    the loop (see above; such a read's bytes come as a ``bytearray``)."""
    await refuse_protected_change(fs, op, args, protected)
    if op == "read_chunks" and isinstance(hashes := args.get("hashes"), list) and len(hashes) > _TURN_CHUNKS:
        return await _chunks_with_turns(fs, hashes)
    if op in ("read_file", "read_text") and await _span(fs, args) > TURN_BYTES:
        data = await _read_with_turns(fs, args)
        return data if op == "read_file" else await _decode_with_turns(data)
    if op == "write_file" and (pieces := _large(args.get("data"))) is not None:
        # Checked again once the last piece is in: no await suspends between that check and the
        # store's commit (``readlink`` never does), so the path the commit resolves is the one checked.
        checked = dict(args)
        args = {
            **args,
            "data": _with_turns(pieces, lambda: refuse_protected_change(fs, op, checked, protected)),
        }
    result = getattr(fs, op)(**args)
    return await result if inspect.isawaitable(result) else result


def _large(data: object) -> Sequence[bytes | bytearray | memoryview] | None:
    """``data``'s byte pieces when over ``TURN_BYTES`` in all, else None (left to the store as is)."""
    if isinstance(data, str):
        return None if len(data) <= TURN_BYTES // 4 else _large(data.encode("utf-8"))
    pieces = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    if not isinstance(pieces, (list, tuple)):
        return None
    if not all(isinstance(piece, (bytes, bytearray, memoryview)) for piece in pieces):
        return None
    return pieces if sum(len(piece) for piece in pieces) > TURN_BYTES else None


async def _with_turns(
    pieces: Sequence[bytes | bytearray | memoryview], last: Callable[[], Awaitable[None]]
) -> AsyncIterator[bytes | memoryview]:
    """``pieces`` cut to at most ``TURN_BYTES``, a turn of the loop after each ``TURN_BYTES``; then
    ``last()`` (the check again), right before the store commits."""
    fed = 0
    for piece in pieces:
        view = memoryview(piece)
        for at in range(0, len(view), TURN_BYTES):
            part = view[at : at + TURN_BYTES]
            yield part
            fed += len(part)
            if fed >= TURN_BYTES:
                fed = 0
                await asyncio.sleep(0)
    await last()


# A mirror's fill of a large file asks for a page of its chunks at once (``max_sync_bytes``, 32 MiB):
# read in one call, they held the owner's loop ~20 ms a page (every workspace of an owner host).
_TURN_CHUNKS = max(1, TURN_BYTES // CHUNK_SIZE)


async def _chunks_with_turns(fs: Any, hashes: list[Any]) -> dict[str, bytes]:
    """``fs.read_chunks(hashes)`` ``TURN_BYTES`` at a time, a turn of the loop after each: chunks are
    named by their content, so a chunk is the same whichever call reads it (one dropped meanwhile is
    left out, as the store leaves out any it does not hold: the caller reads its range instead)."""
    out: dict[str, bytes] = {}
    for at in range(0, len(hashes), _TURN_CHUNKS):
        if at:
            await asyncio.sleep(0)
        out.update(fs.read_chunks(hashes[at : at + _TURN_CHUNKS]))
    return out


async def _span(fs: Any, args: dict[str, Any]) -> int:
    """How many bytes a ``read_file`` with ``args`` returns (0 when it fails: the store says why)."""
    path, offset, length = args.get("path"), args.get("offset", 0), args.get("length")
    if not isinstance(path, str) or type(offset) is not int or not (length is None or type(length) is int):
        return 0
    try:
        size = int((await fs.stat(path)).size)
    except (OSError, ValueError):
        return 0
    end = size if length is None else min(size, offset + length)
    return max(0, end - offset)


async def _read_with_turns(fs: Any, args: dict[str, Any]) -> bytearray:
    """A ``read_file``'s bytes a chunk at a time, a turn of the loop after each ``TURN_BYTES`` (in one
    step, 60 MiB held the owner's loop ~60 ms, the bytes joined at the end ~30 ms more)."""
    data = bytearray()  # grown a piece at a time (not ``bytearray(span)``: 60 MiB zeroed in one step)
    fed = 0
    async for piece in fs.stream(args["path"], offset=args.get("offset", 0), length=args.get("length")):
        data += piece
        fed += len(piece)
        if fed >= TURN_BYTES:
            fed = 0
            await asyncio.sleep(0)
    return data


async def _decode_with_turns(data: bytearray) -> str:
    """``data`` decoded as UTF-8 (strict), ``TURN_BYTES`` a turn; an error as ``bytes.decode`` says it."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = []
    view = memoryview(data)
    try:
        for at in range(0, len(data), TURN_BYTES):
            parts.append(decoder.decode(view[at : at + TURN_BYTES], final=at + TURN_BYTES >= len(data)))
            await asyncio.sleep(0)
    except UnicodeDecodeError:
        view.release()
        return data.decode("utf-8")  # raises, with the whole text's positions
    return "".join(parts)
