"""The Backend seam: what an execution engine implements and the only door it has to the workspace.

A backend turns one :class:`ExecRequest` into a stream of :data:`ExecEvent`: output chunks, then one
:class:`ExitEvent`. Everything else (tails, spooling, snapshots, the journal, statuses) is done once,
centrally, by :class:`~computer.runtime.Runtime`, so an in-process backend and a Ray pool backend behave
the same. A backend reaches the workspace only through :class:`ExecContext`, whose methods are *whole*
operations (one round trip each when the context is a Ray call back to the owner actor).

Every payload type here is a plain dataclass of msgpack-friendly fields (str, int, bytes, lists, dicts);
``_codec.py`` holds their wire form.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..storage import CHUNK_SIZE
from .types import BackendInfo, ProcessInfo

__all__ = [
    "Backend",
    "DeferringContext",
    "ExecContext",
    "ExecEvent",
    "ExecRequest",
    "ExitEvent",
    "LiveBackend",
    "MirrorDir",
    "MirrorFile",
    "MirrorSymlink",
    "OutputChunk",
    "PendingPull",
    "PullResult",
    "SyncLimits",
    "SyncPull",
    "SyncPush",
]

# Files at least this large travel as their chunks (``MirrorFile.chunks``, the storage's fixed 512 KiB
# chunks): only the chunks that differ move, in either direction.
BIG_FILE = 2 * CHUNK_SIZE

# Files one pull page carries at most: a page is one transaction on the workspace owner's event loop,
# and one of 20,000 small files held it (every workspace of the process) 0.68 s; pages of 1,000 take
# ~30 ms each, and the loop runs other work between them (while the next page is read in a thread).
PAGE_FILES = 1000
# Directories one pull page makes at most: 37,000 new ones on one page held the loop ~0.26 s; 2,000
# take ~10 ms.
PAGE_DIRS = 2000
# Characters of the paths one pull page names at most, in each of its lists (directories, files,
# removals): a page's cost on the loop grows with its paths' length, and a 2,000-level chain of
# directories (`mkdir c; cd c` in a loop, 4 MB of paths on one page of 2,000) held every workspace of
# the process ~0.57 s; pages of 256 Ki characters take ~40 ms.
PAGE_PATHS = 1 << 18
# Chunks the large files one pull page removes hold at most: the store drops a removed file's chunk
# list row by row in the page's transaction, and `rm` of 100 sparse 4 GB files (8,192 chunks each, at
# no cost to the sandbox) held every workspace of the process ~0.8 s; one such file takes ~20-40 ms.
PAGE_CHUNKS = 8192


def fits(paths: Iterable[str], most: int) -> int:
    """How many of ``paths``, in order, one pull page takes: at most ``most``, together at most
    ``PAGE_PATHS`` characters (one at least)."""
    count = chars = 0
    for path in paths:
        chars += len(path)
        if count == most or (count and chars > PAGE_PATHS):
            break
        count += 1
    return count


# The times (ms since the epoch) a pull stores, those of `datetime` (years 1 to 9999): a program may
# give a file any 64-bit time on tmpfs (`os.utime(f, (0, 2**62))`), whose ms the store's INTEGER cannot
# hold; such a pull failed with an OverflowError, every change of the run lost, and a live sandbox's
# every later run failed the same (the file stays in its mirror). A time past them is stored as the
# bound (the mirror keeps its own).
MIN_MS, MAX_MS = -62_135_596_800_000, 253_402_300_799_999


def store_ms(ns: int) -> int:
    """A time read in the mirror (ns), as a pull stores it: ms within ``MIN_MS``..``MAX_MS``."""
    return min(max(ns // 1_000_000, MIN_MS), MAX_MS)


def store_time(ns: int) -> tuple[int, int]:
    """A time read in the mirror (ns), as a pull stores it: :func:`store_ms` and the nanoseconds past
    it (``FileStat.sub_ns``, 0 to 999,999; 0 for a time clamped to the store's bounds)."""
    ms = min(max(ns // 1_000_000, MIN_MS), MAX_MS)
    sub = ns - ms * 1_000_000
    return ms, sub if 0 <= sub < 1_000_000 else 0


def mirror_ns(ms: int, sub_ns: int) -> int:
    """The exact time (ns) a mirror gives a node the store keeps as ``ms`` and ``sub_ns``."""
    return ms * 1_000_000 + sub_ns


# A backend coalesces its output into chunks of at most this many bytes.
MAX_CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """One execution, as handed to a backend. Picklable; ``stdin`` is bytes (``None``: empty stdin)."""

    id: str
    backend: str
    source: str
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    input: Any = None
    stdin: bytes | None = None
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """Bytes the program wrote on one stream (at most :data:`MAX_CHUNK_BYTES`)."""

    stream: Literal["stdout", "stderr"]
    data: bytes


@dataclass(frozen=True, slots=True)
class ExitEvent:
    """The last event of a run.

    ``killed`` is True when the backend ended the program itself (timeout or cancellation);
    ``error`` says why a run failed outside the program (sandbox could not start, sync failed…).
    ``pending``: the run's changes, not yet applied, when its context defers pulls (a pool worker's:
    the owner that dispatched the run applies them and completes ``pulled`` and ``skipped``).
    """

    exit_code: int | None
    value: Any = None
    pushed: int = 0
    pulled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None
    killed: bool = False
    pending: PendingPull | None = None
    skipped_reasons: dict[str, str] = field(default_factory=dict)  # path -> why it was left out
    # The run executed in a live sandbox that is still alive: later runs of the workspace belong on
    # the same worker (a pool pins the workspace to it).
    live: bool = False
    # A live sandbox's mirror after the run: (rev, root, limits as a dict). A pool's dispatcher then
    # computes the next run's push ahead (as it does from a deferred pull's outcome).
    synced_to: tuple[int, str, dict[str, Any]] | None = None


ExecEvent = OutputChunk | ExitEvent


@dataclass(frozen=True, slots=True)
class SyncLimits:
    """What a mirror accepts, and how a sync is cut into pages.

    ``max_file_bytes`` / ``max_files``: explicit limits (default: none). A file over them, or beyond
    the count, stays in the workspace only: it is listed in ``protected`` (never overwritten or deleted
    by a pull) and reported in the run's ``skipped`` with its reason.

    ``max_sync_bytes`` is *not* a limit on what is mirrored: it bounds the file bytes one page of a
    push or a pull carries (so the memory of one payload). A push with more to send says so
    (``SyncPush.more``) and the mirror asks for the next page with ``after`` set to the page's
    ``cursor``; a file larger than a page travels in pieces of at most a page.
    """

    max_file_bytes: int | None = None
    max_files: int | None = None
    max_sync_bytes: int = 32 * 1024 * 1024
    after: str | None = None  # continue a paged push after this workspace path (None: first page)
    # Revisions the mirror's own pulls committed after its revision: what they changed is in the
    # mirror already, so a push leaves them out (re-creating a file a running program holds open
    # would cut it off from what it writes next: a live sandbox syncs while programs run).
    skip_revs: tuple[int, ...] = ()
    # Workspace paths the mirror dropped (a pull left them alone: see ``Mirror.settle``): an incremental
    # push sends each whole (its subtree as the workspace holds it), whether or not it changed.
    refetch: tuple[str, ...] = ()
    # The store session of the mirror's revision (``SyncPush.session`` of its last push): a push goes
    # on from ``mirror_rev`` only when the store's history holds it (``FileSystem.continues``), else it
    # is a full one (another store with the same id, or an earlier copy of it restored).
    session: str | None = None


@dataclass(frozen=True, slots=True)
class MirrorFile:
    """A file's bytes for (or from) a mirror; ``path`` is an absolute workspace path, ``mtime`` in ms
    and ``sub_ns`` the nanoseconds past it (the store's ``FileStat.sub_ns``: ``make`` compares times
    finer than a millisecond, so a mirror rebuilt from the store sets the exact time a pull read)."""

    path: str
    data: bytes | None  # None: the content did not fit the page; fetch it in pieces (``size`` bytes)
    mode: int = 0o644
    mtime: int = 0
    size: int = -1  # the content's length (-1: ``len(data)``)
    link: str | None = None  # another path of this push or pull naming the same file (a hard link)
    # A large file as its chunks (hex SHA-256 of each 512 KiB piece, the storage's rule): a receiver
    # moves only the chunks it lacks (``data`` is then None).
    chunks: list[str] | None = None
    # A push's file the workspace wrote, not replaced, since the mirror's revision: the mirror writes
    # it into the file it holds there (a program holding it open, its other names, see the write).
    # A pull's file of several names the program wrote through, not replaced: the workspace writes it
    # through its node (every name; ``commit_batch(in_place=)``), its other names not sent.
    same: bool = False
    sub_ns: int = 0

    @property
    def length(self) -> int:
        return self.size if self.size >= 0 or self.data is None else len(self.data)


@dataclass(frozen=True, slots=True)
class MirrorDir:
    path: str
    mode: int = 0o755
    # The directory's own mtime (ms): a push sets it in the mirror once the push is in (what it makes
    # below the directory moves it), a pull keeps the program's. None: left as it comes.
    mtime: int | None = None
    sub_ns: int = 0  # the nanoseconds past ``mtime`` (``MirrorFile.sub_ns``)


@dataclass(frozen=True, slots=True)
class MirrorSymlink:
    path: str
    target: str
    # The link's own mtime (ms; ``touch -h``, ``tar``, ``cp -a`` set it): a pull keeps the program's,
    # a push gives the mirror's link the workspace's. None: the time it is made.
    mtime: int | None = None
    sub_ns: int = 0  # the nanoseconds past ``mtime`` (``MirrorFile.sub_ns``)


@dataclass(frozen=True, slots=True)
class SyncPush:
    """Everything a mirror needs to reach workspace revision ``rev`` below ``root``.

    ``full`` means: this is the whole tree; drop anything of the mirror not listed (a first sync, or
    the change log no longer reached back to the mirror's rev). Otherwise apply ``moves`` first (the
    workspace's renames the mirror follows by renaming what it holds, in order; one it cannot follow
    it drops, and fetches the new name again whole: see ``_moves``), then ``deleted``, ``dirs``,
    ``files`` and ``symlinks``. ``protected`` lists workspace files the mirror does not get (too big,
    too many); the pull must never overwrite or delete them.
    """

    rev: int
    root: str
    full: bool
    files: list[MirrorFile] = field(default_factory=list)
    dirs: list[MirrorDir] = field(default_factory=list)
    symlinks: list[MirrorSymlink] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    # Paged push: ``more`` means another page follows (ask with ``SyncLimits.after=cursor``).
    more: bool = False
    cursor: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # protected path -> why
    moves: list[tuple[str, str]] = field(default_factory=list)  # (old, new): first page only
    session: str = ""  # the store's session (``FileSystem.session``) the revision belongs to
    # The root directory's own mtime (ms) and permission bits in the store (None: not known, or the
    # root is ``/``): the mirror's top is no entry of its state (``_dir_times.RootTime``).
    root_mtime: int | None = None
    root_mode: int | None = None
    root_sub_ns: int = 0  # the nanoseconds past ``root_mtime`` (``MirrorFile.sub_ns``)


@dataclass(frozen=True, slots=True)
class SyncPull:
    """What a run changed in its mirror: created/changed files, created dirs, deleted paths.

    ``protected`` repeats the push's protected paths so the owner can refuse to touch them even
    when the program created a file of the same name.
    """

    root: str
    files: list[MirrorFile] = field(default_factory=list)
    dirs: list[MirrorDir] = field(default_factory=list)
    symlinks: list[MirrorSymlink] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    # A pull cut into pages: the revisions the earlier pages of the same pull committed (they are the
    # run's own changes, not the workspace's), so each page is checked against ``base_rev`` alone.
    own_revs: list[int] = field(default_factory=list)
    # New chunks of large files (``MirrorFile.chunks``), stored under ``/.computer/sync/<staging>``
    # until a page names them; ``done`` on the last page removes that staging directory.
    stage: list[bytes] = field(default_factory=list)
    # The hex SHA-256 of each of ``stage`` as the pull computed it (its ``MirrorFile.chunks``), which
    # names its staged file; empty: computed again there (a second pass over every new byte, s65).
    stage_digests: list[str] = field(default_factory=list)
    staging: str | None = None
    done: bool = True
    # Chunks the store holds (another name's) that a later file of this pull names: staged by reference
    # with the first page, before its removals can free them (see ``_pull_commit``).
    keep: list[str] = field(default_factory=list)
    # A live sandbox's pull: what the program changed below a path the workspace renamed since the
    # last sync goes to the new name, and the mirror renames its node (``PullResult.moves``).
    follow_moves: bool = False
    # A program's directory renames, ``(old, new)`` in order, done before anything else of the page
    # (a pull's first page): what it changed below the new names after them comes as usual (``_pull_moves``).
    renames: list[tuple[str, str]] = field(default_factory=list)
    # The mtimes (ms) of directories the run changed something in (or set with ``touch``), that it did
    # not make: kept in the workspace where the directory is one there still and nothing refuses the
    # path, never reported (a file made in a directory changes the directory's mtime: every run would
    # list its parents as pulled).
    dir_times: dict[str, int] = field(default_factory=dict)
    # The nanoseconds past the ms of ``dir_times`` entries, where not 0 (``MirrorFile.sub_ns``).
    dir_sub_ns: dict[str, int] = field(default_factory=dict)
    # A live mirror's delivery times (``_deliver``): only ``dir_times`` entries, of files, each kept
    # unless the path's time in the store is a delivery already (``LocalExecContext.delivered``).
    delivered: bool = False
    # The pull this page belongs to (``_pull_lost``: the owner records what each pull committed), and
    # a question alone: what the pull of that id committed (``PullResult.own_revs`` and ``renamed``).
    pull_id: str = ""
    asks: str = ""


@dataclass(frozen=True, slots=True)
class PullResult:
    """The outcome of one :meth:`ExecContext.sync_pull`.

    ``rev`` is the revision the mirror now reflects (a lower bound: never past a workspace change it
    does not hold); ``own_revs`` the revisions this pull committed; ``reasons`` says why each path of
    ``skipped`` was left alone. ``moves`` (a pull that follows moves): the workspace's renames since
    the base, ``(old, new, rev)`` in order, that the mirror is to follow before anything else (the
    applied and skipped paths are named as after them); each one it follows it then holds.
    """

    rev: int
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    own_revs: list[int] = field(default_factory=list)
    moves: list[tuple[str, str, int]] = field(default_factory=list)
    # Paths the workspace changed below a followed rename's old name before it, at the new name: the
    # mirror fetches them again (``_moves.carried``).
    carried: list[str] = field(default_factory=list)
    # Chunks the page kept (``SyncPull.keep``) that the store no longer holds: nothing was committed,
    # the mirror sends the pull again without keeping.
    missing: list[str] = field(default_factory=list)
    # The page's ``renames`` were refused (``_pull_moves``): nothing was committed, the mirror sends the
    # pull again without them.
    unrenamed: bool = False
    # The answer to ``SyncPull.asks``: the renames that pull did (in order), its revisions ``own_revs``.
    renamed: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PendingPull:
    """A run's changes for its dispatcher to apply: ``pull`` on top of ``base_rev``; ``limits`` are the
    fields of the :class:`SyncLimits` of the mirror (so the dispatcher can prefetch its next push)."""

    pull: SyncPull
    base_rev: int
    limits: dict[str, Any]


@runtime_checkable
class ExecContext(Protocol):
    """A backend's only way to the workspace. Whole operations only (no per-file chatter).

    In-process it is :class:`~computer.runtime.LocalExecContext`; in a cluster, Ray calls back to the
    owner actor. fs errors raise the same ``OSError`` classes as ``workspace.fs``.
    """

    @property
    def workspace_id(self) -> str: ...

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        """Run one fs operation (``read_file``, ``write_file``, ``find``…) with keyword ``args``.

        Results are msgpack-friendly: dataclass results come back as dicts of their fields.
        """
        ...

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        """What a mirror at ``mirror_rev`` (``None``: empty mirror) needs to reach the current rev."""
        ...

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> PullResult:
        """Apply a run's changes in one transaction; paths changed after ``base_rev`` are skipped."""
        ...

    async def share(self, path: str, expires_after: float) -> str:
        """Publish a workspace file and return its URL (raises when the workspace has no assets)."""
        ...


@runtime_checkable
class DeferringContext(ExecContext, Protocol):
    """A context whose runs hand their pull to the dispatcher (:attr:`ExitEvent.pending`) instead of
    calling :meth:`~ExecContext.sync_pull`, which saves a round trip at the end of every run.

    The mirror then waits, unsettled, until a later run learns the pull's outcome from
    :meth:`pull_outcome`; without it, that run pushes the whole tree again.
    """

    defers_pull: bool

    def pull_outcome(self, run: str) -> tuple[int, list[str]] | None:
        """``(rev, skipped)`` of the deferred pull of the earlier run ``run``, when known."""
        ...


@runtime_checkable
class Backend(Protocol):
    """An execution engine. ``run`` yields output chunks then exactly one :class:`ExitEvent`.

    Closing or cancelling the iterator early must end the program's whole process tree.
    """

    info: BackendInfo

    def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]: ...


@runtime_checkable
class LiveBackend(Protocol):
    """A backend whose runs of one workspace share a live sandbox (SPEC section 10)."""

    async def processes(self, workspace_id: str) -> list[ProcessInfo]:
        """The processes of the workspace's live sandbox; none when it has none."""
        ...

    async def kill_process(self, workspace_id: str, pid: int) -> None:
        """SIGKILL one of them (``ProcessLookupError`` when none has ``pid``)."""
        ...

    async def end_sandbox(self, workspace_id: str) -> bool:
        """Kill everything in it, keep what it wrote, drop it; False when there was none."""
        ...
