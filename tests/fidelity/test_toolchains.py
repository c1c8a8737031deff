"""Real toolchains driven as an agent drives them: every step its own exec call (so all state crosses the
sync bracket), checked by later calls and again after a reopen with fresh backends (a rebuilt mirror)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import THREADS, ok, opened

MiB = 1024 * 1024


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed on this machine")


@pytest.mark.slow
async def test_git_repository_with_a_multi_mb_binary_stays_intact_across_calls_and_a_reopen(db: Path) -> None:
    need("git")
    async with opened(db) as ws:
        await ok(
            ws, "git init -q -b main repo && cd repo && git config user.email a@b.c && git config user.name T"
        )
        await ok(
            ws,
            "cd repo && head -c 3000000 /dev/urandom > blob.bin && echo hello > a.txt"
            " && ln -s /usr/share/doc docs && git add -A && git commit -qm one",
        )
        await ok(ws, "cd repo && git checkout -qb feature && echo feat >> a.txt && git commit -qam two")
        await ok(ws, "cd repo && git checkout -q main && echo wip >> a.txt")
        assert (await ok(ws, "cd repo && git stash -q && git stash list | wc -l")).stdout == "1\n"
        await ok(ws, "cd repo && git gc -q")
        fsck = await ok(ws, "cd repo && git fsck --full --strict && git status --porcelain")
        assert fsck.stdout == ""
        blob = (await ok(ws, "sha256sum repo/blob.bin")).stdout
    async with opened(db) as ws:
        check = await ok(
            ws,
            "cd repo && git fsck --full --strict && git status --porcelain && git stash list | wc -l"
            " && git rev-list --count feature && git rev-list --count main && readlink docs",
        )
        assert check.stdout == "1\n2\n1\n/usr/share/doc\n", check.stderr
        assert check.skipped == []
        assert (await ok(ws, "sha256sum repo/blob.bin")).stdout == blob
        popped = await ok(ws, "cd repo && git stash pop -q && git diff --stat | tail -1 && cat a.txt")
        assert popped.stdout.endswith("hello\nwip\n")
        await ok(ws, "cd repo && git commit -qam three && git fsck --full --strict")
    async with opened(db) as ws:
        assert (
            await ok(ws, "cd repo && git status --porcelain && git rev-list --count main")
        ).stdout == "2\n"


# Each repository checked: whole (fsck), its history, and how many of the two repositories' object
# files have two names (the clone's hard links).
_CLONES = (
    "for r in src copy; do git -C $r fsck --strict 2>&1 && git -C $r rev-list --count HEAD; done"
    " && find src/.git/objects copy/.git/objects -path '*/objects/??/*' -type f -links 2 | wc -l"
)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_git_clone_local_keeps_both_repositories_whole(db: Path, live: bool) -> None:
    """``git clone --local`` hard-links the source's objects into the clone; an object over 1 MiB is
    pulled as chunks. Before: the link was applied before the file it names was written and refused,
    so the source repository lost the object ("missing blob", per call) or held a copy of it (live)."""
    need("git")
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(
            ws,
            "git init -q -b main src && cd src && git config user.email a@b.c && git config user.name T"
            " && head -c 2500000 /dev/urandom > blob.bin && echo hi > a.txt && git add -A && git commit -qm one",
        )
        cloned = await ok(ws, "git clone -q --local src copy")
        assert cloned.skipped == [], cloned.skipped_reasons
        assert (await ok(ws, _CLONES)).stdout == "1\n1\n8\n"  # 4 objects (blob, blob, tree, commit) x 2
        await ok(
            ws, "cd copy && echo more >> a.txt && git -c user.email=a@b.c -c user.name=T commit -qam two"
        )
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, _CLONES)).stdout == "1\n2\n8\n"


@pytest.mark.slow
async def test_a_venv_made_in_one_call_is_used_in_later_calls_and_after_a_reopen(db: Path) -> None:
    async with opened(db) as ws:
        made = await ok(ws, "python3 -m venv .venv || python3 -m venv --without-pip .venv", timeout=180)
        assert made.skipped == []
        used = await ok(ws, ".venv/bin/python -c 'import sys; print(sys.prefix)'")
        assert used.stdout == "/workspace/.venv\n"
        await ws.fs.write_file("/workspace/app.py", "import sys\nprint('app', sys.prefix)\n")
        assert (await ok(ws, ".venv/bin/python app.py")).stdout == "app /workspace/.venv\n"
    async with opened(db) as ws:
        again = await ok(ws, ". .venv/bin/activate && python -c 'import sys; print(sys.prefix)'")
        assert again.stdout == "/workspace/.venv\n"


SQLITE_GROW = """
import sqlite3
db = sqlite3.connect("big.db")
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
with db:
    db.executemany("INSERT INTO t (body) VALUES (randomblob(1000))", ([] for _ in range(100_000)))
db.close()
"""

SQLITE_CHANGE = """
import sqlite3
db = sqlite3.connect("big.db")
with db:
    db.execute("UPDATE t SET body = x'00ff' WHERE id = 54321")
    db.execute("DELETE FROM t WHERE id > 99990")
db.close()
"""

SQLITE_CHECK = """
import os, sqlite3
db = sqlite3.connect("file:big.db?mode=ro", uri=True)
print(db.execute("PRAGMA integrity_check").fetchone()[0])
print(db.execute("SELECT count(*) FROM t").fetchone()[0])
print(db.execute("SELECT hex(body) FROM t WHERE id = 54321").fetchone()[0])
print(os.path.getsize("big.db") > 100_000_000)
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_100_mb_sqlite_database_changed_in_place_survives_calls_and_a_reopen(db: Path) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/grow.py", SQLITE_GROW)
        await ws.fs.write_file("/workspace/change.py", SQLITE_CHANGE)
        await ws.fs.write_file("/workspace/check.py", SQLITE_CHECK)
        await ok(ws, "python3 grow.py", timeout=300)
        assert (await ws.fs.stat("/workspace/big.db")).size > 100_000_000
        await ok(ws, "python3 change.py", timeout=300)
        assert (await ok(ws, "python3 check.py", timeout=300)).stdout == "ok\n99990\n00FF\nTrue\n"
    async with opened(db) as ws:
        checked = await ok(ws, "python3 check.py", timeout=300)
        assert checked.stdout == "ok\n99990\n00FF\nTrue\n"
        assert checked.skipped == []


MAKEFILE = "out.txt: src.txt\n\tcp src.txt out.txt\n"


async def test_make_decides_correctly_after_each_reopen(db: Path) -> None:
    need("make")
    question = "make -q out.txt; echo $?"
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/Makefile", MAKEFILE)
        await ws.fs.write_file("/workspace/src.txt", "v1\n")
        assert (await ok(ws, "make")).stdout == "cp src.txt out.txt\n"
        assert (await ok(ws, question)).stdout == "0\n"
    async with opened(db) as ws:  # untouched: up to date
        assert (await ok(ws, question)).stdout == "0\n"
        await ok(ws, "touch src.txt")
    async with opened(db) as ws:  # the source was touched: rebuild
        assert (await ok(ws, question)).stdout == "1\n"
        assert (await ok(ws, "make")).stdout == "cp src.txt out.txt\n"
    async with opened(db) as ws:
        assert (await ok(ws, question)).stdout == "0\n"
        # a checkout in which the output is older than its source (as tar, cp -p or git leave it)
        await ok(ws, "touch -d @1500000000 out.txt && echo v2 > src.txt && touch -d @1600000000 src.txt")
        assert (await ws.fs.stat("/workspace/src.txt")).mtime > (await ws.fs.stat("/workspace/out.txt")).mtime
    async with opened(db) as ws:
        assert (await ok(ws, question)).stdout == "1\n"
        await ok(ws, "make -s")
        assert await ws.fs.read_text("/workspace/out.txt") == "v2\n"
    async with opened(db) as ws:
        assert (await ok(ws, question)).stdout == "0\n"


TREE = """
import hashlib, os
h = hashlib.sha256()
for i in range(100_000):
    d = f"src/{i // 1000:03d}"
    if i % 1000 == 0:
        os.makedirs(d)
    body = f"file {i}\\n".encode()
    with open(f"{d}/{i}.txt", "wb") as f:
        f.write(body)
"""

TREE_SUM = "find src -type f | wc -l && find src -type f -print0 | sort -z | xargs -0 cat | sha256sum"


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_tar_of_100000_files_out_and_back(db: Path) -> None:
    need("tar")
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/tree.py", TREE)
        await ok(ws, "python3 tree.py", timeout=600)
        before = (await ok(ws, TREE_SUM, timeout=600)).stdout
        assert before.startswith("100000\n")
        await ok(ws, "tar czf tree.tgz src", timeout=600)
        await ok(ws, "rm -rf src", timeout=600)
        assert await ws.fs.ls("/workspace/src") == []
        await ok(ws, "tar xzf tree.tgz", timeout=600)
        assert (await ok(ws, TREE_SUM, timeout=600)).stdout == before
        assert len(await ws.fs.ls("/workspace/src")) == 100_000
    async with opened(db) as ws:
        after = await ok(ws, TREE_SUM, timeout=600)
        assert after.stdout == before
        assert after.skipped == []


async def test_64_threads_in_one_program_in_both_backends(db: Path) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/threads.py", THREADS)
        assert (await ok(ws, "python3 threads.py")).stdout == "64\n"
        assert (await ok(ws, THREADS, backend="python")).stdout == "64\n"


GENERATE = """
import os, sys
tests = int(sys.argv[1])
files = {
    "pkg/pyproject.toml": '[project]\\nname = "widget"\\nversion = "1.0"\\n',
    "pkg/widget/__init__.py": "from .core import double\\n",
    "pkg/widget/core.py": "def double(x):\\n    return 2 * x\\n",
    "pkg/tests/__init__.py": "",
    "pkg/tests/test_small.py": "import unittest\\nfrom widget import double\\n\\n\\n"
    "class Small(unittest.TestCase):\\n    def test_one(self):\\n        self.assertEqual(double(1), 2)\\n",
}
cases = "".join(
    f"    def test_{i:05d}(self):\\n        self.assertEqual(core.double({i}), {2 * i})  # {'padding ' * 12}\\n"
    for i in range(tests)
)
files["pkg/tests/test_big.py"] = "import unittest\\nfrom widget import core\\n\\n\\nclass Big(unittest.TestCase):\\n" + cases
for path, text in files.items():
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
"""


@pytest.mark.slow
async def test_unittest_of_a_package_with_a_test_module_over_1_mib_runs_every_test(db: Path) -> None:
    suite = "cd pkg && python3 -m unittest discover -s tests -t . 2>&1 | tail -3"
    async with opened(db) as ws:
        # a third-party-like package, generated in the sandbox: 7,000 generated cases and one more
        await ws.fs.write_file("/workspace/generate.py", GENERATE)
        await ok(ws, "python3 generate.py 7000 && rm generate.py")
        assert (await ws.fs.stat("/workspace/pkg/tests/test_big.py")).size > MiB
        first = await ok(ws, suite, timeout=300)
        assert "Ran 7001 tests" in first.stdout and first.stdout.rstrip().endswith("OK"), first.stdout
    async with opened(db) as ws:
        again = await ok(ws, suite, timeout=300)
        assert "Ran 7001 tests" in again.stdout and again.stdout.rstrip().endswith("OK"), again.stdout
        assert again.skipped == []
