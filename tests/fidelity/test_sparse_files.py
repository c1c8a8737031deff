"""Sparse files (``truncate -s``, a disk image, ``dd seek=``) keep their holes through the sync: a pull
does not read or hash a hole, a push does not write one. Before: eight 4 GB sparse files took 24.7 s
to pull, and after a reopen a 3 GB sparse file filled 3 GB of the mirror's tmpfs (memory) in 4.3 s.
Real programs, per call and live, checked through ``ws.fs``, ``du`` in the sandbox and a reopen."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import ROOT, PullSpy, ok, opened

CHUNK = 512 * 1024
GIB = 1 << 30
# A 2 GiB image with data at its start, at 1 GiB (across a chunk boundary) and a short tail.
IMAGE = (
    "truncate -s 2G disk.img"
    " && printf head | dd of=disk.img conv=notrunc status=none"
    f" && printf middle | dd of=disk.img bs=1 seek={GIB - 3} conv=notrunc status=none"
    " && printf tail >> disk.img"
)
# The image's allocated KiB, and a digest of the regions that hold data plus its size.
CHECK = (
    "du -k disk.img | cut -f1"
    f" && (head -c 4 disk.img; dd if=disk.img bs=1 skip={GIB - 3} count=6 status=none;"
    " tail -c 4 disk.img; stat -c %s disk.img) | sha256sum | cut -c1-64"
)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_sparse_image_keeps_its_holes_through_calls_and_a_reopen(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = PullSpy(monkeypatch)
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(ws, f"{IMAGE} && {CHECK}")
        used, expected = made.stdout.split()
        assert int(used) <= 64, made.stdout  # the sandbox's own file is sparse
        assert made.skipped == [], made.skipped_reasons
        # The pull read only the chunks holding data (the head's, two for the middle, the 4-byte tail's)
        # and sent the hole's chunk once.
        assert spy.staged() == 4 * CHUNK + 4
        assert (await ws.fs.stat(f"{ROOT}/disk.img")).size == 2 * GIB + 4
        assert await ws.fs.read_file(f"{ROOT}/disk.img", offset=GIB - 3, length=6) == b"middle"
        assert await ws.fs.read_file(f"{ROOT}/disk.img", offset=GIB + 4096, length=8) == bytes(8)
        # A program writes into a hole in a later call: one chunk travels.
        spy.clear()
        await ok(ws, f"printf more | dd of=disk.img bs=1 seek={GIB + CHUNK * 7} conv=notrunc status=none")
        assert 0 < spy.staged() <= CHUNK
        assert await ws.fs.read_file(f"{ROOT}/disk.img", offset=GIB + CHUNK * 7, length=4) == b"more"
        await ok(
            ws, f"printf '\\0\\0\\0\\0' | dd of=disk.img bs=1 seek={GIB + CHUNK * 7} conv=notrunc status=none"
        )
    # A fresh mirror (a new process): the push leaves the holes out.
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        seen = await ok(ws, CHECK)
        used_now, digest_now = seen.stdout.split()
        assert digest_now == expected
        # The push writes the blocks holding data (of three chunks and the tail), never a hole.
        assert int(used_now) <= 4 * CHUNK // 1024, f"the push wrote the holes out: {used_now} KiB allocated"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_workspace_files_of_zeros_reach_the_sandbox_as_holes(tmp_path: Path, live: bool) -> None:
    """A workspace file of 8 MiB of zeros and a short tail is written into the mirror without its zero
    chunks; then the workspace replaces it with one chunk changed: the new file (a kernel copy of the
    held one, then the chunks that differ) stays sparse, and both read right in the sandbox."""
    zeros = bytes(8 << 20) + b"end"
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/zeros.bin", zeros)
        seen = await ok(
            ws, "du -k zeros.bin | cut -f1 && tail -c 3 zeros.bin && echo && stat -c %s zeros.bin"
        )
        used, tail, size = seen.stdout.split()
        assert (tail, int(size)) == ("end", len(zeros))
        assert int(used) <= 64, f"{used} KiB allocated for a file of holes"
        changed = zeros[: 3 * CHUNK] + b"x" * CHUNK + zeros[4 * CHUNK :]
        await ws.fs.rm(f"{ROOT}/zeros.bin")
        await ws.fs.write_file(f"{ROOT}/zeros.bin", changed)
        again = await ok(ws, "du -k zeros.bin | cut -f1 && sha256sum zeros.bin | cut -c1-64")
        used, digest = again.stdout.split()
        assert digest == hashlib.sha256(changed).hexdigest()
        assert int(used) <= CHUNK // 1024 + 64, f"{used} KiB allocated"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_sparse_file_whose_size_is_no_whole_number_of_chunks_stays_a_hole(
    tmp_path: Path, live: bool
) -> None:
    """``truncate -s 3000000`` (5 whole chunks and a short one, all holes) and ``: > empty`` in one
    call, read back after a reopen (a fresh mirror): the short last chunk of zeros stays a hole too.
    Before, only whole chunks were known as holes: the last one (up to 512 KiB of zeros) was fetched
    from the store and written out in every mirror the file was pushed to."""
    db = tmp_path / "ws.sqlite"
    probe = "stat -c '%n %s %b' sparse empty"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(ws, f"truncate -s 3000000 sparse && : > empty && {probe}")
        assert made.stdout == "sparse 3000000 0\nempty 0 0\n"
        assert (await ws.fs.stat(f"{ROOT}/sparse")).size == 3_000_000
        assert (await ws.fs.stat(f"{ROOT}/empty")).size == 0
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        seen = await ok(ws, f"{probe} && cmp -n 3000000 sparse /dev/zero && echo zeros")
        assert seen.stdout == "sparse 3000000 0\nempty 0 0\nzeros\n", "the push wrote the hole's tail out"


# 32 MiB with 4 KiB of data at the start of every MiB (each chunk part data, part hole), and a small
# file of 256 KiB of zeros a program wrote out between two bytes.
PATCHY = (
    "truncate -s 32M patchy.bin && for i in $(seq 0 31); do"
    " head -c 4096 /dev/urandom | dd of=patchy.bin bs=4096 seek=$((i * 256)) conv=notrunc status=none; done"
    " && (printf a && head -c 262144 /dev/zero && printf b) > zeros.bin"
)
BLOCKS = "stat -c '%n %s %b' patchy.bin zeros.bin && sha256sum patchy.bin zeros.bin"


def _blocks(stdout: str) -> tuple[dict[str, int], list[str]]:
    """The 512-byte blocks each file holds (``stat %b``), and the rest of :data:`BLOCKS`' output."""
    lines = stdout.splitlines()
    return {n: int(b) for n, _, b in (line.split() for line in lines[:2])}, lines[2:]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_chunks_part_data_part_hole_keep_their_holes_after_a_reopen(tmp_path: Path, live: bool) -> None:
    """A chunk holding some data and some holes is written by the push data block by data block (4 KiB):
    after a reopen (a fresh mirror) a file with 4 KiB of data every MiB takes about the blocks it took in
    the sandbox that made it. Before, every chunk holding data was written whole: 32 chunks of 512 KiB
    (16 MiB of the mirror's tmpfs, memory) for 128 KiB of data. Decision (``_beneath.write_sparse``): a
    block of zeros the program wrote out becomes a hole in a mirror the push fills: the same bytes,
    fewer blocks. A file the workspace writes reaches the sandbox with its holes too."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made, content = _blocks((await ok(ws, f"{PATCHY} && {BLOCKS}")).stdout)
        assert made["patchy.bin"] <= 2 * (32 * 4096) // 512, made  # the sandbox's own file is sparse
        assert made["zeros.bin"] >= 262144 // 512, made  # its zeros were written out
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        now, content_now = _blocks((await ok(ws, BLOCKS)).stdout)
        assert content_now == content
        slack = 64 * 1024 // 512
        assert now["patchy.bin"] <= made["patchy.bin"] + slack, f"the push wrote holes out: {now} vs {made}"
        assert now["zeros.bin"] <= 2 * 4096 // 512, f"the zeros written out are no hole: {now}"
        # A workspace write of such a file, into the mirror the sandbox has: its holes stay too.
        patchy = bytearray(8 << 20)
        for i in range(8):
            patchy[i << 20 : (i << 20) + 4096] = b"%d" % i * 4096
        await ws.fs.write_file(f"{ROOT}/written.bin", bytes(patchy))
        seen = await ok(ws, "stat -c %b written.bin && sha256sum < written.bin | cut -c1-64")
        used, digest = seen.stdout.split()
        assert digest == hashlib.sha256(patchy).hexdigest()
        assert int(used) <= (8 * 4096 + 64 * 1024) // 512, f"{used} blocks for 32 KiB of data"
