"""Directories' own mtimes round-trip (SPEC section 10: "mtimes ... round-trip"), as files' do: what a
run sets (``touch -d``, ``tar x``, a name made or removed in the directory) reaches the workspace, and
a rebuilt mirror (a reopen) shows the workspace's times, for the one-sandbox-per-run shell and the live
sandbox alike. A directory's time alone is never listed in ``pulled``: a file made in a directory moves
the directory's time, and every run would list its parents."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ._support import ok, opened, shell

KINDS = [pytest.param(False, id="per-run"), pytest.param(True, id="live")]


@pytest.mark.parametrize("live", KINDS)
async def test_touched_directories_keep_their_time_through_a_reopen(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        result = await ok(ws, "mkdir -p a/b/c && touch -d @1500000000 a/b/c a/b a && mkdir empty")
        made = ["/workspace/a", "/workspace/a/b", "/workspace/a/b/c", "/workspace/empty"]
        assert result.pulled == made  # every directory the run made (was: the leaves)
        for path in ("/workspace/a", "/workspace/a/b", "/workspace/a/b/c"):
            assert (await ws.fs.stat(path)).mtime == 1_500_000_000_000, path
        # a later run's touch of an existing directory, alone: kept, not listed
        result = await ok(ws, "touch -d @1400000000.5 a/b")
        assert result.pulled == []
        assert (await ws.fs.stat("/workspace/a/b")).mtime == 1_400_000_000_500
    async with opened(db, shell=shell(live), python=False) as ws:  # a new mirror, from the SQLite file
        result = await ok(ws, "stat -c '%n %Y' a a/b a/b/c")
        assert result.stdout == "a 1500000000\na/b 1400000000\na/b/c 1500000000\n"


@pytest.mark.parametrize("live", KINDS)
async def test_a_name_made_or_removed_moves_its_directory_time(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p d && echo x > d/old && touch -d @1500000000 d")
        assert (await ws.fs.stat("/workspace/d")).mtime == 1_500_000_000_000
        result = await ok(ws, "echo y > d/new && stat -c %Y d")
        assert result.pulled == ["/workspace/d/new"]  # the directory's own time is not listed
        made = int(result.stdout) * 1000
        assert made > 1_500_000_000_000
        assert (await ws.fs.stat("/workspace/d")).mtime // 1000 * 1000 == made
        await ok(ws, "touch -d @1500000000 d")
        result = await ok(ws, "rm d/old && stat -c %Y d")
        assert (await ws.fs.stat("/workspace/d")).mtime // 1000 == int(result.stdout)
        assert int(result.stdout) > 1_500_000_000


async def test_a_tar_extracted_in_one_run_lists_the_same_in_the_next_after_a_reopen(db: Path) -> None:
    """``tar`` sets each directory's time after filling it: the listing a later run makes (``tar tv``
    of a fresh archive) matches the archive's, on a rebuilt mirror."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, when in (("pkg", 1_300_000_000), ("pkg/sub", 1_200_000_000)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, when
            archive.addfile(info)
        info = tarfile.TarInfo("pkg/sub/file.txt")
        info.size, info.mtime = 3, 1_100_000_000
        archive.addfile(info, io.BytesIO(b"abc"))
    async with opened(db, python=False) as ws:
        await ws.fs.write_file("/workspace/in.tar", buffer.getvalue())
        await ok(ws, "tar xf in.tar")
    async with opened(db, python=False) as ws:
        result = await ok(ws, "stat -c '%n %Y' pkg pkg/sub pkg/sub/file.txt")
        assert result.stdout == "pkg 1300000000\npkg/sub 1200000000\npkg/sub/file.txt 1100000000\n"


async def test_a_directory_the_workspace_made_shows_its_time_in_the_sandbox(db: Path) -> None:
    async with opened(db, python=False) as ws:
        ws.fs.commit_batch(
            {"/workspace/w/x/f": b"1"},
            mkdirs=["/workspace/w/x"],
            mtimes={"/workspace/w/x": 1_234_567_890_000},
        )
        ws.fs.commit_batch({}, mtimes={"/workspace/w": 1_234_000_000_000})
        result = await ok(ws, "stat -c '%n %Y' w w/x")
        assert result.stdout == "w 1234000000\nw/x 1234567890\n"


@pytest.mark.parametrize("live", KINDS)
async def test_a_symlinks_own_time_round_trips_through_a_reopen(db: Path, live: bool) -> None:
    """A link's own mtime (``touch -h``, ``tar x``, ``cp -a`` set it) reaches the workspace and a rebuilt
    mirror: it became the time of the first run after a reopen. A later ``touch -h`` alone is a change
    of the link (pulled); the target keeps its own time."""
    listing = "stat -c '%n %Y' l l2 f copy/l l3"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "echo x > f; touch -d @1500000000 f; ln -s f l; touch -h -d @1000000000 l; "
            "ln -s nowhere l2; touch -h -d @1100000000 l2; mkdir copy; cp -a l copy/l; "
            "ln -s f l3; touch -h -d @1200000000 l3; tar cf t.tar l3; rm l3; tar xf t.tar; rm t.tar",
        )
        first = await ok(ws, listing)
        assert first.stdout == "l 1000000000\nl2 1100000000\nf 1500000000\ncopy/l 1000000000\nl3 1200000000\n"
        times = {e.name: e.mtime for e in await ws.fs.readdir("/workspace")}
        assert (times["l"], times["l2"], times["f"]) == (1000000000000, 1100000000000, 1500000000000)
        touched = await ok(ws, "touch -h -d @1300000000 l2")
        assert touched.pulled == ["/workspace/l2"]
    async with opened(db, shell=shell(live), python=False) as ws:
        again = await ok(ws, listing)
        assert again.stdout == first.stdout.replace("l2 1100000000", "l2 1300000000")
        assert again.pulled == []


@pytest.mark.parametrize("live", KINDS)
async def test_the_workspace_roots_own_time_round_trips_both_ways(db: Path, live: bool) -> None:
    """``/workspace`` itself is the mirror's top, no entry of its state. Before: a run's ``touch .``
    alone never reached the workspace, a rebuilt mirror (a reopen) showed the time it was made on
    ``.``, and a change of the root's time in the workspace (another mirror's pull) never reached a
    warm mirror, nor a live sandbox's (its push page looked empty)."""
    async with opened(db, shell=shell(live), python=False) as ws:
        touched = await ok(ws, "touch -d @1500000000 . && stat -c %Y .")
        assert touched.stdout == "1500000000\n" and touched.pulled == []
        assert (await ws.fs.stat("/workspace")).mtime == 1_500_000_000_000
        made = await ok(ws, "echo x > f && stat -c %Y .")  # a name made there moves it too
        assert made.pulled == ["/workspace/f"]
        assert (await ws.fs.stat("/workspace")).mtime // 1000 == int(made.stdout) > 1_500_000_000
        ws.fs.commit_batch({}, mtimes={"/workspace": 1_300_000_000_500})  # as another mirror's pull does
        assert (await ok(ws, "stat -c %.3Y .")).stdout == "1300000000.500\n"
        await ok(ws, "touch -d @1200000000 .")
    async with opened(db, shell=shell(live), python=False) as ws:  # a new mirror, from the SQLite file
        assert (await ok(ws, "stat -c %Y .")).stdout == "1200000000\n"


@pytest.mark.parametrize("live", KINDS)
async def test_a_change_of_only_the_roots_nanoseconds_reaches_a_warm_mirror(db: Path, live: bool) -> None:
    """Another mirror's pull moves only the root's time past its millisecond (``sub_ns``): the warm
    mirror (a live sandbox's too) shows the new time. Before, ``RootTime`` compared the store's time
    of the root in ms only: the push page looked empty and the top kept the old nanoseconds."""
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "touch -d @1600000000.000600001 .")
        ws.fs.commit_batch({}, mtimes={"/workspace": 1_600_000_000_000}, sub_ns={"/workspace": 600_002})
        assert (await ok(ws, "stat -c %.9Y .")).stdout == "1600000000.000600002\n"
        ws.fs.commit_batch({}, mtimes={"/workspace": 1_600_000_000_000}, sub_ns={"/workspace": 0})
        assert (await ok(ws, "stat -c %.9Y .")).stdout == "1600000000.000000000\n"


@pytest.mark.parametrize("live", KINDS)
async def test_times_at_the_epoch_round_trip_through_a_reopen(db: Path, live: bool) -> None:
    """Time 0 is a time (``touch -d @0``, archives that clear times): a rebuilt mirror's symlink got
    the push's time instead (0 was taken for "not known"), files and directories kept theirs."""
    listing = "stat -c '%n %Y' f l d old"
    async with opened(db, shell=shell(live), python=False) as ws:
        made = await ok(
            ws,
            "echo x > f && ln -s f l && mkdir d && ln -s gone old && touch -d @0 f d && touch -h -d @0 l"
            f" && touch -h -d @-1 old && {listing}",
        )
        assert made.stdout == "f 0\nl 0\nd 0\nold -1\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, listing)).stdout == made.stdout


# Times finer than a millisecond, as ``tar --format=posix``, ``cp -p`` and ``rsync -a`` restore them.
FINE = "stat -c '%n %.9Y' . d d/f l sub sub/g"


@pytest.mark.parametrize("live", KINDS)
async def test_times_finer_than_a_millisecond_round_trip_through_a_reopen(db: Path, live: bool) -> None:
    """A file's, a directory's, a symlink's own and the root's time keep their nanoseconds in a
    rebuilt mirror (the store keeps them past the ms it shows: ``FileStat.sub_ns``). Before, a reopen
    cut each to its millisecond."""
    made = (
        "mkdir -p d sub && echo x > d/f && echo y > sub/g && ln -s d/f l"
        " && touch -d @1600000000.000400123 d/f && touch -h -d @1600000000.000500321 l"
        " && touch -d @1600000000.999999999 sub/g && touch -d @1500000000.000000001 sub"
        " && touch -d @1600000000.000600001 d . && " + FINE
    )
    expected = (
        ". 1600000000.000600001\nd 1600000000.000600001\nd/f 1600000000.000400123\n"
        "l 1600000000.000500321\nsub 1500000000.000000001\nsub/g 1600000000.999999999\n"
    )
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, made)).stdout == expected
        st = await ws.fs.stat("/workspace/d/f")
        assert (st.mtime, st.sub_ns) == (1_600_000_000_000, 400_123)  # the ms API as it was
    async with opened(db, shell=shell(live), python=False) as ws:  # a new mirror, from the SQLite file
        assert (await ok(ws, FINE)).stdout == expected


async def test_a_pax_archives_times_finer_than_a_millisecond_survive_a_reopen(db: Path) -> None:
    """``tar x`` of a POSIX (pax) archive sets each entry's exact time, directories last."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, when in (("pkg", 1_300_000_000.25), ("pkg/sub", 1_200_000_000.0004)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, when
            archive.addfile(info)
        info = tarfile.TarInfo("pkg/sub/file.txt")
        info.size, info.mtime = 3, 1_100_000_000.0007
        archive.addfile(info, io.BytesIO(b"abc"))
    listing = "stat -c '%n %.4Y' pkg pkg/sub pkg/sub/file.txt"
    expected = "pkg 1300000000.2500\npkg/sub 1200000000.0004\npkg/sub/file.txt 1100000000.0007\n"
    async with opened(db, python=False) as ws:
        await ws.fs.write_file("/workspace/in.tar", buffer.getvalue())
        assert (await ok(ws, f"tar xf in.tar && {listing}")).stdout == expected
    async with opened(db, python=False) as ws:
        assert (await ok(ws, listing)).stdout == expected
