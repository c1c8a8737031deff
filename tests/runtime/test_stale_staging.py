"""A pull cut into pages stages its large files' new chunks under ``/.computer/sync/<id>`` until its
last page names them; a later pull's first page removes the staging left by pulls that never finished
(``_pull_commit._sweep_stale``, untouched for ``STALE_STAGING``, an hour). That age was the wall
clock's alone: a step forward of more than an hour (NTP after a suspend, a VM migrated) between two
pages of one pull let another pull's first page (a second mirror of the workspace: the other backend,
a concurrent call) remove the live pull's staging, and its last page's large file was refused,
"unknown chunk": the sandbox's file removed, the workspace's kept, the program's bytes gone. The
owner now keeps, by the monotonic clock, when each of its pulls in progress last staged."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from computer.runtime import _pull_commit
from computer.runtime._backend import MirrorFile, SyncPull
from computer.runtime._context import LocalExecContext
from computer.storage import FileSystem

CHUNK = 512 * 1024
HOUR = 3600.0


class _Clock:
    """The wall clock (``time.time``, the store's too) stepped forward by ``offset`` seconds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + self.offset)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Clock]:
    yield _Clock(monkeypatch)


def _big(fill: int) -> tuple[bytes, str]:
    data = bytes([fill]) * CHUNK
    return data, hashlib.sha256(data).hexdigest()


def _page(path: str, staging: str, stage: list[bytes], named: list[str] | None, done: bool) -> SyncPull:
    files = [MirrorFile(path, None, 0o644, 1_000, CHUNK * len(named), None, named)] if named else []
    digests = [hashlib.sha256(data).hexdigest() for data in stage]
    return SyncPull("/w", files=files, stage=stage, stage_digests=digests, staging=staging, done=done)


async def test_a_wall_clock_step_never_removes_a_pull_in_progress_s_staging(
    fs: FileSystem, clock: _Clock
) -> None:
    await fs.mkdir("/w")
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    a, a_digest = _big(1)
    b, b_digest = _big(2)
    first = await ctx.sync_pull(_page("/w/a", "pullA", [a], None, done=False), fs.rev)
    assert first.reasons == {}
    clock.offset = 2 * HOUR  # the step, between the live pull's pages
    other = await ctx.sync_pull(_page("/w/b", "pullB", [b], [b_digest], done=True), fs.rev)
    assert other.reasons == {} and await fs.read_file("/w/b") == b
    last = await ctx.sync_pull(_page("/w/a", "pullA", [], [a_digest], done=True), fs.rev)
    assert last.reasons == {}, last.reasons  # was: "could not be applied: ... unknown chunk ..."
    assert await fs.read_file("/w/a") == a
    assert await fs.readdir(_pull_commit.STAGING) == []  # each last page removed its own


async def test_a_pull_that_never_finished_is_still_swept_after_an_hour(
    fs: FileSystem, clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monotonic record keeps a staging only while its pull may still come back: one cancelled
    between pages is removed by the first pull an hour later (monotonic and wall clock both)."""
    await fs.mkdir("/w")
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    a, _ = _big(1)
    b, b_digest = _big(2)
    await ctx.sync_pull(_page("/w/a", "gone", [a], None, done=False), fs.rev)  # never continued
    clock.offset = 2 * HOUR
    monotonic = time.monotonic() + 2 * HOUR
    monkeypatch.setattr(_pull_commit, "monotonic", lambda: monotonic)
    other = await ctx.sync_pull(_page("/w/b", "next", [b], [b_digest], done=True), fs.rev)
    assert other.reasons == {}
    assert await fs.readdir(_pull_commit.STAGING) == []
    assert ctx.live_staging == {}


async def test_a_pull_s_own_later_pages_never_sweep_its_staging(fs: FileSystem, clock: _Clock) -> None:
    """Only a pull's first page sweeps (its directory is not there yet): a step between its own pages
    never reaches its staging (pinned; safe before the monotonic record too)."""
    await fs.mkdir("/w")
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    a, a_digest = _big(1)
    c, c_digest = _big(3)
    await ctx.sync_pull(_page("/w/a", "pullA", [a], None, done=False), fs.rev)
    clock.offset = 2 * HOUR
    more = await ctx.sync_pull(_page("/w/a", "pullA", [c], None, done=False), fs.rev)
    last = await ctx.sync_pull(_page("/w/a", "pullA", [], [a_digest, c_digest], done=True), fs.rev)
    assert (more.reasons, last.reasons) == ({}, {})
    assert await fs.read_file("/w/a") == a + c
    assert ctx.live_staging == {}
