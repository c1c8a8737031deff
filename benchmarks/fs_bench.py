"""Benchmark of the embedded storage engine against plain files and a raw SQLite floor.

Run: ``.venv/bin/python benchmarks/fs_bench.py [--quick] [--no-agentfs] [--only read,rm,...]``

Columns, all measured in this run on this machine:
- ``embedded``: ``computer.storage.FileSystem`` on a SQLite file on disk (WAL, synchronous=NORMAL);
- ``tmpfs`` / ``disk``: plain Python file calls under /dev/shm and under the system temp dir;
- ``sqlite``: the raw SQLite floor (one small-row transaction per file; 512 KiB blobs in one
  transaction for the 64 MiB cases), same pragmas as the engine;
- ``grep -r``: GNU grep over the same tree on tmpfs (grep scenario only);
- ``agentfs``: the ``agentfs-sdk`` package when it is installed (small-file scenarios and 64 MiB).

Every scenario prints absolute times and the ratio of ``embedded`` to its baseline, with the target.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, ROOT)

from computer.storage import FileSystem  # noqa: E402 (after the sys.path tweak)

MiB = 1024 * 1024
N_SMALL = 1000
BIG = 64 * MiB

SCENARIOS = (
    "create",
    "stat",
    "rm",
    "mkdir",
    "find",
    "write",
    "read",
    "stream",
    "copy",
    "overwrite",
    "grep",
    "rss",
)
NEEDS = {
    "stat": "create",
    "rm": "create",
    "find": "mkdir",
    "read": "write",
    "stream": "write",
    "copy": "write",
}
NEEDS["overwrite"] = "write"


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _clock() -> float:
    return time.perf_counter()


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = _clock()
    await fn()
    return _clock() - start


def _timed_sync(fn: Callable[[], Any]) -> float:
    start = _clock()
    fn()
    return _clock() - start


# ---------------------------------------------------------------------------- plain files


class PlainFiles:
    """The same scenarios with plain Python file calls under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)

    def create(self, n: int, tag: str) -> None:
        d = self.root / f"small{tag}"
        d.mkdir()
        for i in range(n):
            with open(d / f"f{i}.txt", "wb") as f:
                f.write(b"hello world %d\n" % i)

    def stat(self, n: int, tag: str) -> None:
        d = self.root / f"small{tag}"
        for i in range(n):
            os.stat(d / f"f{i}.txt")

    def rm(self, n: int, tag: str) -> None:
        d = self.root / f"small{tag}"
        for i in range(n):
            os.unlink(d / f"f{i}.txt")

    def mkdir_tree(self, tag: str) -> None:
        t = self.root / f"tree{tag}"
        t.mkdir()
        for a in range(10):
            os.mkdir(t / str(a))
            for b in range(10):
                os.mkdir(t / str(a) / str(b))
                for c in range(10):
                    os.mkdir(t / str(a) / str(b) / str(c))

    def walk(self) -> int:
        count = 0
        for _, dirs, files in os.walk(self.root / "tree0"):
            dirs.sort()
            count += len(dirs) + len(files)
        return count

    def write_big(self, data: bytes, tag: str) -> None:
        with open(self.root / f"big{tag}", "wb") as f:
            f.write(data)

    def read_big(self, tag: str) -> bytes:
        with open(self.root / f"big{tag}", "rb") as f:
            return f.read()

    def copy_big(self, tag: str) -> None:
        shutil.copyfile(self.root / "big0", self.root / f"big.copy{tag}")

    def grep_tree(self, tree: dict[str, bytes]) -> None:
        for rel, data in tree.items():
            p = self.root / "g" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

    def grep(self, needle: bytes) -> int:
        hits = 0
        for dirpath, dirs, files in os.walk(self.root / "g"):
            dirs.sort()
            for name in sorted(files):
                with open(os.path.join(dirpath, name), "rb") as f:
                    data = f.read()
                pos = data.find(needle)
                while pos >= 0:
                    hits += 1
                    end = data.find(b"\n", pos)
                    pos = data.find(needle, end + 1) if end >= 0 else -1
        return hits


# ---------------------------------------------------------------------------- raw SQLite floor


class RawSqlite:
    """The floor: what SQLite itself costs for the same row traffic."""

    def __init__(self, path: Path) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA page_size = 4096")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("PRAGMA wal_autocheckpoint = 16384")
        self.db.execute("PRAGMA secure_delete = FAST")
        self.db.execute("CREATE TABLE f (name TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID")
        self.db.execute("CREATE TABLE d (name TEXT PRIMARY KEY) WITHOUT ROWID")
        self.db.execute("CREATE TABLE big (tag TEXT, idx INTEGER, data BLOB, PRIMARY KEY (tag, idx))")

    def _txn(self, sql: str, params: tuple[Any, ...]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(sql, params)
        self.db.execute("COMMIT")

    def create(self, n: int, tag: str) -> None:
        for i in range(n):
            self._txn(
                "INSERT INTO f (name, data) VALUES (?, ?)", (f"/small{tag}/f{i}.txt", b"hello world %d\n" % i)
            )

    def stat(self, n: int, tag: str) -> None:
        for i in range(n):
            self.db.execute(
                "SELECT length(data) FROM f WHERE name = ?", (f"/small{tag}/f{i}.txt",)
            ).fetchone()

    def rm(self, n: int, tag: str) -> None:
        for i in range(n):
            self._txn("DELETE FROM f WHERE name = ?", (f"/small{tag}/f{i}.txt",))

    def mkdir_tree(self, tag: str) -> None:
        for a in range(10):
            self._txn("INSERT INTO d VALUES (?)", (f"/t{tag}/{a}",))
            for b in range(10):
                self._txn("INSERT INTO d VALUES (?)", (f"/t{tag}/{a}/{b}",))
                for c in range(10):
                    self._txn("INSERT INTO d VALUES (?)", (f"/t{tag}/{a}/{b}/{c}",))

    def write_big(self, data: bytes, tag: str) -> None:
        """One transaction: replace the blobs of ``tag`` (fresh rows the first time)."""
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("DELETE FROM big WHERE tag = ?", (tag,))
        for i in range(0, len(data), 512 * 1024):
            self.db.execute(
                "INSERT INTO big (tag, idx, data) VALUES (?, ?, ?)", (tag, i, data[i : i + 512 * 1024])
            )
        self.db.execute("COMMIT")

    def read_big(self, tag: str) -> bytes:
        return b"".join(
            r[0] for r in self.db.execute("SELECT data FROM big WHERE tag = ? ORDER BY idx", (tag,))
        )


# ---------------------------------------------------------------------------- the engine


class _SmallFileScenarios:
    """The small-file scenarios, written once for every async store with the fs surface's calls."""

    fs: Any

    async def create(self, n: int, tag: str) -> None:
        await self.fs.mkdir(f"/small{tag}")
        for i in range(n):
            await self.fs.write_file(f"/small{tag}/f{i}.txt", b"hello world %d\n" % i)

    async def stat(self, n: int, tag: str) -> None:
        for i in range(n):
            await self.fs.stat(f"/small{tag}/f{i}.txt")

    async def rm(self, n: int, tag: str) -> None:
        for i in range(n):
            await self._remove(f"/small{tag}/f{i}.txt")

    async def _remove(self, path: str) -> None:
        await self.fs.rm(path)

    async def mkdir_tree(self, tag: str) -> None:
        await self.fs.mkdir(f"/tree{tag}")
        for a in range(10):
            await self.fs.mkdir(f"/tree{tag}/{a}")
            for b in range(10):
                await self.fs.mkdir(f"/tree{tag}/{a}/{b}")
                for c in range(10):
                    await self.fs.mkdir(f"/tree{tag}/{a}/{b}/{c}")


class Embedded(_SmallFileScenarios):
    def __init__(self, path: Path) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        self.fs = FileSystem.open(str(path))

    async def walk(self) -> int:
        return len(await self.fs.find("/tree0"))


class AgentFs(_SmallFileScenarios):
    """``agentfs-sdk`` (Turso's AgentFS), when installed."""

    def __init__(self, a: Any) -> None:
        self.a = a
        self.fs = a.fs

    @classmethod
    async def open(cls, path: Path) -> AgentFs | None:
        try:
            from agentfs_sdk import AgentFS, AgentFSOptions
        except ImportError:
            return None
        _remove_db(path)
        return cls(await AgentFS.open(AgentFSOptions(path=str(path))))

    async def _remove(self, path: str) -> None:
        await self.fs.unlink(path)


# ---------------------------------------------------------------------------- data


WORDS = (
    "alpha beta gamma delta epsilon function return const let import export class interface "
    "type async await promise value index result error handler request response buffer stream"
).split()


def grep_tree(files: int, size: int, needle: bytes) -> dict[str, bytes]:
    """``files`` text files of about ``size`` bytes in 20 directories; 1 line in 200 has the needle."""
    rng = random.Random(42)
    tree: dict[str, bytes] = {}
    for i in range(files):
        lines: list[bytes] = []
        total = 0
        while total < size:
            line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).encode()
            if rng.random() < 0.005:
                line += b" " + needle
            lines.append(line)
            total += len(line) + 1
        tree[f"d{i % 20:02}/file{i:05}.txt"] = b"\n".join(lines) + b"\n"
    return tree


RSS_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from computer.storage import FileSystem

    def rss(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
        return 0

    async def main(path, total):
        fs = FileSystem.open(path)
        block = bytearray(os.urandom(1024 * 1024))

        async def source():
            for i in range(total // len(block)):
                block[:8] = i.to_bytes(8, "little")
                yield bytes(block)

        base = rss("VmRSS")
        await fs.write_file("/big", source())
        n = 0
        async for piece in fs.stream("/big"):
            n += len(piece)
        assert n == total
        print(rss("VmHWM") - base)
        fs.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


# ---------------------------------------------------------------------------- report


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, float], str, str, float | None]] = []

    def add(
        self,
        name: str,
        measured: tuple[dict[str, float], dict[str, float]],
        unit: str,
        baseline: str,
        target: float | None,
    ) -> None:
        times, cpu = measured
        self.rows.append((name, times, unit, baseline, target))
        self._print_row(name, times, unit, baseline, target)
        if cpu.get(baseline):
            cells = "  ".join(f"{col}={self._fmt(t, unit)}" for col, t in cpu.items())
            print(f"{'  cpu time':<28} {cells}")
            print(f"{'':<28} embedded/{baseline} = {cpu['embedded'] / cpu[baseline]:5.2f}x (cpu)", flush=True)

    @staticmethod
    def _fmt(seconds: float, unit: str) -> str:
        if unit.startswith("per "):
            n = int(unit.split()[1])
            return f"{seconds / n * 1e6:8.1f} µs"
        return f"{seconds * 1e3:8.1f} ms"

    def _print_row(
        self, name: str, times: dict[str, float], unit: str, baseline: str, target: float | None
    ) -> None:
        cells = "  ".join(f"{col}={self._fmt(t, unit)}" for col, t in times.items())
        ratio = times["embedded"] / times[baseline] if times.get(baseline) else float("nan")
        verdict = ""
        if target is not None:
            verdict = f"target ≤ {target:g}x  {'OK' if ratio <= target else 'MISS'}"
        print(f"{name:<28} {cells}")
        print(f"{'':<28} embedded/{baseline} = {ratio:5.2f}x  {verdict}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller big-file and grep sizes")
    parser.add_argument("--no-agentfs", action="store_true")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated scenarios to run (of {','.join(SCENARIOS)}); "
        "the ones they build on run too (create for stat/rm, mkdir for find, write for the 64 MiB reads)",
    )
    args = parser.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {','.join(SCENARIOS)}")
    for scenario, needs in NEEDS.items():
        if scenario in only:
            only.add(needs)

    def on(scenario: str) -> bool:
        return not only or scenario in only

    big = 16 * MiB if args.quick else BIG
    work = Path(tempfile.mkdtemp(prefix="fsbench-"))
    shm = Path(tempfile.mkdtemp(prefix="fsbench-", dir="/dev/shm"))
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, cpus {os.cpu_count()}")
    print(f"disk dir {work}, tmpfs dir {shm}\n")
    report = Report()
    try:
        tmpfs = PlainFiles(shm / "plain")
        disk = PlainFiles(work / "plain")
        raw = RawSqlite(work / "raw.sqlite")
        emb = Embedded(work / "ws.sqlite")
        agent = None if args.no_agentfs else await AgentFs.open(work / "agentfs.db")
        if agent is None and not args.no_agentfs:
            print("agentfs-sdk not installed: no agentfs column\n")

        async def best(
            columns: dict[str, Callable[[str], Any]], rounds: int
        ) -> tuple[dict[str, float], dict[str, float]]:
            """Best wall and best CPU time of each column over ``rounds`` interleaved rounds."""
            wall: dict[str, float] = {}
            cpu: dict[str, float] = {}
            for r in range(rounds):
                for col, fn in columns.items():
                    if col == "agentfs" and r > 0:
                        continue  # one round is plenty at its speed
                    start, start_cpu = _clock(), _cpu()
                    result = fn(str(r))
                    if asyncio.iscoroutine(result):
                        await result
                    wall[col] = min(wall.get(col, float("inf")), _clock() - start)
                    cpu[col] = min(cpu.get(col, float("inf")), _cpu() - start_cpu)
            return wall, cpu

        def small_columns(fn: str, n: int) -> dict[str, Callable[[str], Any]]:
            cols: dict[str, Callable[[str], Any]] = {
                "embedded": lambda tag: getattr(emb, fn)(n, tag),
                "tmpfs": lambda tag: getattr(tmpfs, fn)(n, tag),
                "disk": lambda tag: getattr(disk, fn)(n, tag),
                "sqlite": lambda tag: getattr(raw, fn)(n, tag),
            }
            if agent is not None:
                cols["agentfs"] = lambda tag: getattr(agent, fn)(n, tag)
            return cols

        rounds = 3
        for fn, target in (("create", 5), ("stat", 6), ("rm", 6)):
            if not on(fn):
                continue
            label = f"create {N_SMALL} small files" if fn == "create" else f"{fn} {N_SMALL}"
            report.add(
                label, await best(small_columns(fn, N_SMALL), rounds), f"per {N_SMALL}", "tmpfs", target
            )

        tree_cols: dict[str, Callable[[str], Any]] = {
            "embedded": emb.mkdir_tree,
            "tmpfs": tmpfs.mkdir_tree,
            "disk": disk.mkdir_tree,
            "sqlite": raw.mkdir_tree,
        }
        if agent is not None:
            tree_cols["agentfs"] = agent.mkdir_tree

        async def find_scenario() -> None:
            assert await emb.walk() == tmpfs.walk() == 1110
            walk_cols: dict[str, Callable[[str], Any]] = {
                "embedded": lambda _: emb.walk(),
                "tmpfs": lambda _: tmpfs.walk(),
                "disk": lambda _: disk.walk(),
            }
            report.add("find over the tree", await best(walk_cols, rounds), "per 1110", "tmpfs", 1)

        async def big_scenarios() -> None:
            # Fresh random content for every timed write, so no round is helped by dedup.
            blobs = {key: os.urandom(big) for key in ("w0", "w1", "o0", "o1")}
            label = f"{big // MiB} MiB"
            big_rounds = 2
            # Each round writes a new file (tags 0, 1); round 0's file is then read, copied, overwritten.
            write_cols: dict[str, Callable[[str], Any]] = {
                "embedded": lambda tag: emb.fs.write_file(f"/big{tag}", blobs["w" + tag]),
                "tmpfs": lambda tag: tmpfs.write_big(blobs["w" + tag], tag),
                "disk": lambda tag: disk.write_big(blobs["w" + tag], tag),
                "sqlite": lambda tag: raw.write_big(blobs["w" + tag], tag),
            }
            report.add(f"write {label}", await best(write_cols, big_rounds), "total", "sqlite", 1.5)

            got: list[bytes] = []

            async def emb_read(_: str) -> None:
                got.append(await emb.fs.read_file("/big0"))

            if on("read"):
                read_cols: dict[str, Callable[[str], Any]] = {
                    "embedded": emb_read,
                    "tmpfs": lambda _: tmpfs.read_big("0"),
                    "disk": lambda _: disk.read_big("0"),
                    "sqlite": lambda _: raw.read_big("0"),
                }
                report.add(f"read {label}", await best(read_cols, big_rounds), "total", "tmpfs", 1.5)
                assert got[0] == blobs["w0"]
                got.clear()

            async def stream_all(_: str) -> None:
                n = 0
                async for piece in emb.fs.stream("/big0"):
                    n += len(piece)
                assert n == big

            if on("stream"):
                stream_cols: dict[str, Callable[[str], Any]] = {
                    "embedded": stream_all,
                    "tmpfs": lambda _: tmpfs.read_big("0"),
                }
                report.add(f"stream {label}", await best(stream_cols, big_rounds), "total", "tmpfs", 1.5)

            if on("copy"):
                copy_cols: dict[str, Callable[[str], Any]] = {
                    "embedded": lambda tag: emb.fs.copy("/big0", f"/big.copy{tag}"),
                    "tmpfs": lambda tag: tmpfs.copy_big(tag),
                    "disk": lambda tag: disk.copy_big(tag),
                }
                report.add(f"copy {label}", await best(copy_cols, big_rounds), "total", "tmpfs", 0.5)

            def other(tag: str) -> bytes:
                return blobs["o" + tag]

            if on("overwrite"):
                over_cols: dict[str, Callable[[str], Any]] = {
                    "embedded": lambda tag: emb.fs.write_file("/big1", other(tag)),
                    "tmpfs": lambda tag: tmpfs.write_big(other(tag), "1"),
                    "disk": lambda tag: disk.write_big(other(tag), "1"),
                    "sqlite": lambda tag: raw.write_big(other(tag), "1"),
                }
                report.add(f"overwrite {label}", await best(over_cols, big_rounds), "total", "sqlite", 1.5)

            if agent is not None:
                t_write = await _timed(lambda: agent.fs.write_file("/big", blobs["w0"]))
                t_read = await _timed(lambda: agent.fs.read_file("/big", encoding=None))
                print(
                    f"{'agentfs ' + label:<28} write={t_write * 1e3:8.1f} ms  read={t_read * 1e3:8.1f} ms\n"
                )
            blobs.clear()

        async def grep_scenario() -> None:
            needle = b"NEEDLE_LITERAL_42"
            files, size = (500, 10_000) if args.quick else (2000, 10_000)
            tree = grep_tree(files, size, needle)
            total = sum(len(v) for v in tree.values())
            tmpfs.grep_tree(tree)
            await emb.fs.mkdir("/g")
            for rel, content in tree.items():
                parent = "/g/" + rel.rsplit("/", 1)[0]
                await emb.fs.mkdir(parent, recursive=True)
                await emb.fs.write_file("/g/" + rel, content)
            expected = tmpfs.grep(needle)
            hits = await emb.fs.grep(needle.decode(), "/g")
            assert len(hits) == expected, (len(hits), expected)

            def grep_r() -> None:
                subprocess.run(
                    ["grep", "-rn", "--", needle.decode(), str(shm / "plain" / "g")],
                    stdout=subprocess.DEVNULL,
                    check=True,
                )

            grep_r()  # warm the page cache
            grep_cols: dict[str, Callable[[str], Any]] = {
                "embedded": lambda _: emb.fs.grep(needle.decode(), "/g"),
                "grep -r": lambda _: grep_r(),
                "tmpfs": lambda _: tmpfs.grep(needle),
            }
            measured = await best(grep_cols, rounds)
            report.add(f"grep {files} files {total / 1e6:.0f} MB", measured, "total", "grep -r", 3)
            print(f"{'':<28} ({expected} matching lines)\n")

        async def rss_scenario() -> None:
            rss_total = (64 if args.quick else 256) * MiB
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                RSS_CHILD,
                str(work / "rss.sqlite"),
                str(rss_total),
                stdout=asyncio.subprocess.PIPE,
                cwd=ROOT,
            )
            out, _ = await proc.communicate()
            growth = int(out.decode().strip())
            verdict = "OK" if growth < 32 * MiB else "MISS"
            print(
                f"{'stream write+read ' + str(rss_total // MiB) + ' MiB':<28} "
                f"peak RSS growth = {growth / MiB:.1f} MiB  target < 32 MiB  {verdict}"
            )

        if on("mkdir"):
            report.add("mkdir tree 10x10x10", await best(tree_cols, rounds), "per 1110", "tmpfs", 8)
        if on("find"):
            await find_scenario()
        if on("write"):
            await big_scenarios()
        if on("grep"):
            await grep_scenario()
        if on("rss"):
            await rss_scenario()
        stats = emb.fs.stats()
        print(f"\nembedded store: {stats}")
        emb.fs.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


async def _collect(into: list[bytes], aw: Awaitable[bytes]) -> None:
    into.append(await aw)


if __name__ == "__main__":
    asyncio.run(main())
