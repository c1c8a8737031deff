"""Real programs at the edges of what the sync keeps, each step its own call, checked by later calls,
through ``ws.fs`` and after a reopen (fresh backends: a rebuilt mirror), per call and in a live
sandbox: ``make``'s incremental decisions after a workspace write and a reopen (to the nanosecond);
``rsync -a --link-dest`` snapshots (hard links) through reopens; ``umask``, modes ``000`` on files and
directories, the sticky bit, setuid taken off (SPEC 10), ``find -newer``; names that are not UTF-8
(left out with a reason), 255-byte names; symlink loops; ``compileall`` + ``zipapp`` with a source the
workspace edits; a workspace write racing the program's write of the same file (the conflict rules of
computer/runtime/README.md: per call, the workspace's version is kept and the run says so; live, the
workspace's write reaches the sandbox first and the program's later write wins, both sides agreeing)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ._support import KINDS, ROOT, need, ok, opened, run, settle, shell, started

MAKEFILE = """all: prog
%.o: %.c
\t@echo CC $@; cc -c $< -o $@
prog: a.o b.o c.o
\t@echo LD $@; cc $^ -o $@
"""
SOURCES = {
    "a.c": "int b(void); int c(void); int main(void) { return b() + c() - 2; }\n",
    "b.c": "int b(void) { return 1; }\n",
    "c.c": "int c(void) { return 1; }\n",
}


@pytest.mark.parametrize("live", KINDS)
async def test_make_rebuilds_exactly_what_a_workspace_write_and_a_touch_made_stale(
    db: Path, live: bool
) -> None:
    need("make", "cc")
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/Makefile", MAKEFILE)
        for name, text in SOURCES.items():
            await ws.fs.write_file(f"{ROOT}/{name}", text)
        assert (await ok(ws, "make")).stdout == "CC a.o\nCC b.o\nCC c.o\nLD prog\n"
        await asyncio.sleep(0.01)  # the workspace's time is in ms: past the objects' own
        await ws.fs.write_file(f"{ROOT}/b.c", "int b(void) { return 1; } /* ws */\n")
        assert (await ok(ws, "make")).stdout == "CC b.o\nLD prog\n"
        assert (await ok(ws, "make -q; echo $?")).stdout == "0\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "make -q; echo $?")).stdout == "0\n"  # nothing stale after the rebuild
        await ws.fs.write_file(f"{ROOT}/c.c", "int c(void) { return 1; } /* ws2 */\n")
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "make && ./prog")).stdout == "CC c.o\nLD prog\n"
        assert (await ok(ws, "touch a.c && make")).stdout == "CC a.o\nLD prog\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "make")).stdout == "make: Nothing to be done for 'all'.\n"


SNAPSHOT = "rsync -a --link-dest=../{base} src/ {to}/ && stat -c '%h %n' {base}/s/f1 {to}/s/f1 {to}/s/f3"


@pytest.mark.parametrize("live", KINDS)
async def test_rsync_link_dest_snapshots_keep_their_hard_links_through_reopens(db: Path, live: bool) -> None:
    need("rsync")
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws, "mkdir -p src/s && for i in 1 2 3 4; do echo $i > src/s/f$i; done && rsync -a src/ snap1/"
        )
        await ws.fs.write_file(f"{ROOT}/src/s/f3", "changed\n")
        seen = await ok(ws, SNAPSHOT.format(base="snap1", to="snap2"))
        assert seen.stdout == "2 snap1/s/f1\n2 snap2/s/f1\n1 snap2/s/f3\n"
        assert (await ws.fs.stat(f"{ROOT}/snap2/s/f1")).nlink == 2
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "stat -c '%h' snap1/s/f1 snap2/s/f1 snap1/s/f3")).stdout == "2\n2\n1\n"
        seen = await ok(ws, SNAPSHOT.format(base="snap2", to="snap3"))
        assert seen.stdout == "3 snap2/s/f1\n3 snap3/s/f1\n2 snap3/s/f3\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await ok(ws, "stat -c '%h' snap3/s/f1 && cat snap3/s/f3 snap1/s/f3 && rm -rf snap1 snap2")
        assert seen.stdout == "3\nchanged\n3\n"
        assert (await ws.fs.stat(f"{ROOT}/snap3/s/f1")).nlink == 1
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "stat -c '%h' snap3/s/f1 src/s/f1")).stdout == "1\n1\n"


MODES = (
    "umask 077 && echo a > priv && echo z > zero && chmod 000 zero && mkdir shut && echo x > shut/in && "
    "chmod 0 shut && mkdir tmp && chmod 1777 tmp && echo s > suid && chmod 4755 suid && "
    "touch -d @1000000000.5 old && stat -c '%a %n' priv zero shut tmp"
)


@pytest.mark.parametrize("live", KINDS)
async def test_umask_mode_000_files_and_directories_sticky_and_setuid_through_a_reopen(
    db: Path, live: bool
) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, MODES)).stdout == "600 priv\n0 zero\n0 shut\n1777 tmp\n"
        modes = {
            n: (await ws.fs.stat(f"{ROOT}/{n}")).mode & 0o7777
            for n in ("priv", "zero", "shut", "tmp", "suid")
        }
        assert modes == {"priv": 0o600, "zero": 0, "shut": 0, "tmp": 0o1777, "suid": 0o755}  # never setuid
        assert await ws.fs.read_file(f"{ROOT}/shut/in") == b"x\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await run(ws, "stat -c '%a %n' priv zero shut tmp suid; find . -newer old | sort")
        assert seen.stdout == (
            "600 priv\n0 zero\n0 shut\n1777 tmp\n755 suid\n.\n./priv\n./shut\n./suid\n./tmp\n./zero\n"
        ), seen
        assert (
            await ok(ws, "chmod 700 shut && cat shut/in && chmod 600 zero && cat zero")
        ).stdout == "x\nz\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "stat -c '%a %n' shut zero")).stdout == "700 shut\n600 zero\n"


LONG = "a" * 255
WIDE = "é" * 127 + "b"  # 255 bytes in UTF-8


@pytest.mark.parametrize("live", KINDS)
async def test_names_not_utf8_are_left_out_with_a_reason_and_255_byte_names_round_trip(
    db: Path, live: bool
) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        result = await run(
            ws, f"printf x > $'bad\\xff' && mkdir $'d\\xc3\\x28' && printf y > {LONG} && printf w > {WIDE}"
        )
        assert result.status == "completed", result
        assert sorted(result.skipped) == [f"{ROOT}/bad\\xff", f"{ROOT}/d\\xc3("], result.skipped
        assert all("not UTF-8" in result.skipped_reasons[p] for p in result.skipped), result.skipped_reasons
        assert sorted(await ws.fs.ls(ROOT)) == sorted([f"{ROOT}/{LONG}", f"{ROOT}/{WIDE}"])
        await ws.fs.write_file(f"{ROOT}/{WIDE}", "ws")
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, f"cat {LONG} {WIDE} && ls | wc -l")).stdout == "yws2\n"


@pytest.mark.parametrize("live", KINDS)
async def test_symlink_loops_round_trip_and_stay_loops(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws, "ln -s a b && ln -s b a && ln -s self self && mkdir d && ln -s .. d/up && ln -s ../d d/me"
        )
        links = {p: await ws.fs.readlink(f"{ROOT}/{p}") for p in ("a", "b", "self", "d/up", "d/me")}
        assert links == {"a": "b", "b": "a", "self": "self", "d/up": "..", "d/me": "../d"}
        assert not await ws.fs.exists(f"{ROOT}/a")
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await run(ws, "readlink a b self d/up d/me; cat a; ls d/me/up/d/me | tr '\\n' ' '")
        assert seen.stdout == "b\na\nself\n..\n../d\nme up ", seen
        assert "Too many levels of symbolic links" in seen.stderr


ZIPAPP = (
    "python3 -m compileall -q app && python3 -m zipapp app -o app.pyz -p '/usr/bin/env python3' && ./app.pyz"
)


@pytest.mark.parametrize("live", KINDS)
async def test_compileall_and_zipapp_with_a_source_the_workspace_edits(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/app/pkg", recursive=True)
        await ws.fs.write_file(f"{ROOT}/app/pkg/__init__.py", "def f():\n    return 41\n")
        await ws.fs.write_file(f"{ROOT}/app/__main__.py", "import pkg\nprint(pkg.f() + 1)\n")
        assert (await ok(ws, ZIPAPP)).stdout == "42\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        check = "python3 -v -c 'import sys; sys.path.insert(0, \"app\"); import pkg' 2>&1 | grep -c 'pkg.*matches'"
        assert (await ok(ws, f"./app.pyz && {check}")).stdout == "42\n1\n"  # the .pyc still matches
        await ws.fs.write_file(f"{ROOT}/app/pkg/__init__.py", "def f():\n    return 1\n")
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "python3 app && ./app.pyz")).stdout == "2\n42\n"
        assert (await ok(ws, ZIPAPP)).stdout == "2\n"


RACE = "echo ready; sleep 3; echo prog > f; echo prog > g; echo new > h"


@pytest.mark.parametrize("live", KINDS)
async def test_a_workspace_write_racing_the_programs_write_of_the_same_file(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "echo base > f; echo base > g")
        handle = await started(ws, RACE)  # the program runs: its sandbox has f and g as they were
        await ws.fs.write_file(f"{ROOT}/f", "ws\n")
        await ws.fs.rm(f"{ROOT}/g")
        result = await settle(handle)
        assert result.status == "completed", result
        if live:  # the workspace's changes reached the sandbox first: the program's later writes win
            assert result.skipped == []
            expected = "prog\nprog\nnew\n"
        else:  # the run's sandbox never saw them: the workspace's versions are kept, and said so
            assert sorted(result.skipped) == [f"{ROOT}/f", f"{ROOT}/g"]
            assert all("workspace" in reason for reason in result.skipped_reasons.values())
            expected = "ws\nnew\n"
        assert (await ok(ws, "cat f g h 2>/dev/null; true")).stdout == expected
        assert await ws.fs.read_file(f"{ROOT}/f") == expected.split("\n")[0].encode() + b"\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "cat f g h 2>/dev/null; true")).stdout == expected
