"""Helpers of the fidelity tests: open a workspace from a SQLite file, run one bounded step, compare views.

Decisions:
- ``opened`` builds *fresh* backends each time, so a reopen is what a new process sees: the mirror is
  rebuilt from the SQLite file (a reopen with the same backend object would reuse a warm mirror and
  hide every defect of a rebuild).
- ``run`` bounds every wait: the program's own ``timeout`` plus a margin for the sync bracket.
- Views are content hashes, so two views compare in one assertion and a failure names the paths.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import RuleBasedStateMachine

import computer
from computer.runtime import PullResult, PythonBackend, ShellBackend, SyncPull
from computer.runtime._context import LocalExecContext
from computer.runtime.types import ExecResult

T = TypeVar("T")

ROOT = "/workspace"
# Seconds a run's result may take beyond its program's timeout (push, pull, sandbox teardown).
MARGIN = 120.0


class WorkspaceMachine(RuleBasedStateMachine):
    """The base of the fidelity state machines: one workspace file in a directory of its own
    (``prefix``), driven from an event loop of the machine's own. ``call`` runs one step bounded by
    ``bound`` seconds; ``teardown`` runs ``finish`` (a machine's last checks), then closes ``ws`` and
    removes the directory whatever happened."""

    prefix = "fid-"
    bound = 4 * MARGIN
    ws: computer.Workspace

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix=self.prefix))
        self.db = str(self.dir / "ws.sqlite")

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, self.bound))

    def finish(self) -> None:
        """What a machine checks or settles before its workspace closes (nothing here)."""

    def teardown(self) -> None:
        try:
            self.finish()
        finally:
            try:
                if hasattr(self, "ws"):
                    self.call(self.ws.close())
            finally:
                self.loop.close()
                shutil.rmtree(self.dir, ignore_errors=True)


# A sandbox per call and a live one: what most fidelity tests run under both.
KINDS = [pytest.param(False, id="per-call"), pytest.param(True, id="live")]


def need(*tools: str) -> None:
    """Skip unless every program of ``tools`` is installed (CI installs them: ``.ci/run``)."""
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed on this machine")


def shell(live: bool) -> ShellBackend:
    """A fresh shell backend, live or per call (a live one skips where there is no cgroup freezer)."""
    backend = ShellBackend(live=live)
    if live and not backend.live:
        pytest.skip("no cgroup freezer here")
    return backend


@asynccontextmanager
async def opened(
    path: Path | str | None,
    *,
    shell: ShellBackend | None = None,
    python: bool = True,
    python_live: bool = True,
    **workspace_options: Any,
) -> AsyncIterator[computer.Workspace]:
    """A workspace over ``path`` with fresh backends (or ``shell``), ``/workspace`` made; closed after.
    ``python_live``: the python backend's live sandboxes (False: a sandbox per call)."""
    backends: list[Any] = [shell or ShellBackend()]
    if python:
        backends.append(PythonBackend(live=python_live))
    ws = computer.Workspace(None if path is None else str(path), backends=backends, **workspace_options)
    try:
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT, recursive=True)
        yield ws
    finally:
        await asyncio.wait_for(ws.close(), MARGIN)


# Whether this host has live python sandboxes (a cgroup freezer), and the two ways a python run goes,
# for tests parametrized over both (``python_modes``).
PYTHON_LIVE = PythonBackend(live=True).live
PYTHON_MODES = [pytest.param(False, id="one-off"), pytest.param(True, id="live")]


def python_mode(path: Path, live: bool) -> Any:
    """:func:`opened` with the python backend one-off or live (skipped where live cannot run)."""
    if live and not PYTHON_LIVE:
        pytest.skip("no cgroup freezer here")
    return opened(path, python_live=live)


async def run(ws: computer.Workspace, source: str, **options: Any) -> ExecResult:
    """One exec call (``timeout`` defaults to 60 s), its result awaited within it plus :data:`MARGIN`."""
    options.setdefault("timeout", 60.0)
    handle = await ws.runtime.exec(source, **options)
    return await asyncio.wait_for(handle.result(), options["timeout"] + MARGIN)


async def ok(ws: computer.Workspace, source: str, **options: Any) -> ExecResult:
    """:func:`run` that must complete (the assertion shows the output)."""
    result = await run(ws, source, **options)
    assert result.status == "completed", (
        source,
        result.exit_code,
        result.stdout,
        result.stderr,
        result.error,
    )
    return result


async def started(ws: computer.Workspace, source: str, marker: str = "ready", *, seconds: float = 60) -> Any:
    """Start a run (its timeout: ``seconds``) and return its handle once ``marker`` is in its stdout."""
    handle = await ws.runtime.exec(source, timeout=seconds)

    async def until_marker() -> None:
        async for snapshot in handle:
            if marker in snapshot.stdout or snapshot.done:
                return

    await asyncio.wait_for(until_marker(), seconds + MARGIN)
    return handle


async def settle(handle: Any, seconds: float = 60) -> ExecResult:
    """The result of a run started by :func:`started` (bounded like it)."""
    result: ExecResult = await asyncio.wait_for(handle.result(), seconds + MARGIN)
    return result


async def until(check: Callable[[], Awaitable[bool]], within: float = 60.0) -> None:
    """Poll ``check`` until true, within a bound (a background program's pace sets how long)."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"not true within {within} s"
        await asyncio.sleep(0.05)


class Large(bytes):
    """Bytes printed short (a state machine prints every step's arguments when it fails)."""

    def __repr__(self) -> str:
        return f"Large({self[:1]!r} * {len(self)})"


def hold_tick_pulls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A live sandbox's ticks pull nothing until ``monkeypatch`` is undone (their paced look is held
    quiet; a tick still pushes the workspace's writes); a run's start and end pull as always. For a
    check of what one pull makes of a run's several steps: a tick lands between two of them on a
    loaded machine (a program's ``ln f t && echo >> t && rm t`` then listed ``t`` too)."""
    from computer.runtime._mirror_watch import MirrorWatch

    quiet = MirrorWatch.quiet
    monkeypatch.setattr(MirrorWatch, "quiet", lambda self, paced=False: paced or quiet(self, paced))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def workspace_view(ws: computer.Workspace, root: str = ROOT) -> dict[str, str]:
    """Every regular file below ``root`` in the workspace: path -> sha256."""
    return {path: digest(await ws.fs.read_file(path)) for path in await ws.fs.ls(root)}


async def sandbox_view(ws: computer.Workspace, root: str = ROOT) -> dict[str, str]:
    """Every regular file below ``root`` as a shell run sees it: path -> sha256 (``output=False``: the
    whole listing kept in memory; the default output limits kept only its last ~850 files)."""
    result = await ok(
        ws, f"cd {root} && find . -type f -print0 | sort -z | xargs -0r sha256sum", output=False
    )
    assert not result.truncated, result.truncated
    view = {}
    for line in result.stdout.splitlines():
        checksum, name = line.split("  ", 1)
        view[f"{root}/{name[2:]}"] = checksum
    return view


def reasons_cover_skipped(result: ExecResult) -> None:
    """SPEC 10: every path in ``skipped`` has a non-empty reason in ``skipped_reasons``."""
    missing = [p for p in result.skipped if not result.skipped_reasons.get(p)]
    assert not missing, f"skipped without a reason: {missing} (reasons: {result.skipped_reasons})"


# A program that starts 64 threads (an address-space rlimit stopped it at ~14) and prints how many.
THREADS = """
import threading
go = threading.Event()
threads = []
try:
    for _ in range(64):
        t = threading.Thread(target=go.wait, args=(30,))
        t.start()
        threads.append(t)
finally:
    go.set()
    for t in threads:
        t.join(30)
print(len(threads))
"""


class PullSpy:
    """The pages of pulls the owner (an embedded workspace's) was sent, bytes staged and chunks kept, and
    what it answered; ``before(ctx, page)`` runs ahead of each (a concurrent workspace change)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pages: list[SyncPull] = []
        self.results: list[PullResult] = []
        self.before: Any = None  # called with (ctx, page) before the real sync_pull
        real = LocalExecContext.sync_pull
        spy = self

        async def sync_pull(ctx: LocalExecContext, pull: SyncPull, base_rev: int) -> PullResult:
            if spy.before is not None:
                await spy.before(ctx, pull)
            spy.pages.append(pull)
            result = await real(ctx, pull, base_rev)
            spy.results.append(result)
            return result

        monkeypatch.setattr(LocalExecContext, "sync_pull", sync_pull)

    def staged(self) -> int:
        return sum(len(piece) for page in self.pages for piece in page.stage)

    def kept(self) -> int:
        return sum(len(page.keep) for page in self.pages)

    def clear(self) -> None:
        self.pages.clear()
        self.results.clear()


def machine_runner(machine: type[T], examples: int, steps: int) -> type[T]:
    """``machine`` under the fidelity state machines' settings (a subclass: hypothesis applies settings
    once per class). By default derandomized, no shrinking, no example database: CI runs the same
    examples every time. ``COMPUTER_HYPOTHESIS_SEED=<int>`` or ``=random`` (a fresh seed, printed) runs
    it randomized from that seed, with shrinking and the failure's blob printed;
    ``COMPUTER_HYPOTHESIS_EXAMPLES=<int>`` replaces ``examples`` (see README.md)."""
    wanted = os.environ.get("COMPUTER_HYPOTHESIS_SEED", "").strip()
    examples = int(os.environ.get("COMPUTER_HYPOTHESIS_EXAMPLES") or examples)
    common: dict[str, Any] = {
        "max_examples": examples,
        "stateful_step_count": steps,
        "deadline": None,
        "database": None,
        "suppress_health_check": list(HealthCheck),
    }
    runner = type(machine.__name__, (machine,), {})
    if not wanted:
        return settings(derandomize=True, phases=[Phase.explicit, Phase.generate], **common)(runner)
    chosen = random.randrange(2**32) if wanted == "random" else int(wanted)
    print(f"{machine.__name__}: COMPUTER_HYPOTHESIS_SEED={chosen}, {examples} examples of {steps} steps")
    runner = settings(derandomize=False, print_blob=True, **common)(runner)
    return seed(chosen)(runner)  # type: ignore[no-any-return]
