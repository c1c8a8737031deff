"""The on-disk schema: version check and the upgrade of files written by an older version."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from computer.storage import CHUNK_SIZE, FileSystem
from computer.storage._schema import SCHEMA_VERSION


def _downgrade_to_v2(path: str, modes: dict[str, int] | None = None) -> None:
    """Rewrite a current file in the version-2 layout (no link counts), with raw ``modes`` by name."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    for name, mode in (modes or {}).items():
        con.execute(
            "UPDATE inodes SET mode = ? WHERE id = (SELECT child FROM dirents WHERE parent = 1 AND name = ?)",
            (mode, name),
        )
    con.execute("DROP INDEX inodes_linked")
    con.execute("ALTER TABLE inodes DROP COLUMN nlink")
    con.execute("UPDATE meta SET value = 2 WHERE key = 'schema_version'")
    con.execute("COMMIT")
    con.close()


def _downgrade_to_v1(path: str) -> None:
    """Rewrite a current file in the version-1 layout: every chunk list in ``file_chunks``."""
    _downgrade_to_v2(path)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute(
        "INSERT INTO file_chunks (inode, idx, chunk) SELECT id, 0, chunk FROM inodes WHERE chunk IS NOT NULL"
    )
    con.execute("ALTER TABLE inodes DROP COLUMN chunk")
    con.execute("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
    con.execute("COMMIT")
    con.close()


async def test_a_version_1_file_is_upgraded_on_open(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    big = os.urandom(2 * CHUNK_SIZE + 3)
    files = {"/small": b"hello", "/empty": b"", "/big": big, "/full": b"x" * CHUNK_SIZE}
    fs = FileSystem.open(path)
    for p, data in files.items():
        await fs.write_file(p, data)
    await fs.copy("/small", "/small2")
    before = fs.stats()
    fs.close()
    _downgrade_to_v1(path)

    fs = FileSystem.open(path)
    try:
        con = sqlite3.connect(path)
        assert (
            con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
        )
        # one-chunk files moved into their inode row; only /big keeps a chunk list
        assert con.execute("SELECT count(DISTINCT inode) FROM file_chunks").fetchone()[0] == 1
        con.close()
        for p, data in files.items():
            assert await fs.read_file(p) == data
        assert await fs.read_file("/small2") == b"hello"
        assert [m.line for m in await fs.grep("hello", "/")] == [1, 1]
        after = fs.stats()
        assert (after["chunks"], after["logical_bytes"]) == (before["chunks"], before["logical_bytes"])
        for p in [*files, "/small2"]:
            await fs.rm(p)
        assert fs.stats()["chunks"] == 0  # reference counts survived the move
    finally:
        fs.close()


async def test_a_version_2_file_gets_link_counts_and_loses_setuid_bits(tmp_path: Path) -> None:
    """Upgrading 2 -> 3 adds ``nlink`` (1 for every node) and strips setuid/setgid from every stored
    mode, so no later stat, manifest, copy or rename can bring them back."""
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    await fs.write_file("/suid", b"#!/bin/sh\n", mode=0o755)
    await fs.mkdir("/sgid")
    fs.close()
    _downgrade_to_v2(path, {"suid": 0o4755, "sgid": 0o2775})
    fs = FileSystem.open(path)
    try:
        assert (await fs.stat("/suid")).mode == 0o755
        assert (await fs.stat("/sgid")).mode == 0o775
        await fs.copy("/suid", "/copied")
        await fs.rename("/suid", "/moved")
        assert (await fs.stat("/copied")).mode == (await fs.stat("/moved")).mode == 0o755
        assert {(e[0], e[3]) for e in fs.manifest("/")} == {
            ("/copied", 0o755),
            ("/moved", 0o755),
            ("/sgid", 0o775),
        }
    finally:
        fs.close()


def test_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    FileSystem.open(path).close()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(OSError, match="unsupported schema version"):
        FileSystem.open(path)


def _open_together(store: Path, directory: Path, openers: int = 8) -> list[str]:
    """Open ``store`` (a workspace file) and ``directory`` (a directory file) from ``openers`` threads
    released at once; the errors they met."""
    import threading

    from computer.actors.directory import SqliteDirectory

    errors: list[str] = []
    barrier = threading.Barrier(openers)

    def open_both() -> None:
        barrier.wait()
        try:
            FileSystem.open(str(store)).close()
            SqliteDirectory(directory).close()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=open_both) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def test_many_openers_of_one_new_file_all_succeed(tmp_path: Path) -> None:
    """Opening one new workspace file (or directory file) from several connections at once: the switch
    to WAL and the schema creation each happen once, and no opener sees "database is locked"."""
    for trial in range(10):
        errors = _open_together(tmp_path / f"ws{trial}.sqlite", tmp_path / f"dir{trial}.sqlite")
        assert errors == [], (trial, errors)
