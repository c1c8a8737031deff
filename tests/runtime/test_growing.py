"""A large file a program keeps writing is pulled by a live sandbox's ticks at growing intervals
(``_growing``), whole at every pull that is not a tick's, and at once when it goes quiet.

The mirror-level tests drive the writer and the clock themselves (no timing): each step appends a chunk
and runs a tick's pull, with the clock 0.1 s later. In a live sandbox: test_live.py (a growing file
seen while written, whole at the run's end and after a kill)."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from computer.runtime import MirrorDir, MirrorFile, SyncPush, _growing
from computer.runtime._entry import MTIME_NS, SIZE
from computer.runtime._growing import touched_by
from computer.runtime._mirror import Mirror
from computer.storage._chunks import CHUNK_SIZE

TICK = 0.1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_growing, "clock", fake)
    return fake


def mirror_of(tmp_path: Path) -> Mirror:
    mirror = Mirror(tmp_path / "m", "/workspace")
    mirror.apply(SyncPush(1, "/workspace", True, [], [MirrorDir("/workspace/d")]))
    mirror.arm()
    return mirror


def pull(mirror: Mirror, rev: int, paced: bool) -> set[str]:
    """One pull as a sync does it (plan, read, settle): the workspace paths of the files it read."""
    plan, now = mirror.plan(paced=paced)
    read = mirror.read_all(plan)
    mirror.settle(now, rev, (), plan)
    return {f.path for f in read.files}


BIG = "/workspace/d/big"


def test_a_file_written_at_every_tick_is_pulled_at_growing_intervals_and_whole_when_quiet(
    tmp_path: Path, clock: Clock
) -> None:
    mirror = mirror_of(tmp_path)
    path = mirror.directory / "d/big"
    pulled_at: list[float] = []
    last_pulled = clock.now
    for step in range(60):  # six seconds of a writer appending a chunk per tick
        clock.now += TICK
        with open(path, "ab") as f:
            f.write(bytes([step % 251]) * CHUNK_SIZE)
        if BIG in pull(mirror, 2 + step, paced=True):
            pulled_at.append(clock.now)
            last_pulled = clock.now
        # A poller sees it at most MAX_WAIT and a tick behind the program.
        assert clock.now - last_pulled <= _growing.MAX_WAIT + TICK + 1e-9
    # Every tick read the whole file before (60 pulls, 1,830 chunks); the waits double up to MAX_WAIT.
    assert len(pulled_at) <= 12, pulled_at
    assert mirror.growing.deferred >= 48
    # It went quiet: the next tick pulls it at once, whole.
    clock.now += TICK
    written = path.read_bytes()
    if mirror.state["d/big"][SIZE] != len(written):
        assert BIG in pull(mirror, 100, paced=True)
    assert mirror.state["d/big"][SIZE] == len(written)
    assert not mirror.forced


def test_a_pull_that_is_not_a_ticks_takes_a_deferred_file_at_once(tmp_path: Path, clock: Clock) -> None:
    mirror = mirror_of(tmp_path)
    path = mirror.directory / "d/big"
    deferred_once = False
    for step in range(10):
        clock.now += TICK
        with open(path, "ab") as f:
            f.write(b"x" * CHUNK_SIZE)
        before = mirror.growing.deferred
        pull(mirror, 2 + step, paced=True)
        if mirror.growing.deferred > before:
            deferred_once = True
            break
    assert deferred_once
    with open(path, "ab") as f:  # still writing when the run ends
        f.write(b"y" * CHUNK_SIZE)
    assert BIG in pull(mirror, 50, paced=False)  # the run's end (or a kill, the sandbox's end)
    assert mirror.state["d/big"][SIZE] == path.stat().st_size


def test_small_files_are_pulled_at_every_tick(tmp_path: Path, clock: Clock) -> None:
    mirror = mirror_of(tmp_path)
    path = mirror.directory / "d/log"
    for step in range(20):
        clock.now += TICK
        with open(path, "ab") as f:
            f.write(b"line %d\n" % step)
        assert "/workspace/d/log" in pull(mirror, 2 + step, paced=True)
    assert mirror.growing.deferred == 0


def test_a_file_whose_pulls_take_long_waits_nine_times_that(tmp_path: Path, clock: Clock) -> None:
    """The ticks spend at most a tenth of the time on it: a fixed wait alone leaves the work quadratic
    in the time a file grows (each pull of a file of gigabytes takes longer than the wait)."""
    mirror = mirror_of(tmp_path)
    path = mirror.directory / "d/big"
    read_all = mirror.read_all

    def slow_read(plan: object) -> object:
        clock.now += 0.5  # this pull's reading, hashing and committing took half a second
        return read_all(plan)  # type: ignore[arg-type]

    mirror.read_all = slow_read  # type: ignore[method-assign,assignment]
    pulled_at = []
    for step in range(40):
        clock.now += TICK
        with open(path, "ab") as f:
            f.write(b"z" * CHUNK_SIZE)
        if BIG in pull(mirror, 2 + step, paced=True):
            pulled_at.append(clock.now)
    gaps = [b - a for a, b in itertools.pairwise(pulled_at[2:])]
    assert gaps and min(gaps) >= _growing.SHARE * 0.5, pulled_at


class GrowingMachine(RuleBasedStateMachine):
    """A writer, the ticks and the syncs that are not a tick's, in any order (the clock the machine's):
    a tick never leaves the file more than ``MAX_WAIT`` and a tick behind (pulls taking no time here),
    a tick that finds it as the last one did and every pull that is not a tick's take it whole, and
    what the state holds is what the file held at its last pull."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        self.mirror = mirror_of(self.tmp)
        self.path = self.mirror.directory / "d/big"
        self.now = 1000.0
        self.rev = 2
        self.last = self.now  # when the state last matched the file
        self.saved = _growing.clock
        _growing.clock = lambda: self.now

    def teardown(self) -> None:
        _growing.clock = self.saved
        self.mirror.unwatch()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(chunks=st.integers(1, 3))
    def append(self, chunks: int) -> None:
        with open(self.path, "ab") as f:
            f.write(os.urandom(64) * (chunks * CHUNK_SIZE // 64))

    @rule(at=st.integers(0, 3))
    def patch_earlier_bytes(self, at: int) -> None:
        if self.path.exists() and self.path.stat().st_size > at * CHUNK_SIZE:
            with open(self.path, "r+b") as f:
                f.seek(at * CHUNK_SIZE)
                f.write(os.urandom(100))

    def _pull(self, paced: bool) -> None:
        self.rev += 1
        pull(self.mirror, self.rev, paced)
        entry = self.mirror.state.get("d/big")
        if not self.path.exists():
            matches = entry is None
        else:
            st_ = self.path.stat()
            matches = entry is not None and (entry[SIZE], entry[MTIME_NS]) == (st_.st_size, st_.st_mtime_ns)
        if matches:
            self.last = self.now  # the state holds the file as it is (as the workspace does)

    @rule()
    def tick(self) -> None:
        self.now += TICK
        self._pull(paced=True)
        assert self.now - self.last <= _growing.MAX_WAIT + TICK + 1e-9

    @rule()
    def idle_ticks(self) -> None:
        """Two ticks with no write: the second finds the file as the first did and takes it."""
        self.now += TICK
        self._pull(paced=True)
        self.now += TICK
        self._pull(paced=True)
        self._check_whole()

    @rule()
    def runs_end(self) -> None:
        self._pull(paced=False)
        self._check_whole()

    def _check_whole(self) -> None:
        if self.path.exists():
            st_ = self.path.stat()
            entry = self.mirror.state["d/big"]
            assert (entry[SIZE], entry[MTIME_NS]) == (st_.st_size, st_.st_mtime_ns)
            assert "d/big" not in self.mirror.forced


TestGrowingMachine = GrowingMachine.TestCase
TestGrowingMachine.settings = settings(
    max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)


def test_a_push_touches_a_deferred_file_at_above_or_below_its_path() -> None:
    """``touched_by``: what makes a live sandbox's tick pull every file whole before its push (s65)."""
    kept = ["/workspace/d/big"]

    def page(**kwargs: object) -> SyncPush:
        return SyncPush(2, "/workspace", **{"full": False, **kwargs})  # type: ignore[arg-type]

    assert not touched_by(page(deleted=["/workspace/d/big"]), [])
    assert touched_by(page(deleted=["/workspace/d/big"]), kept)
    assert touched_by(page(files=[MirrorFile("/workspace/d/big", b"x")]), kept)
    assert touched_by(page(moves=[("/workspace/d", "/workspace/e")]), kept)  # a directory above
    assert touched_by(page(dirs=[MirrorDir("/workspace/d/big/x")]), kept)  # replaced by a directory
    assert touched_by(page(full=True), kept) and touched_by(page(more=True), kept)
    assert not touched_by(page(deleted=["/workspace/d/bigger", "/workspace/e"]), kept)
    assert not touched_by(page(files=[MirrorFile("/workspace/d/other", b"x")]), kept)
