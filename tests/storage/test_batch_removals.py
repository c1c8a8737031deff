"""``commit_batch`` removing many paths at once (a pull of ``rm f{1..1000}``): one resolution and one
query per parent directory, whatever the cache holds, with every rule of a removal one at a time
(deepest first, links not followed, paths through links, missing paths, hard links, the change log)."""

from __future__ import annotations

from pathlib import Path

from computer.storage import FileSystem

NAMES = [f"f{i}" for i in range(1, 1001)]


def test_a_thousand_removals_in_one_directory_take_a_few_statements(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    fs.commit_batch({f"/w/bench/{n}": n.encode() for n in NAMES} | {"/w/bench/keep": b"k"})
    fs.close()
    fs = FileSystem.open(path)  # nothing cached: each path resolved alone was a query or more each
    try:
        before, rev = fs.queries, fs.rev
        result = fs.commit_batch({f"/w/bench/{n}": None for n in NAMES})
        assert fs.queries - before < 40
        assert result.applied == sorted(f"/w/bench/{n}" for n in NAMES) and result.skipped == []
        assert [row.path for row in fs.manifest("/w")] == ["/w/bench", "/w/bench/keep"]
        changes = fs.changes_since(rev, "/w").changes
        assert [c.path for c in changes] == sorted((f"/w/bench/{n}" for n in NAMES), reverse=True)
        assert {c.op for c in changes} == {"rm"}
        assert fs.stats()["files"] == 1
    finally:
        fs.close()


async def test_nested_linked_missing_and_hard_linked_removals(fs: FileSystem) -> None:
    await fs.mkdir("/w/a/d/deep", recursive=True)
    for n in ("x", "y", "z"):
        await fs.write_file(f"/w/a/{n}", n.encode())
    await fs.write_file("/w/a/d/deep/f", b"f")
    await fs.write_file("/w/a/d/g", b"g")
    await fs.mkdir("/w/b")
    await fs.write_file("/w/b/one", b"1")
    await fs.write_file("/w/b/two", b"2")
    await fs.symlink("/w/b", "/w/link")  # a parent through a link: its target's entries go
    await fs.link("/w/b/two", "/w/kept-name")  # a hard link outside: its file stays
    await fs.symlink("/w/a", "/w/a-link")
    result = fs.commit_batch(
        {
            "/w/a/d": None,  # a directory with its tree
            "/w/a/d/deep/f": None,  # below a removed directory: gone first, no error
            "/w/a/x": None,
            "/w/a/y": None,
            "/w/link/one": None,
            "/w/link/two": None,
            "/w/b/one": None,  # the same entry through two paths
            "/w/missing/q": None,  # a missing parent
            "/w/a/nothing": None,  # a missing name
            "/w/a-link": None,  # a link itself, never its target
        }
    )
    assert result.skipped == []
    assert "/w/missing/q" in result.applied and "/w/a/nothing" in result.applied
    assert sorted(row.path for row in fs.manifest("/w")) == [
        "/w/a",
        "/w/a/z",
        "/w/b",
        "/w/kept-name",
        "/w/link",
    ]
    assert await fs.read_file("/w/kept-name") == b"2"
    assert await fs.read_file("/w/a/z") == b"z"
    stats = fs.stats()
    assert stats["files"] == 2 and stats["symlinks"] == 1
    # Each removed entry logged once, by its real path (a listed path below a removed directory too).
    logged = [c.path for c in fs.changes_since(result.rev - 1, "/w").changes]
    assert sorted(logged) == sorted(
        ["/w/a/d", "/w/a/d/deep/f", "/w/a/x", "/w/a/y", "/w/b/one", "/w/b/two", "/w/a-link"]
    )


async def test_the_change_log_keeps_every_name_of_a_large_batch(fs: FileSystem) -> None:
    """Entries of one op go to the log as one JSON array: names JSON must escape come back as they were."""
    odd = ['q"uote', "back\\slash", "new\nline", "tab\t", "ümlaut", "emoji-😀", "ctrl-\x01", "sp ace"]
    names = [f"{n}-{i}" for i in range(3) for n in odd]
    rev = fs.rev
    fs.commit_batch({f"/w/{n}": b"x" for n in names})
    written = [c.path for c in fs.changes_since(rev, "/w").changes if c.op == "write"]
    assert written == sorted(f"/w/{n}" for n in names)
    rev = fs.rev
    fs.commit_batch({f"/w/{n}": None for n in names})
    removed = [c.path for c in fs.changes_since(rev, "/w").changes]
    assert sorted(removed) == sorted(f"/w/{n}" for n in names)
    assert [row.path for row in fs.manifest("/w")] == []
