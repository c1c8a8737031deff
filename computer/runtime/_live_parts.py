"""The small parts of a live sandbox (see ``_live``): a started command, what the syncs made while
a run was in progress, a run's background log, and pipe helpers."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import select
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ._backend import MAX_CHUNK_BYTES, OutputChunk
from ._pull_rules import CONFLICT, CONFLICT_THEN_PULLED
from ._standby import write_all
from ._sync import Synced
from .types import ProcessInfo

__all__ = [
    "BACKGROUND",
    "BACKGROUND_LOG_BYTES",
    "BACKGROUND_RATE",
    "BackgroundLog",
    "Job",
    "ReadRate",
    "RunChanges",
    "command_line",
    "drain",
    "fail",
    "feed",
    "from_background",
    "has_changes",
    "host_pid",
    "innermost",
    "is_eof",
    "listed",
    "pages",
    "waiting_pids",
]

# What a run's background processes printed after it returned: the last this many bytes are kept.
BACKGROUND_LOG_BYTES = 1 << 20
# ... read at most this fast (bytes a second, after a first log's worth): a faster printer waits on
# its full pipe. ``yes &`` left running took 54-73% of a host core to read and drop, for as long as
# the sandbox lived; a server's log is far below it.
BACKGROUND_RATE = 4 << 20

# Why a run lists a path a sync refused while no run was in progress (a background process's change:
# ``LiveSandbox.unreported``); each reason starts so.
BACKGROUND = "changed by a background process while no run was in progress"


def from_background(refused: Mapping[str, str]) -> dict[str, str]:
    """The reasons a run gives for the changes of background processes that syncs refused before it
    (``Synced.refused``: path -> the pull's reason). Such a change is lost: the workspace kept its own."""
    return {
        path: f"{BACKGROUND}, and by the workspace in the same sync interval: the process's change was "
        "refused (lost), the workspace's version kept"
        if why == CONFLICT
        else f"{BACKGROUND}, refused: {why}"
        for path, why in refused.items()
    }


@dataclass
class Job:
    """A command of a live sandbox: ``id`` is the init's name for it; ``run`` the run it serves (its
    background log's name). A job started ahead (``waiting``: a python guest or a shell waiting for
    its run) is neither "busy" nor listed until a run takes it; ``stdin`` is our end of its stdin
    while it waits (a shell's: the run's input goes there), ``command`` what a listing shows instead of
    ``line`` (its own command line) once taken (the run's: a shell's own is its wait, ``_live_shell``)."""

    id: str
    started: asyncio.Future[int]
    exited: asyncio.Future[tuple[int, str | None]]
    fds: dict[int, str] = field(default_factory=dict)  # our read ends -> stream name
    run: str = ""
    waiting: bool = False
    stdin: int | None = None
    command: str | None = None
    line: str = ""  # its own command line, as a listing shows it
    host_pid: int | None = None  # a job started ahead: its process's host pid, once found
    # A job started ahead while nothing but the init and such jobs ran: the sandbox's ``job_turn`` then
    # (``LiveSandbox.stirring`` trusts it to wait only while that turn lasts).
    trusted: int | None = None
    source_file: str | None = None  # a shell started ahead: the file its long command came in (host)


@dataclass
class RunChanges:
    """What the syncs made while one run was in progress (attributed to every run in progress)."""

    pulled: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)

    def add(self, synced: Synced) -> None:
        """A sync's pull. A path pulled after a sync left it out is no longer skipped, unless a change
        of the run's was refused for the workspace's (``CONFLICT``): that change is lost whatever
        came after (a shell and a python run appending to one file lost half the lines, listed
        nowhere), so the path stays in ``skipped`` as well as in ``pulled``, with a reason that says
        the run's later version is what the workspace holds (``CONFLICT_THEN_PULLED``). A background
        process's change refused before the run (:data:`BACKGROUND`) stays as it is: lost all the same."""
        self.pulled.update(synced.pulled)
        for path in synced.pulled:
            why = self.skipped.get(path)
            if why in (CONFLICT, CONFLICT_THEN_PULLED):
                self.skipped[path] = CONFLICT_THEN_PULLED
            elif why is not None and not why.startswith(BACKGROUND):
                del self.skipped[path]
        self.skipped.update(synced.skipped)  # a later refusal: the workspace's version is kept again


class ReadRate:
    """How fast a sandbox's background logs are read, all of them together: a log's worth at once, then
    :data:`BACKGROUND_RATE`. It was each log's own: 32 printers left running were read at 128 MiB/s,
    a quarter of a host core for as long as they ran."""

    def __init__(self) -> None:
        self.budget = float(BACKGROUND_LOG_BYTES)  # bytes that may be read now (refilled at the rate)
        self.refilled = time.monotonic()

    def pause_after(self, read: int) -> float:
        """Seconds to wait before reading again, having read ``read`` bytes (0: go on)."""
        now = time.monotonic()
        self.budget = min(float(BACKGROUND_LOG_BYTES), self.budget + (now - self.refilled) * BACKGROUND_RATE)
        self.refilled = now
        self.budget -= read
        return 0.0 if self.budget >= 0 else -self.budget / BACKGROUND_RATE


class BackgroundLog:
    """What one run's background processes printed after it returned: the last
    :data:`BACKGROUND_LOG_BYTES`, written to the workspace by the sandbox's ticks; its bytes are let go
    once written and every pipe it reads is closed (``open``: a sandbox that lived an hour kept ~1 MiB
    for each run that left a printer behind, after the printers ended). ``rate``: the sandbox's."""

    def __init__(self, rate: ReadRate | None = None) -> None:
        self.rate = rate if rate is not None else ReadRate()
        self.open = 0  # pipes still read into it
        self.data = bytearray()
        self.dropped = 0
        self.dirty = False
        self.written = False  # in the workspace at least once
        self.let_go = False  # some of its pipes went to the init (``LiveJobs._let_go``)
        self.turn = 0  # when it was last written, as ``LiveJobs.flush_logs`` counts (0: never)

    def pause_after(self, read: int) -> float:
        """Seconds to wait before reading again, having read ``read`` bytes (0: go on)."""
        return self.rate.pause_after(read)

    def append(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > BACKGROUND_LOG_BYTES:
            cut = len(self.data) - BACKGROUND_LOG_BYTES
            self.dropped += cut
            del self.data[:cut]
        self.dirty = True

    def content(self) -> bytes:
        head = f"[... {self.dropped} earlier bytes dropped]\n".encode() if self.dropped else b""
        return head + bytes(self.data)


def waiting_pids(jobs: Iterable[Job]) -> set[int]:
    """The sandbox pids of the jobs started ahead that wait for their run (a shell, a python guest):
    no process of the user's, neither listed nor killed by the processes API."""
    return {
        j.started.result()
        for j in jobs
        if j.waiting and j.started.done() and not j.started.cancelled() and j.started.exception() is None
    }


def listed(rows: Iterable[dict[str, Any]], jobs: Iterable[Job], logs: Mapping[str, str]) -> list[ProcessInfo]:
    """The init's ``ps`` rows as :class:`ProcessInfo`: a job started ahead that waits for its run
    (a python guest) is not a process of the user's; ``logs``: run -> its background log, if written."""
    jobs = list(jobs)
    hidden = waiting_pids(jobs)
    runs = {j.id: j.run for j in jobs if j.run}  # a job started ahead serves a run of another name
    # A shell started ahead shows its wait as its command line, and so do the subshells it forks: the
    # run's command line instead (by the name in their environment, which is the job's).
    shown = {j.id: (j.line, j.command) for j in jobs if j.command}
    found = []
    for p in rows:
        if int(p["pid"]) in hidden:
            continue
        given = p.get("exec_id")
        run = runs.get(given, given) if isinstance(given, str) else None
        command = str(p["command"])
        line, instead = shown.get(given, ("", None)) if isinstance(given, str) else ("", None)
        found.append(
            ProcessInfo(
                pid=int(p["pid"]),
                command=instead if instead is not None and command == line else command,
                started=datetime.fromtimestamp(float(p["started"]), UTC),
                cpu_seconds=float(p["cpu_seconds"]),
                rss_bytes=int(p["rss_bytes"]),
                ppid=int(p.get("ppid", 0)),
                exec_id=run,
                log=logs.get(run) if run is not None else None,
            )
        )
    return found


# Pages of a ``ps`` listing asked for at most (each one reply of the init's, at least ~30 processes).
PAGES = 64


async def pages(
    request: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], int]:
    """The init's ``ps`` rows of every process, asked for in pages: a reply is one packet
    (``_live_init.listing``), and one that leaves processes out is followed by the next, from its last
    pid. There was one page: 100 processes named with 300 emoji each (12 bytes of JSON apiece) left 72
    out, a server among them, never listed, its log not held. Also how many the last page left out."""
    rows: list[dict[str, Any]] = []
    more = 0
    for _ in range(PAGES):
        reply = await request({"op": "ps", "after": int(rows[-1]["pid"]) if rows else 0})
        page = reply.get("processes") or []
        rows += page
        more = int(reply.get("more") or 0)
        if not more or not page:
            break
    return rows, more


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as a listing shows it (the init's: its words joined by spaces, empty ones left out)."""
    return " ".join(w for w in argv if w)


def innermost(pid: int, field: bytes) -> int | None:
    """Host process ``pid``'s ``field`` (``b"NSpid"``, ``b"NSsid"``…) in its innermost pid namespace:
    the last number of that line of its ``/proc`` status; None when it is gone or has none."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field + b":"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_pid(candidates: Iterable[int], inner: int, limit: int = 16) -> int | None:
    """The host pid among ``candidates`` (at most ``limit`` looked at) whose pid in its innermost pid
    namespace is ``inner`` (``NSpid``), or None."""
    for pid in list(candidates)[:limit]:
        if innermost(pid, b"NSpid") == inner:
            return pid
    return None


def has_changes(page: Any, mirror: Any) -> bool:
    """Whether a push page changes ``mirror`` (the root's own time and mode too: another mirror's pull
    moved it; before, a live sandbox's quiet mirror took that page for empty and kept its old ones)."""
    return bool(
        page.full
        or page.more
        or page.files
        or page.dirs
        or page.symlinks
        or page.deleted
        or page.moves
        or mirror.root_time.moved(page)
    )


def fail(futures: Sequence[asyncio.Future[Any]], error: BaseException) -> None:
    """Fail the futures still pending with ``error`` (marked retrieved: whoever waits sees it)."""
    for future in futures:
        if not future.done():
            future.set_exception(error)
            future.exception()


def drain(fd: int, name: str) -> list[OutputChunk]:
    """What the (non-blocking) pipe ``fd`` of an exited command holds: at most its capacity
    (``F_GETPIPE_SZ``), all a pipe can hold of what the command wrote before it exited. What comes
    after is its background processes' (the background log's, read at its rate): the drain read
    until the pipe was empty, on the owner's loop, into memory, so writers left running that kept the
    pipe full (``yes &`` on other cores) held every workspace of the process for as long as they
    outpaced it, a run's output growing without bound."""
    try:
        left = fcntl.fcntl(fd, F_GETPIPE_SZ)
    except OSError:
        left = MAX_PIPE_BYTES
    out: list[OutputChunk] = []
    while left > 0:
        try:
            data = os.read(fd, min(MAX_CHUNK_BYTES, left))
        except (BlockingIOError, OSError):
            return out
        if not data:
            return out
        left -= len(data)
        out.append(OutputChunk(name, data))  # type: ignore[arg-type]
    return out


F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
MAX_PIPE_BYTES = 1 << 20  # an unprivileged process's largest pipe (``/proc/sys/fs/pipe-max-size``)


def is_eof(fd: int) -> bool:
    """Whether every writer of the (non-blocking, drained) pipe ``fd`` is gone."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    events = poller.poll(0)
    return any(ev & select.POLLHUP for _, ev in events)


def feed(fd: int, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        write_all(fd, data)
