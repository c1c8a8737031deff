"""``AssetsBridge``: the host side of the sandbox's ``assets`` command, for one shell run.

The sandbox gets a directory (bound at ``/run/computer``) holding a unix socket and the ``assets``
script. A publish request names a path under the mount root; a file the run created or changed is
first saved to the workspace (the share reads the workspace) through :meth:`ExecContext.sync_pull`,
under exactly the rules of the run's own pull (never over a protected file, never over a file the
workspace changed during the run), then ``ctx.share`` returns the URL. Only the URL goes back into
the sandbox. The path is looked up below the mirror without following any link on the way, and
every failure to find a regular file there gets one answer, so a link to ``/`` maps nothing of the
host.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import os
import secrets
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..storage.paths import canonical, is_within
from ._backend import BIG_FILE, ExecContext, MirrorFile, SyncPull, store_time
from ._beneath import HOLE, HOLE_DIGEST, BeneathReader, lstat_beneath
from ._entry import KIND, MODE, MTIME_NS, SIZE
from ._mirror import Entry, Mirror, entry_of
from ._tasks import in_thread, offload

__all__ = ["SANDBOX_DIR", "AssetsBridge"]

SANDBOX_DIR = "/run/computer"
_SCRIPT = Path(__file__).with_name("_assets_cli.py")
_MAX_REQUEST = 64 * 1024
# Connections one bridge serves at once, and how long one may take to send its request. Each accepted
# connection is a descriptor of the host process, which every workspace it serves shares: a program
# connecting in a loop and never writing (19,990 held connections here) took every descriptor of the
# host (``ulimit -n`` 20,000), so no other workspace's sandbox, pipe or database could open one. One
# past the bound is closed as it comes; one that says nothing for ``REQUEST_TIMEOUT`` is closed.
MAX_CONNECTIONS = 16
REQUEST_TIMEOUT = 30.0


# Listening sockets made with their bridge directories ahead of the run, by directory (see
# ``make_directory``); guarded by a lock, as directories are made and removed from worker threads.
_LISTENING: dict[Path, socket.socket] = {}
_LISTENING_LOCK = threading.Lock()


@functools.cache
def _script() -> str:
    return "#!/usr/bin/python3 -I\n" + _SCRIPT.read_text()


class AssetsBridge:
    """Serves ``assets publish`` requests of one run while it is open (``async with``)."""

    def __init__(self, ctx: ExecContext, mirror: Mirror, directory: Path) -> None:
        self.ctx = ctx
        self.mirror = mirror
        self.directory = directory  # made by :meth:`make_directory`; removed when the bridge closes
        self._server: asyncio.AbstractServer | None = None
        self.saved: list[str] = []  # files this run created and the bridge wrote to the workspace
        self.own_revs: list[int] = []  # the revisions those saves committed (the run's own changes)
        self._reading = asyncio.Lock()
        self._connections = 0  # served now (at most ``MAX_CONNECTIONS``)

    @staticmethod
    def make_directory(scratch: Path, owner: tuple[int, int] | None = None) -> Path:
        """A fresh bridge directory below ``scratch`` holding ``bin/assets`` and the listening socket,
        to bind at :data:`SANDBOX_DIR` (made before the sandbox starts, off the run's path; the
        socket is served while the bridge is open). Remove it with :meth:`remove_directory`."""
        scratch.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix="a", dir=scratch))
        bin_dir = directory / "bin"
        bin_dir.mkdir()
        script = bin_dir / "assets"
        script.write_text(_script())
        script.chmod(0o755)
        os.chmod(directory, 0o755)
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listening.bind(str(directory / "assets.sock"))
            if owner is not None:  # the sandbox's user must be able to connect
                os.chown(directory / "assets.sock", *owner)
            listening.listen(16)
        except OSError:
            listening.close()  # the bridge makes its socket when it opens
        else:
            with _LISTENING_LOCK:
                _LISTENING[directory] = listening
        return directory

    @staticmethod
    def remove_directory(directory: Path) -> None:
        """Close the directory's listening socket (if no bridge took it) and remove the directory."""
        with _LISTENING_LOCK:
            listening = _LISTENING.pop(directory, None)
        if listening is not None:
            listening.close()
        shutil.rmtree(directory, ignore_errors=True)

    async def __aenter__(self) -> AssetsBridge:
        with _LISTENING_LOCK:
            listening = _LISTENING.pop(self.directory, None)
        if listening is None:
            path = str(self.directory / "assets.sock")
            self._server = await asyncio.start_unix_server(self._serve, path=path)
            if self.mirror.owner is not None:  # the sandbox's user must be able to connect
                os.chown(path, *self.mirror.owner)
        else:
            self._server = await asyncio.start_unix_server(self._serve, sock=listening)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):  # best-effort: the run is over, its result matters
                await self._server.wait_closed()
        # The directory goes in the background: its removal need not delay the run's pull and result.
        in_thread(lambda: shutil.rmtree(self.directory, True), "removing a bridge directory")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_CONNECTIONS:
            writer.close()  # its descriptor goes at once; the program's connection sees its end
            return
        self._connections += 1
        try:
            await self._answer(reader, writer)
        finally:
            self._connections -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            read = asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
            try:
                line = await read
            except TimeoutError:
                return  # nothing said in time: no answer
            if len(line) > _MAX_REQUEST:
                reply: dict[str, Any] = {"error": "request too large"}
            else:
                reply = await self._publish(json.loads(line or b"{}"))
        except Exception as exc:  # not swallowed: the program in the sandbox gets it as its answer
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()

    async def _publish(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") != "publish":
            return {"error": f"unknown operation {request.get('op')!r}"}
        path = canonical(str(request.get("path", "")))
        expires = request.get("expires_after", 3600.0)
        if isinstance(expires, bool) or not isinstance(expires, int | float) or not 0 < expires < math.inf:
            # any program can write to the socket: NaN, inf, 0 or a string reach no publisher
            return {"error": f"expires_after must be a positive, finite number of seconds, not {expires!r}"}
        mirror = self.mirror
        if not is_within(path, mirror.root) or path == mirror.root:
            return {"error": f"{path} is outside {mirror.root}: only workspace files can be published"}
        rel = mirror.rel(path)
        try:
            st = await offload(self, lstat_beneath, mirror.directory, rel)
        except OSError:
            st = None
        entry = entry_of(st) if st is not None else None
        if entry is not None and entry[KIND] == "f":
            if mirror.state.get(rel) != entry:
                # Made by this run and not pulled yet: the share reads the workspace, so save it first.
                refused = await self._save(path, rel, entry)
                if refused is not None:
                    return {"error": f"{path} was not published: {refused}"}
        elif path not in mirror.protected:
            return {"error": f"{path}: no such regular file in the workspace"}
        try:
            return {"url": await self.ctx.share(path, expires)}
        except Exception as exc:  # not swallowed: the program in the sandbox gets it as its answer
            return {"error": str(exc)}

    async def _save(self, path: str, rel: str, entry: Entry) -> str | None:
        """Save one file of the run as its pull would; the reason when the pull's rules refuse it."""
        mirror = self.mirror
        if mirror.rev is None:
            return "the sandbox's view of the workspace is not settled"
        async with self._reading:  # one file in memory at a time, however many requests come
            read = await offload(self, read_published, mirror.directory, rel, entry)
        if read is None:
            return "it changed while it was read: publish it again once it is written"
        data, chunks, stage = read
        size = -1 if chunks is None else entry[SIZE]
        mtime, sub = store_time(entry[MTIME_NS])  # as the run's pull stores it, to the nanosecond
        pull = SyncPull(
            mirror.root,
            files=[MirrorFile(path, data, entry[MODE], mtime, size, None, chunks, sub_ns=sub)],
            protected=sorted(mirror.protected),
            own_revs=list(self.own_revs),
            stage=stage,
            staging=secrets.token_hex(8) if stage else None,
        )
        result = await self.ctx.sync_pull(pull, mirror.rev)
        self.own_revs += result.own_revs
        if path in result.reasons:
            return result.reasons[path]
        mirror.state[rel] = entry  # already in the workspace: the pull need not send it
        self.saved.append(path)
        return None


def read_published(
    directory: Path, rel: str, entry: Entry
) -> tuple[bytes | None, list[str] | None, list[bytes]] | None:
    """The file ``rel`` below ``directory`` as ``entry`` (its ``lstat``) saw it, read while its
    program runs: a small file's bytes, or a large one's chunk hashes with the distinct new chunks
    (a hole neither read nor held: ``HOLE``); None when it is not that file any more (it grew, shrank
    or changed meanwhile). Never more than ``entry[SIZE]`` bytes: the whole file was read into memory,
    to its end whatever its size, so ``truncate -s 16G f; assets publish f`` took 16 GB of the host's
    memory for a file that cost the sandbox nothing, and a program extending it as it was read kept
    the host reading."""
    data: list[bytes] = []
    hashes: list[str] = []
    stage: list[bytes] = []
    staged: set[str] = set()
    size = 0
    with BeneathReader(directory) as reader:
        try:
            for piece in reader.chunks(rel):
                size += len(piece)
                if size > entry[SIZE]:
                    return None
                if entry[SIZE] < BIG_FILE:
                    data.append(piece)
                    continue
                digest = HOLE_DIGEST if piece is HOLE else hashlib.sha256(piece).hexdigest()
                hashes.append(digest)
                if digest not in staged:
                    staged.add(digest)
                    stage.append(piece)
        except OSError:
            return None
    try:
        if size != entry[SIZE] or entry_of(lstat_beneath(directory, rel)) != entry:
            return None
    except OSError:
        return None
    if entry[SIZE] < BIG_FILE:
        return b"".join(data), None, []
    return None, hashes, stage
