"""Real programs the toolchain tests leave out, each step its own call, checked by later calls, through
``ws.fs`` and after a reopen (fresh backends: a rebuilt mirror), per call and in a live sandbox:
names holding newlines, tabs, spaces and backslashes; the ``sqlite3`` CLI on a ``journal_mode=DELETE``
database the workspace restores between calls, and a hot journal left by a killed writer rolled back
after a reopen; ``diff -ruN``/``patch`` over a tree the workspace changed; ``python3 -m unittest`` with
bytecode written (``__pycache__``) while the workspace edits the module; a hard link edited with the
``edit`` tool; FIFOs and sockets left in the tree.
The toolchains tests (git, make, cmake, venv+pip, npm, sqlite WAL, tar, cp -a) are elsewhere."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from computer.runtime import ShellBackend
from computer.tools import create_tools

from ._support import ROOT, ok, opened

LIVE = pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])


def shell(live: bool) -> ShellBackend:
    return ShellBackend(live=live)


ODD = ["nl\nname", "tab\tname", " lead", "trail ", "back\\slash", "dir\nx/f"]


@LIVE
async def test_names_with_newlines_tabs_spaces_and_backslashes_round_trip(tmp_path: Path, live: bool) -> None:
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=shell(live), python=False) as ws:
        made = await ok(
            ws,
            "printf a > $'nl\\nname'; printf b > $'tab\\tname'; printf c > ' lead'; printf d > 'trail '; "
            "printf e > 'back\\slash'; mkdir $'dir\\nx' && printf f > $'dir\\nx/f'",
        )
        assert made.skipped == [], made.skipped_reasons
        assert sorted(await ws.fs.ls(ROOT)) == sorted(f"{ROOT}/{n}" for n in ODD)
        await ws.fs.write_file(f"{ROOT}/nl\nname", "ws\n")
        await ws.fs.rename(f"{ROOT}/dir\nx", f"{ROOT}/dir\ny")
        seen = await ok(ws, "cat $'nl\\nname' $'dir\\ny/f' 'back\\slash'; ls -b | tr '\\n' '|'")
        assert seen.stdout == "ws\nfe\\ lead|back\\\\slash|dir\\ny|nl\\nname|tab\\tname|trail\\ |"
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await ok(ws, "cat $'nl\\nname' $'dir\\ny/f' $'tab\\tname' ' lead' 'trail '")
        assert seen.stdout == "ws\nfbcd"
        await ok(ws, "rm $'nl\\nname' && mv $'dir\\ny' plain")
        assert sorted(e.name for e in await ws.fs.readdir(ROOT)) == sorted(
            [" lead", "back\\slash", "plain", "tab\tname", "trail "]
        )


def rows(data: bytes, where: Path) -> list[int]:
    """The rows of ``t`` in a copy of the database ``data`` (checked whole first)."""
    where.write_bytes(data)
    with sqlite3.connect(where) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        return [x for (x,) in db.execute("select x from t order by x")]


# Begins a transaction that rewrites every page of the database and dies in it: a hot journal stays.
KILLED = """
import os, sqlite3
db = sqlite3.connect("t.db", isolation_level=None)
db.execute("begin")
db.execute("update t set pad = hex(randomblob(2000))")
db.execute("insert into t values (99, '')")
db.execute("pragma cache_size = 1")  # spill: the database file itself is written mid-transaction
db.execute("update t set pad = hex(randomblob(2000))")
os._exit(0)
"""


@LIVE
async def test_a_delete_journal_database_restored_by_the_workspace_and_a_hot_journal(
    tmp_path: Path, live: bool
) -> None:
    """The workspace puts an older copy of the database back between two calls: the next call reads
    that copy. A writer killed mid-transaction leaves ``t.db-journal`` (hot): after a reopen the
    next ``sqlite3`` rolls it back, the database whole with the rows committed before."""
    db = tmp_path / "ws.sqlite"
    sql = "sqlite3 t.db"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws, f"{sql} 'pragma journal_mode=delete; create table t(x, pad); insert into t values (1, \"\")'"
        )
        saved = await ws.fs.read_file(f"{ROOT}/t.db")
        await ok(ws, f"{sql} 'insert into t values (2, \"\")'")
        assert rows(await ws.fs.read_file(f"{ROOT}/t.db"), tmp_path / "a.db") == [1, 2]
        await ws.fs.write_file(f"{ROOT}/t.db", saved)
        seen = await ok(
            ws, f"{sql} 'pragma integrity_check; select x from t; insert into t values (3, \"\")'"
        )
        assert seen.stdout == "ok\n1\n"
        await ok(ws, f"{sql} 'insert into t select x + 10, hex(randomblob(2000)) from t'")
        await ok(ws, 'python3 -c "$SRC" && test -s t.db-journal && echo hot', env={"SRC": KILLED})
        assert await ws.fs.exists(f"{ROOT}/t.db-journal")
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await ok(ws, f"{sql} 'pragma integrity_check; select x from t'; ls")
        assert seen.stdout == "ok\n1\n3\n11\n13\nt.db\n"
        assert not await ws.fs.exists(f"{ROOT}/t.db-journal")
        assert rows(await ws.fs.read_file(f"{ROOT}/t.db"), tmp_path / "b.db") == [1, 3, 11, 13]


@LIVE
async def test_diff_and_patch_over_a_tree_the_workspace_changed(tmp_path: Path, live: bool) -> None:
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "mkdir -p a/sub b/sub && printf '1\\n2\\n3\\n' > a/sub/x && printf '1\\n2b\\n3\\n' > b/sub/x "
            "&& printf 'new\\n' > b/new && printf 'gone\\n' > a/old",
        )
        made = await ok(ws, "diff -ruN a b > p.diff || [ $? = 1 ]")
        assert made.pulled == [f"{ROOT}/p.diff"]
        await ws.fs.write_file(f"{ROOT}/a/sub/x", "1\n2\n3\n4\n")  # a change the patch's context allows
        patched = await ok(ws, "cd a && patch -p1 < ../p.diff && cat sub/x new && ls")
        assert patched.stdout.endswith("1\n2b\n3\n4\nnew\nnew\nsub\n"), patched.stdout
        assert not await ws.fs.exists(f"{ROOT}/a/old")
        assert await ws.fs.read_text(f"{ROOT}/a/sub/x") == "1\n2b\n3\n4\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        again = await ok(ws, "diff -r a b || true")
        assert again.stdout.splitlines() == ["diff -r a/sub/x b/sub/x", "4d3", "< 4"]


TEST = "import unittest\nfrom pkg.mod import f\n\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(f(), {})\n"


@LIVE
async def test_unittest_with_bytecode_written_while_the_workspace_edits_the_module(
    tmp_path: Path, live: bool
) -> None:
    """``python3 -m unittest`` with bytecode on (the sandbox sets ``PYTHONDONTWRITEBYTECODE``; a user
    may unset it): each call sees the module as the workspace last wrote it, the ``__pycache__`` it
    made is pulled, and after a reopen a stale one is never used."""
    db = tmp_path / "ws.sqlite"
    unittest = "env -u PYTHONDONTWRITEBYTECODE python3 -m unittest 2>&1 | tail -1"
    async with opened(db, shell=shell(live), python=False) as ws:
        for name, text in [("pkg/__init__.py", ""), ("pkg/mod.py", "def f():\n    return 1\n")]:
            await ws.fs.mkdir(f"{ROOT}/pkg", recursive=True)
            await ws.fs.write_file(f"{ROOT}/{name}", text)
        await ws.fs.mkdir(f"{ROOT}/tests")
        await ws.fs.write_file(f"{ROOT}/tests/__init__.py", "")
        await ws.fs.write_file(f"{ROOT}/tests/test_mod.py", TEST.format(1))
        assert (await ok(ws, unittest)).stdout == "OK\n"
        assert [p for p in await ws.fs.ls(f"{ROOT}/pkg") if p.endswith(".pyc")]
        await ws.fs.write_file(f"{ROOT}/pkg/mod.py", "def f():\n    return 22\n")  # another size
        assert (await ok(ws, unittest)).stdout == "FAILED (failures=1)\n"
        await ws.fs.write_file(f"{ROOT}/tests/test_mod.py", TEST.format(22))
        assert (await ok(ws, unittest)).stdout == "OK\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, unittest)).stdout == "OK\n"
        await ws.fs.write_file(f"{ROOT}/pkg/mod.py", "def f():\n    return 333\n")
        assert (await ok(ws, unittest)).stdout == "FAILED (failures=1)\n"


@LIVE
async def test_a_hard_link_edited_with_the_edit_tool_and_fifos_and_sockets_left_in_the_tree(
    tmp_path: Path, live: bool
) -> None:
    """``ln f g`` in a call, then the ``edit`` tool changes ``f``: ``g`` shows it in later calls (one
    file, two names) and after a reopen. A FIFO and a socket a call left stay in that sandbox only,
    skipped with a reason, and are gone after a reopen (a rebuilt mirror); nothing else is lost."""
    db = tmp_path / "ws.sqlite"
    sock = "import socket; socket.socket(socket.AF_UNIX).bind('s.sock')"
    async with opened(db, shell=shell(live), python=False) as ws:
        made = await ok(ws, f"printf 'one\\ntwo\\n' > f && ln f g && mkfifo p.fifo && python3 -c \"{sock}\"")
        assert sorted(made.skipped) == [f"{ROOT}/p.fifo", f"{ROOT}/s.sock"], made.skipped_reasons
        assert all("FIFO" in why for why in made.skipped_reasons.values())
        edited = await create_tools(ws)["edit"].run({"path": f"{ROOT}/f", "old_text": "two", "new_text": "2"})
        assert edited["editsApplied"] == 1, edited
        assert (await ws.fs.stat(f"{ROOT}/g")).nlink == 2
        seen = await ok(ws, "cat g; stat -c %h f; [ -p p.fifo ] && [ -S s.sock ] && echo kept")
        assert seen.stdout == "one\n2\n2\nkept\n"  # (a mirror is kept between calls: per call too)
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await ok(ws, "cat g; stat -c %h f; ls")
        assert seen.stdout == "one\n2\n2\nf\ng\n"
