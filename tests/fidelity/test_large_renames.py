"""A program's rename of a large file reaches the workspace as the chunks it already holds, not as its
bytes again: ``mv`` of a 200 MB file sent 200 MB (~0.7 s) before. Also a rename with an edit in the
same run (only the changed chunk travels), a link then the old name removed, and the case where the
workspace freed those chunks meanwhile (the pull is sent again, whole, nothing lost). Real programs,
per call and live, checked through ``ws.fs``, the store's chunk lists and a reopen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from computer.runtime import ShellBackend, SyncPull
from computer.runtime._context import LocalExecContext

from ._support import ROOT, PullSpy, digest, ok, opened

CHUNK = 512 * 1024
SIZE = 10 * CHUNK + 1234  # eleven chunks


async def _random_file(ws: Any) -> tuple[str, list[str]]:
    """A run makes ``a.bin`` (eleven chunks of random bytes): its SHA-256 and the store's chunk list."""
    made = await ok(ws, f"head -c {SIZE} /dev/urandom > a.bin && sha256sum a.bin")
    return made.stdout[:64], [c.hash for c in ws.fs.file_chunks(f"{ROOT}/a.bin")]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_programs_rename_of_a_large_file_sends_no_bytes(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = PullSpy(monkeypatch)
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        original, chunks = await _random_file(ws)
        assert len(chunks) == 11

        spy.clear()
        moved = await ok(ws, "mkdir -p sub/deeper && mv a.bin sub/deeper/b.bin")
        assert moved.skipped == [], moved.skipped_reasons
        assert f"{ROOT}/sub/deeper/b.bin" in moved.pulled and f"{ROOT}/a.bin" in moved.pulled
        assert spy.staged() == 0, "a renamed large file was sent as bytes"
        assert spy.kept() == 11
        assert not await ws.fs.exists(f"{ROOT}/a.bin")
        assert [c.hash for c in ws.fs.file_chunks(f"{ROOT}/sub/deeper/b.bin")] == chunks
        assert digest(await ws.fs.read_file(f"{ROOT}/sub/deeper/b.bin")) == original

        # Renamed and edited in one run: the edited chunk alone travels.
        spy.clear()
        edited = await ok(
            ws,
            "mv sub/deeper/b.bin c.bin && printf XYZ | dd of=c.bin bs=1 seek=1000000 conv=notrunc status=none"
            " && sha256sum c.bin",
        )
        assert edited.skipped == [], edited.skipped_reasons
        assert 0 < spy.staged() <= CHUNK
        now = [c.hash for c in ws.fs.file_chunks(f"{ROOT}/c.bin")]
        assert now[0] == chunks[0] and now[2:] == chunks[2:] and now[1] != chunks[1]
        assert digest(await ws.fs.read_file(f"{ROOT}/c.bin")) == edited.stdout[:64]

        # A hard link made, then the old name removed (what ``mv`` does across a ``cp -l`` tree).
        spy.clear()
        relinked = await ok(ws, "ln c.bin d.bin && rm c.bin && sha256sum d.bin")
        assert relinked.skipped == [], relinked.skipped_reasons
        assert spy.staged() == 0
        assert [c.hash for c in ws.fs.file_chunks(f"{ROOT}/d.bin")] == now
        assert not await ws.fs.exists(f"{ROOT}/c.bin")
        final = relinked.stdout[:64]
        # Nothing left staged, and the store holds exactly the file's chunks.
        assert not await ws.fs.exists("/.computer/sync") or await ws.fs.readdir("/.computer/sync") == []
    async with opened(db, python=False) as ws:
        seen = await ok(ws, "sha256sum d.bin; ls")
        assert seen.stdout.split()[0] == final
        assert "a.bin" not in seen.stdout and "c.bin" not in seen.stdout


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_rename_whose_chunks_the_workspace_freed_meanwhile_is_sent_whole(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror reads the renamed file against the old name's chunks, but the workspace removed
    that name (and so freed its chunks) before the pull arrived: the owner refuses the first page
    before committing anything (``PullResult.missing``), and the mirror sends the pull again with
    the file's bytes. The renamed file is whole in the workspace."""
    spy = PullSpy(monkeypatch)
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, f"head -c {SIZE} /dev/urandom > a.bin")

        async def remove_first(ctx: LocalExecContext, page: SyncPull) -> None:
            if page.keep and not spy.results:
                ctx.fs.commit_batch({f"{ROOT}/a.bin": None})  # as a concurrent fs.rm would

        spy.clear()
        spy.before = remove_first
        moved = await ok(ws, "mv a.bin b.bin && sha256sum b.bin")
        spy.before = None
        assert spy.results[0].missing, "the first page should have been refused"
        assert spy.pages[1].keep == [] and spy.staged() >= SIZE
        assert f"{ROOT}/b.bin" in moved.pulled
        assert digest(await ws.fs.read_file(f"{ROOT}/b.bin")) == moved.stdout[:64]
        assert not await ws.fs.exists(f"{ROOT}/a.bin")
        again = await ok(ws, "sha256sum b.bin; ls")
        assert again.stdout.split()[0] == moved.stdout[:64] and "a.bin" not in again.stdout
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "sha256sum b.bin")).stdout[:64] == moved.stdout[:64]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_programs_copy_of_a_large_file_sends_no_bytes(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cp`` makes a new file (a new inode): its chunks are hashed, and those the mirror holds in
    another file travel by hash, kept by the first page (``cp big c && rm big`` in one run too; a
    copy was sent as bytes: 340 ms for 100 MB, now ~150). When the workspace freed them meanwhile, the
    pull is sent again with the bytes."""
    spy = PullSpy(monkeypatch)
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        original, chunks = await _random_file(ws)

        spy.clear()
        copied = await ok(ws, "cp a.bin b.bin && cp a.bin c.bin && rm a.bin")
        assert copied.skipped == [], copied.skipped_reasons
        # Live, a sync tick may catch a copy half made: its partial last chunk goes as bytes.
        assert spy.staged() < CHUNK, "a copy of a large file was sent as bytes"
        for name in ("b.bin", "c.bin"):
            assert [c.hash for c in ws.fs.file_chunks(f"{ROOT}/{name}")] == chunks
            assert digest(await ws.fs.read_file(f"{ROOT}/{name}")) == original
        assert not await ws.fs.exists(f"{ROOT}/a.bin")

        async def remove_first(ctx: LocalExecContext, page: SyncPull) -> None:
            if page.keep and not spy.results:
                ctx.fs.commit_batch({f"{ROOT}/b.bin": None, f"{ROOT}/c.bin": None})

        spy.clear()
        spy.before = remove_first
        again = await ok(ws, "cp b.bin d.bin && sha256sum d.bin")
        spy.before = None
        assert spy.results[0].missing and spy.staged() >= SIZE
        assert digest(await ws.fs.read_file(f"{ROOT}/d.bin")) == again.stdout[:64] == original
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "sha256sum d.bin")).stdout[:64] == original


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_directory_renamed_by_a_pull_past_the_change_log_keeps_every_file(
    tmp_path: Path, live: bool
) -> None:
    """``mv flat flat2`` of a directory whose pull takes several pages, each checked against the run's
    starting revision: the pull's own pages filled the change log, a trim passed that revision, and
    every later page looked like a workspace conflict, so ``mv`` of 60,000 files (the default limit,
    100,000 entries) lost 17,000 of them in the workspace and the sandbox. Here the limit is cut to
    2,000 entries for 2,500 files. The pull holds its revision (``FileSystem.hold_log``)."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        ws.fs.change_log_limit = 2_000
        await ok(ws, "mkdir flat && cd flat && seq 2500 | sed s/^/f/ | xargs touch")
        moved = await ok(ws, "mv flat flat2")
        assert moved.skipped == [], list(moved.skipped_reasons.items())[:3]
        assert len(await ws.fs.readdir(f"{ROOT}/flat2")) == 2500
        assert not await ws.fs.exists(f"{ROOT}/flat")
        assert (await ok(ws, "ls flat2 | wc -l; ls flat 2>&1 | wc -l")).stdout == "2500\n1\n"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, "ls flat2 | wc -l")).stdout == "2500\n"
