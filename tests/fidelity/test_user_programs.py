"""Programs a demanding user runs call by call, per call and in a live sandbox, each step its own call,
checked by later calls, through ``ws.fs`` and after a reopen (fresh backends: a rebuilt mirror): ``pip``
installs of a local package into venvs (editable and not, entry-point scripts, ``.pth`` files,
``compileall``), ``make -j2`` with generated headers and incremental ``cc`` builds, hard-link trees,
incremental ``tar``, ``flock`` across concurrent calls, FIFOs, ``find -newer``/``touch -r``, atomic
symlink swaps read meanwhile, CRLF, empty and chunk-sized files, thousands of small files, and a server
left running that serves what the workspace writes."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import KINDS, ROOT, need, ok, opened, settle, shell, started

# A PEP 517/660 build backend in the package's own tree (``backend-path``): pip builds a wheel and an
# editable wheel offline without setuptools' ``bdist_wheel`` (the ``wheel`` package may be missing).
BACKEND = """
import base64, hashlib, os, zipfile
NAME = open("name.txt").read().strip()
DIST = NAME + "-0.1"
META = {
    DIST + ".dist-info/METADATA": b"Metadata-Version: 2.1\\nName: " + NAME.encode() + b"\\nVersion: 0.1\\n",
    DIST + ".dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    DIST + ".dist-info/entry_points.txt": ("[console_scripts]\\n%s = %s:main\\n" % (NAME, NAME)).encode(),
}
def _wheel(directory, files):
    name = DIST + "-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(directory, name), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
        record.append(DIST + ".dist-info/RECORD,,")
        z.writestr(DIST + ".dist-info/RECORD", "\\n".join(record) + "\\n")
    return name
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = dict(META)
    for root, _, names in os.walk("src"):
        for n in sorted(names):
            if n.endswith(".py"):
                path = os.path.join(root, n)
                files[os.path.relpath(path, "src")] = open(path, "rb").read()
    return _wheel(wheel_directory, files)
def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    files = dict(META)
    files["__editable__.%s.pth" % NAME] = (os.path.abspath("src") + "\\n").encode()
    return _wheel(wheel_directory, files)
"""
PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'


def package(name: str) -> str:
    """A shell command making the local package ``name`` (module ``src/<name>/__init__.py``)."""
    main = f"def main():\\n    print('{name}', __file__)\\n"
    return (
        f"mkdir -p {name}/src/{name} && cd {name} && printf '%s' \"$BACKEND\" > backend.py"
        f" && printf '%s' \"$PYPROJECT\" > pyproject.toml && echo {name} > name.txt"
        f' && printf "{main}" > src/{name}/__init__.py && cd ..'
    )


PIP = "v/bin/python -m pip install -q --no-index --no-build-isolation --disable-pip-version-check"
SITE = "v/lib/python3*/site-packages"


@pytest.mark.slow
@pytest.mark.parametrize("live", KINDS)
async def test_pip_installs_of_a_local_package_editable_and_not_work_in_later_calls_and_after_a_reopen(
    db: Path, live: bool
) -> None:
    env = {"BACKEND": BACKEND, "PYPROJECT": PYPROJECT}
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, f"{package('plain')} && {package('edit')}", env=env)
        await ok(ws, "python3 -m venv --system-site-packages v", timeout=180)
        await ok(ws, f"{PIP} ./plain", timeout=180)
        await ok(ws, f"{PIP} -e ./edit", timeout=180)
        seen = await ok(ws, "v/bin/plain && v/bin/edit && head -1 v/bin/plain")
        lines = seen.stdout.splitlines()
        assert lines[0].startswith(f"plain {ROOT}/v/lib/python3") and lines[0].endswith("/plain/__init__.py")
        assert lines[1:] == [f"edit {ROOT}/edit/src/edit/__init__.py", f"#!{ROOT}/v/bin/python"]
        # The editable one follows the workspace's edits of its source.
        await ws.fs.write_file(f"{ROOT}/edit/src/edit/__init__.py", "def main():\n    print('edited')\n")
        assert (await ok(ws, "v/bin/edit")).stdout == "edited\n"
        # A .pth file the workspace writes puts a directory on the path of the next call's python.
        await ws.fs.mkdir(f"{ROOT}/extra")
        await ws.fs.write_file(f"{ROOT}/extra/extramod.py", "X = 7\n")
        site = (await ok(ws, f"echo {SITE}")).stdout.strip()
        await ws.fs.write_file(f"{ROOT}/{site}/extra.pth", f"{ROOT}/extra\n")
        assert (await ok(ws, "v/bin/python -c 'import extramod; print(extramod.X)'")).stdout == "7\n"
        made = await ok(
            ws, f"v/bin/python -m compileall -q {SITE}/plain edit/src && ls {SITE}/plain/__pycache__"
        )
        assert ".pyc" in made.stdout
    async with opened(db, shell=shell(live), python=False) as ws:
        seen = await ok(
            ws,
            "v/bin/plain && v/bin/edit && v/bin/python -c 'import extramod, plain, edit; print(extramod.X)'"
            " && v/bin/python -m pip list --disable-pip-version-check 2>/dev/null | grep -E '^(plain|edit) '",
        )
        lines = seen.stdout.splitlines()
        assert lines[1:3] == ["edited", "7"], seen.stdout
        assert [line.split()[0] for line in lines[3:]] == ["edit", "plain"], seen.stdout
        await ok(ws, "v/bin/python -m pip uninstall -q -y plain --disable-pip-version-check")
        assert not await ws.fs.exists(f"{ROOT}/v/bin/plain")
    async with opened(db, shell=shell(live), python=False) as ws:
        gone = await ok(
            ws, "v/bin/python -P -c 'import plain' 2>&1 | tail -1; ls v/bin | grep -c '^plain$' || true"
        )
        assert gone.stdout == "ModuleNotFoundError: No module named 'plain'\n0\n"


@pytest.mark.slow
@pytest.mark.parametrize("live", KINDS)
async def test_a_venv_without_pip_gets_pip_from_ensurepip_and_installs_in_later_calls(
    db: Path, live: bool
) -> None:
    env = {"BACKEND": BACKEND, "PYPROJECT": PYPROJECT}
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "python3 -m venv --without-pip v && test ! -e v/bin/pip && echo none")
        has = await ok(ws, "v/bin/python -c 'import ensurepip' 2>/dev/null && echo yes || echo no")
        if has.stdout != "yes\n":
            pytest.skip("no ensurepip in this python")
        await ok(ws, "v/bin/python -m ensurepip > /dev/null", timeout=300)
        await ok(ws, package("tool"), env=env)
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, f"{PIP} ./tool", timeout=180)
        assert (await ok(ws, "v/bin/tool | cut -d' ' -f1")).stdout == "tool\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (
            await ok(ws, "v/bin/tool | cut -d' ' -f1; v/bin/pip3 --version | cut -c1-4")
        ).stdout == "tool\npip \n"


MAKEFILE = """\
CFLAGS = -O0
all: app
gen.h: gen.sh n.txt
\tsh gen.sh > gen.h
main.o: main.c gen.h util.h
util.o: util.c util.h
app: main.o util.o
\t$(CC) -o $@ main.o util.o
clean:
\trm -f app *.o gen.h
"""
SOURCES = {
    "Makefile": MAKEFILE,
    "gen.sh": 'echo "#define N $(cat n.txt)"\n',
    "n.txt": "1\n",
    "util.h": "int twice(int);\n",
    "util.c": '#include "util.h"\nint twice(int x) { return 2 * x; }\n',
    "main.c": '#include <stdio.h>\n#include "gen.h"\n#include "util.h"\nint main(void) { printf("%d\\n", twice(N)); return 0; }\n',
}
# What make runs (``-n``: nothing run) and what the program prints.
PLAN = "cd b && make -n -j2 all | grep -oE '(gen.sh|-c -o [a-z]+.o|-o app)' | sort | tr '\\n' ' '; ./app"


@pytest.mark.parametrize("live", KINDS)
async def test_make_j2_with_a_generated_header_rebuilds_exactly_what_is_stale_after_reopens(
    db: Path, live: bool
) -> None:
    need("make", "cc")
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/b")
        for name, text in SOURCES.items():
            await ws.fs.write_file(f"{ROOT}/b/{name}", text)
        await ok(ws, "cd b && make -s -j2")
        assert (await ok(ws, PLAN)).stdout == "2\n"
        await asyncio.sleep(0.05)
        await ws.fs.write_file(f"{ROOT}/b/util.c", '#include "util.h"\nint twice(int x) { return 3 * x; }\n')
        assert (await ok(ws, PLAN)).stdout == "-c -o util.o -o app 2\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, PLAN)).stdout == "-c -o util.o -o app 2\n"
        await ok(ws, "cd b && make -s -j2")
        assert (await ok(ws, PLAN)).stdout == "3\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, PLAN)).stdout == "3\n"
        await ok(ws, "sleep 0.05; echo 5 > b/n.txt")
        assert (await ok(ws, PLAN)).stdout == "-c -o main.o -o app gen.sh 3\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, PLAN)).stdout == "-c -o main.o -o app gen.sh 3\n"
        await ok(ws, "cd b && make -s -j2")
        await ok(ws, "touch b/util.h")
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, PLAN)).stdout == "-c -o main.o -c -o util.o -o app 15\n"
        await ok(ws, "cd b && make -s -j2")
        assert (await ok(ws, PLAN)).stdout == "15\n"


# A listing of the tree's files: inode group (which names share a file), links, mode, size, name.
LINKS = "find t -type f -printf '%i %n %m %s %p\\n' | sort -k5 | awk '{print ($1 in g ? g[$1] : g[$1] = ++n), $2, $3, $4, $5}'"


@pytest.mark.parametrize("live", KINDS)
async def test_cp_al_link_trees_and_incremental_tar_across_calls_and_reopens(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "mkdir -p src/d && echo a > src/a && echo b > src/d/b && printf '#!/bin/sh\\necho run\\n' > src/x"
            " && chmod 755 src/x && cp -al src t && mkdir arch && tar -C src -cf arch/l0.tar -g arch/snap .",
        )
        listing = (await ok(ws, LINKS)).stdout
        assert listing == "1 2 644 2 t/a\n2 2 644 2 t/d/b\n3 2 755 19 t/x\n", listing
        await ok(ws, "sleep 0.05; echo c > src/d/c && echo a2 >> src/a && cp arch/snap arch/snap1")
        await ok(
            ws, "tar -C src -cf arch/l1.tar -g arch/snap1 . && tar -tf arch/l1.tar | sort | tr '\\n' ' '"
        )
        assert (await ok(ws, "cat t/a; t/x")).stdout == "a\na2\nrun\n"  # one file, two names
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, LINKS)).stdout == "1 2 644 5 t/a\n2 2 644 2 t/d/b\n3 2 755 19 t/x\n"
        listed = await ok(ws, "tar -tf arch/l1.tar | sort | tr '\\n' ' '")
        assert listed.stdout == "./ ./a ./d/ ./d/c ", listed.stdout
        # Restore level 0 then level 1 elsewhere: the tree as it is now.
        await ok(
            ws, "mkdir r && tar -C r -xf arch/l0.tar -g /dev/null && tar -C r -xf arch/l1.tar -g /dev/null"
        )
        assert (await ok(ws, "diff -r src r && echo same")).stdout == "same\n"
        await ok(ws, "rm src/d/b && cp arch/snap1 arch/snap2 && tar -C src -cf arch/l2.tar -g arch/snap2 .")
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "tar -C r -xf arch/l2.tar -g /dev/null")
        assert (
            await ok(ws, "diff -r src r && echo same; cat t/d/b; stat -c %h t/d/b")
        ).stdout == "same\nb\n1\n"


@pytest.mark.parametrize("live", KINDS)
async def test_find_newer_touch_r_chmod_crlf_empty_and_chunk_sized_files_across_reopens(
    db: Path, live: bool
) -> None:
    chunk = 512 * 1024
    sizes = [0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk]
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "echo old > a && touch -d @1500000000.123456789 a && echo x > stamp")
        await ok(
            ws, "sleep 0.05 && echo new > b && touch -r a c && : > empty && printf 'l1\\r\\nl2\\r\\n' > crlf"
        )
        await ok(ws, "printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh")
        await ok(ws, " && ".join(f"head -c {n} /dev/urandom > s{n}" for n in sizes))
        await ws.fs.write_file(f"{ROOT}/wcrlf", b"w1\r\nw2\r\n")
        await ws.fs.write_file(f"{ROOT}/wempty", b"")
    newer = ["./b", "./crlf", "./empty", "./run.sh"] + [f"./s{n}" for n in sorted(sizes, key=str)]
    for expected in [[*newer, "./wcrlf", "./wempty"], []]:  # then ``stamp`` is touched: nothing newer
        async with opened(db, shell=shell(live), python=False) as ws:
            seen = await ok(
                ws,
                "./run.sh && echo $(find . -maxdepth 1 -newer stamp -type f | sort) && "
                "stat -c '%y %n' a c && cat crlf wcrlf | od -c && stat -c '%s %n' empty wempty s[0-9]*",
            )
            lines = seen.stdout.splitlines()
            assert lines[0] == "ran"
            assert lines[1].split() == expected, lines[1]
            assert lines[2].split()[:2] == lines[3].split()[:2], lines[2:4]
            assert "2017-07-14 02:40:00.123" in lines[2], lines[2]  # (sub-ms digits: another fix)
            crlf = "0000000   l   1  \\r  \\n   l   2  \\r  \\n   w   1  \\r  \\n   w   2  \\r  \\n"
            assert lines[4:6] == [crlf, "0000020"], lines
            assert lines[6:8] == ["0 empty", "0 wempty"]
            assert sorted(lines[8:]) == sorted(f"{n} s{n}" for n in sizes)
            for n in sizes:
                assert (await ws.fs.stat(f"{ROOT}/s{n}")).size == n
            assert await ws.fs.read_file(f"{ROOT}/crlf") == b"l1\r\nl2\r\n"
            await ok(ws, "touch stamp")


@pytest.mark.parametrize("live", KINDS)
async def test_5000_small_files_written_by_one_call_and_deleted_by_the_next(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        made = await ok(
            ws, "mkdir many && cd many && for i in $(seq 5000); do echo $i > f$i; done", timeout=300
        )
        assert len(made.pulled) >= 5000, len(made.pulled)
        assert len(await ws.fs.ls(f"{ROOT}/many")) == 5000
        await ok(ws, "rm -r many && mkdir many && echo one > many/keep", timeout=300)
        assert await ws.fs.ls(f"{ROOT}/many") == [f"{ROOT}/many/keep"]
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "ls many | wc -l")).stdout == "1\n"
        await ok(ws, "cd many && for i in $(seq 5000); do echo $i > g$i; done && rm g*[13579]", timeout=300)
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "ls many | wc -l; cat many/g5000")).stdout == "2501\n5000\n"
        assert len(await ws.fs.ls(f"{ROOT}/many")) == 2501


async def test_flock_held_by_one_call_excludes_a_concurrent_call_in_a_live_sandbox(db: Path) -> None:
    need("flock")
    async with opened(db, shell=shell(True), python=False) as ws:
        holder = await started(
            ws, "exec 9> lk && flock 9 && echo ready && sleep 3 && echo released", seconds=60
        )
        busy = await ok(ws, "flock -n lk true && echo free || echo busy")
        assert busy.stdout == "busy\n"
        waited = await ok(ws, "flock -w 30 lk echo got")
        assert waited.stdout == "got\n"
        assert (await settle(holder)).stdout == "ready\nreleased\n"
        assert (await ok(ws, "flock -n lk echo free")).stdout == "free\n"
    async with opened(db, shell=shell(True), python=False) as ws:
        assert (await ok(ws, "flock -n lk echo free; ls")).stdout == "free\nlk\n"


@pytest.mark.parametrize("live", KINDS)
async def test_fifo_pipelines_within_a_call_and_across_calls(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        piped = await ok(ws, "mkfifo p && (seq 100000 > p &) && sort -rn < p | head -1 > top && rm p")
        assert piped.skipped == [], piped.skipped_reasons
        assert await ws.fs.read_text(f"{ROOT}/top") == "100000\n"
        if live:
            writer = await started(ws, "mkfifo q && echo ready && seq 5000 > q && echo wrote", seconds=60)
            assert (await ok(ws, "wc -l < q")).stdout == "5000\n"
            assert (await settle(writer)).stdout == "ready\nwrote\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "ls")).stdout == "top\n"


# The deploy pattern: ``current`` is a symlink swapped atomically (``ln -s new tmp && mv -T tmp current``)
# while a reader goes through it; every read sees one whole release, never a missing ``current``.
READER = (
    "echo ready; for i in $(seq 400); do v=$(cat current/v 2>&1) || { echo broken $v; exit 1; };"
    " case $v in r[0-9]*) ;; *) echo bad $v; exit 1;; esac; done; echo done"
)


@pytest.mark.parametrize("live", KINDS)
async def test_an_atomic_symlink_swap_while_another_call_reads_through_it(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "for r in 0 1 2 3 4 5; do mkdir r$r && echo r$r > r$r/v; done && ln -s r0 current")
        reader = await started(ws, READER, seconds=120)
        for r in range(1, 6):
            await ok(ws, f"ln -s r{r} tmp && mv -T tmp current && readlink current")
        result = await settle(reader, 120)
        assert (result.status, result.stdout.splitlines()[-1]) == ("completed", "done"), result
        assert await ws.fs.readlink(f"{ROOT}/current") == "r5"
        assert not await ws.fs.exists(f"{ROOT}/tmp")
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, "cat current/v; ls")).stdout == "r5\ncurrent\nr0\nr1\nr2\nr3\nr4\nr5\n"
        await ok(ws, "ln -sfn r2 current")
        assert await ws.fs.readlink(f"{ROOT}/current") == "r2"


SERVE = (
    "setsid python3 -u -m http.server 0 --bind 127.0.0.1 > server.log 2>&1 < /dev/null &"
    " for i in $(seq 200); do grep -q 'port' server.log && break; sleep 0.05; done; grep -o 'port [0-9]*' server.log"
)
GET = "python3 -c \"import sys, urllib.request as u; print(u.urlopen(f'http://127.0.0.1:{sys.argv[1]}/{sys.argv[2]}', timeout=10).read().decode(), end='')\""


@pytest.mark.slow
async def test_a_server_left_running_serves_what_the_workspace_writes_meanwhile(db: Path) -> None:
    async with opened(db, shell=shell(True), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/site")
        await ws.fs.write_file(f"{ROOT}/site/a.txt", "one\n")
        port = (await ok(ws, SERVE)).stdout.split()[1]
        assert (await ok(ws, f"{GET} {port} site/a.txt")).stdout == "one\n"
        for i in range(5):
            await ws.fs.write_file(f"{ROOT}/site/a.txt", f"v{i}\n" * (i + 1))
            await ws.fs.write_file(f"{ROOT}/site/n{i}.txt", f"{i}\n")
            seen = await ok(ws, f"{GET} {port} site/a.txt && {GET} {port} site/n{i}.txt")
            assert seen.stdout == f"v{i}\n" * (i + 1) + f"{i}\n"
        await ws.fs.rename(f"{ROOT}/site/n0.txt", f"{ROOT}/site/moved.txt")
        await ws.fs.rm(f"{ROOT}/site/n1.txt")
        seen = await ok(ws, f"{GET} {port} site/moved.txt; {GET} {port} site/n1.txt 2>&1 | tail -1")
        assert seen.stdout == "0\nurllib.error.HTTPError: HTTP Error 404: File not found\n"
        if shutil.which("curl"):
            assert (await ok(ws, f"curl -s http://127.0.0.1:{port}/site/n4.txt")).stdout == "4\n"
        log = await ws.fs.read_text(f"{ROOT}/server.log")
        assert '"GET /site/moved.txt HTTP/1.1" 200' in log, log


# GNU tar's snapshot (``-g``) keeps each directory's device and inode number, and a file is dumped
# again when its mtime or ctime is past the snapshot's time.
LEVEL = "cp arch/snap arch/s{n} && echo {n} > src/new{n} && tar -C src -cvf arch/l{n}.tar -g arch/s{n} . | sort | tr '\\n' ' '"


@pytest.mark.parametrize("live", KINDS)
async def test_an_incremental_tar_level_holds_only_what_changed_in_the_same_open(
    db: Path, live: bool
) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "mkdir -p src/d arch && echo a > src/a && echo b > src/d/b && tar -C src -cf arch/l0.tar -g arch/snap .",
        )
        assert (await ok(ws, LEVEL.format(n=1))).stdout == "./ ./d/ ./new1 "
        assert (await ok(ws, LEVEL.format(n=2))).stdout == "./ ./d/ ./new1 ./new2 "


@pytest.mark.xfail(
    strict=True,
    reason="a reopen rebuilds the mirror from SQLite: every directory gets a new inode number and every "
    "file a new ctime (neither can be set), which GNU tar's --listed-incremental snapshot compares, so "
    "the first level taken after a reopen holds the whole tree again (correct, not incremental)",
)
@pytest.mark.parametrize("live", KINDS)
async def test_an_incremental_tar_level_after_a_reopen_holds_only_what_changed(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "mkdir -p src/d arch && echo a > src/a && echo b > src/d/b && tar -C src -cf arch/l0.tar -g arch/snap .",
        )
    async with opened(db, shell=shell(live), python=False) as ws:
        level = await ok(ws, LEVEL.format(n=1))
        assert level.stdout == "./ ./d/ ./new1 ", level.stdout  # was: ./ ./a ./d/ ./d/b ./new1


# Transactions of the ``sqlite3`` CLI (rollback journal) in the background, each rewriting pages
# across the file: every copy of the database and its journal the workspace gives is a whole database.
SQL_LOOP = (
    'echo ready; for i in $(seq 120); do sqlite3 t.db "begin; insert into t values ($i, hex(randomblob(3000)));'
    ' update t set pad = hex(randomblob(3000)) where x % 7 = $i % 7; commit;" || exit 1; done; echo done'
)


def whole(files: dict[str, bytes], where: Path) -> tuple[str, int]:
    """Integrity and row count of the database made of ``files`` (``t.db`` and maybe a hot journal)."""
    where.mkdir()
    for name, data in files.items():
        (where / name).write_bytes(data)
    with sqlite3.connect(where / "t.db") as conn:
        checked = conn.execute("pragma integrity_check").fetchone()[0]
        count = conn.execute("select count(*) from t").fetchone()[0]
    conn.close()
    return checked, count


async def test_sqlite3_cli_transactions_in_the_background_while_the_workspace_reads_the_database(
    db: Path, tmp_path: Path
) -> None:
    need("sqlite3")
    async with opened(db, shell=shell(True), python=False) as ws:
        await ok(ws, "sqlite3 t.db 'create table t(x, pad)'")
        writer = asyncio.ensure_future(settle(await started(ws, SQL_LOOP, seconds=120), 120))
        counts = []
        for i in range(1000):  # bounded: the writer ends first (120 transactions)
            files = {}
            for name in ("t.db", "t.db-journal"):
                if await ws.fs.exists(f"{ROOT}/{name}"):
                    files[name] = await ws.fs.read_file(f"{ROOT}/{name}")
            checked, count = whole(files, tmp_path / f"copy{i}")
            assert checked == "ok", (i, {k: len(v) for k, v in files.items()})
            counts.append(count)
            if writer.done():
                break
            await asyncio.sleep(0.02)
        result = await writer
        assert result.stdout == "ready\ndone\n", result
        assert counts == sorted(counts)  # never a row seen, then gone
    async with opened(db, shell=shell(True), python=False) as ws:
        assert (
            await ok(ws, "sqlite3 t.db 'pragma integrity_check; select count(*) from t'")
        ).stdout == "ok\n120\n"


@pytest.mark.parametrize("live", KINDS)
async def test_files_at_the_backends_max_file_bytes_are_mirrored_and_one_byte_more_is_not(
    db: Path, live: bool
) -> None:
    limit = 512 * 1024 + 1

    def backend() -> ShellBackend:
        made = ShellBackend(live=live, max_file_bytes=limit, max_sync_bytes=256 * 1024)
        if live and not made.live:
            pytest.skip("no cgroup freezer here")
        return made

    async with opened(db, shell=backend(), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/at", b"a" * limit)
        await ws.fs.write_file(f"{ROOT}/over", b"o" * (limit + 1))
        seen = await ok(
            ws, f"stat -c '%s %n' at; test -e over || echo no over; head -c {limit + 1} /dev/zero > made"
        )
        assert seen.stdout == f"{limit} at\nno over\n"
        assert list(seen.skipped) == [f"{ROOT}/over"], seen.skipped_reasons
        assert "max_file_bytes" in seen.skipped_reasons[f"{ROOT}/over"]
        assert (await ws.fs.stat(f"{ROOT}/made")).size == limit + 1  # a run's file is pulled whole
    async with opened(db, shell=backend(), python=False) as ws:
        seen = await ok(ws, "ls; cmp -n 524289 at /dev/null 2>/dev/null || echo differs")
        assert seen.stdout == "at\ndiffers\n"
        assert sorted(seen.skipped) == [f"{ROOT}/made", f"{ROOT}/over"]


ITEMIZED = "rsync -aH --itemize-changes src/ dst/ | sort | tr '\\n' '|'"


@pytest.mark.parametrize("live", KINDS)
async def test_rsync_copies_then_has_nothing_to_do_across_calls_and_a_reopen(db: Path, live: bool) -> None:
    """rsync's quick check (size and mtime) finds nothing to send again in a later call and after a
    reopen, sends what the workspace changed, and ``--link-dest`` makes hard links to the last copy."""
    need("rsync")
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "mkdir -p src/d src/e && echo a > src/a && echo b > src/d/b && ln src/a src/d/hard"
            " && ln -s ../a src/d/l && chmod 700 src/e && touch -d @1500000000.5 src/a && : > src/empty",
        )
        first = (await ok(ws, ITEMIZED)).stdout.split("|")
        assert "hf+++++++++ a => d/hard" in first and "cL+++++++++ d/l -> ../a" in first, first
        assert (await ok(ws, ITEMIZED)).stdout == ""
        await ws.fs.write_file(f"{ROOT}/src/d/b", "b2\n")
        sent = (await ok(ws, ITEMIZED)).stdout  # (``t`` too, or not: rsync compares seconds first)
        assert sent.startswith(">f.s") and sent.endswith(" d/b|"), sent
        linked = await ok(ws, "rsync -a --link-dest=../dst src/ bk/ && stat -c '%h %n' bk/a bk/d/b")
        assert linked.stdout == "4 bk/a\n2 bk/d/b\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, ITEMIZED)).stdout == ""
        seen = await ok(ws, "stat -c '%h %a %n' dst/a bk/a dst/e; cat dst/d/b; diff -r src dst && echo same")
        assert seen.stdout == "4 644 dst/a\n4 644 bk/a\n2 700 dst/e\nb2\nsame\n"
