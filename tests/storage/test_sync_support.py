"""Revisions, change log, manifest and commit_batch (the exec mirror's sync bracket)."""

from __future__ import annotations

import asyncio
import errno
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.storage import FileSystem, _state


async def test_rev_bumps_once_per_mutating_call(fs: FileSystem) -> None:
    assert fs.rev == 0
    await fs.mkdir("/a/b/c", recursive=True)
    assert fs.rev == 1
    await fs.write_file("/a/f", b"x")
    await fs.rename("/a/f", "/a/g")
    await fs.copy("/a/g", "/a/h")
    await fs.symlink("/a/h", "/a/l")
    await fs.rm("/a", recursive=True)
    assert fs.rev == 6


async def test_reads_and_failures_do_not_bump_rev(fs: FileSystem) -> None:
    await fs.write_file("/f", b"x")
    rev = fs.rev
    await fs.read_file("/f")
    await fs.stat("/f")
    await fs.readdir("/")
    await fs.find("/")
    await fs.grep("x", "/")
    with pytest.raises(FileExistsError):
        await fs.mkdir("/f")
    with pytest.raises(FileNotFoundError):
        await fs.write_file("/no/f", b"")
    assert fs.rev == rev


async def test_changes_since_lists_changes_below_root(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    start = fs.rev
    await fs.write_file("/w/a", b"1")
    await fs.write_file("/other", b"2")
    await fs.mkdir("/w/d")
    await fs.rm("/w/a")
    cs = fs.changes_since(start, "/w")
    assert cs.complete
    assert cs.rev == fs.rev
    # Each name made or removed moves its directory's time (``touch``, after the call's entry); ``/``
    # is an ancestor of ``/w``: its change is reported for the subtree too.
    assert [(c.path, c.op) for c in cs.changes] == [
        ("/w/a", "write"),
        ("/w", "touch"),
        ("/", "touch"),
        ("/w/d", "mkdir"),
        ("/w", "touch"),
        ("/w/a", "rm"),
        ("/w", "touch"),
    ]
    assert [c.path for c in fs.changes_since(start).changes if c.op != "touch"] == [
        "/w/a",
        "/other",
        "/w/d",
        "/w/a",
    ]
    assert fs.changes_since(fs.rev).changes == []
    own = [c.rev for c in cs.changes if c.path == "/w/a"]  # a caller leaves its own revisions out
    assert [c.path for c in fs.changes_since(start, skip_revs=own).changes] == ["/other", "/", "/w/d", "/w"]


async def test_rename_logs_old_as_removed_and_new_as_renamed_from_it(fs: FileSystem) -> None:
    await fs.mkdir("/w/dir", recursive=True)
    await fs.write_file("/w/dir/f", b"x")
    await fs.write_file("/w/file", b"y")
    await fs.write_file("/w/old", b"z")
    rev = fs.rev
    await fs.rename("/w/dir", "/w/moved")
    await fs.rename("/w/file", "/w/old", overwrite=True)  # over an existing file: still one pair
    await fs.rm("/w/moved/f")
    changes = fs.changes_since(rev, "/w").changes
    assert [(c.path, c.op, c.source) for c in changes] == [
        ("/w/dir", "rm", None),
        ("/w/moved", "rename", "/w/dir"),
        ("/w", "touch", None),  # after the pair; both parents are one here
        ("/w/file", "rm", None),
        ("/w/old", "rename", "/w/file"),
        ("/w", "touch", None),
        ("/w/moved/f", "rm", None),
        ("/w/moved", "touch", None),
    ]
    assert changes[0].rev == changes[1].rev == rev + 1


async def test_a_copied_tree_logs_every_entry_it_made(fs: FileSystem) -> None:
    """A mirror's push reads a lone "mkdir" as a directory only made or chmod-ed: a copied tree logged
    as its top alone reached the sandbox empty."""
    await fs.mkdir("/w/t/s", recursive=True)
    await fs.write_file("/w/t/f", b"x")
    await fs.symlink("f", "/w/t/s/l")
    rev = fs.rev
    await fs.copy("/w/t", "/w/c")
    changes = fs.changes_since(rev, "/w").changes
    assert [(c.path, c.op) for c in changes] == [
        ("/w/c", "mkdir"),
        ("/w/c/f", "write"),
        ("/w/c/s", "mkdir"),
        ("/w/c/s/l", "symlink"),
        ("/w", "touch"),  # the new name's directory
    ]
    assert {c.rev for c in changes} == {rev + 1}
    await fs.copy("/w/t/f", "/w/c/f", overwrite=True)  # a new file over an old one: removed first
    assert [(c.path, c.op) for c in fs.changes_since(rev + 1, "/w").changes] == [
        ("/w/c/f", "rm"),
        ("/w/c/f", "write"),
        ("/w/c", "touch"),
    ]


async def test_a_rename_into_a_subtree_names_its_source_from_outside_it(fs: FileSystem) -> None:
    await fs.mkdir("/w/sub", recursive=True)
    await fs.write_file("/out", b"x")
    rev = fs.rev
    await fs.rename("/out", "/w/sub/in")
    await fs.rename("/w/sub/in", "/gone")
    assert [(c.path, c.op, c.source) for c in fs.changes_since(rev, "/w").changes] == [
        ("/w/sub/in", "rename", "/out"),
        ("/", "touch", None),  # the old name's directory (an ancestor of the root asked)
        ("/w/sub", "touch", None),
        ("/w/sub/in", "rm", None),
        ("/w/sub", "touch", None),
        ("/", "touch", None),
    ]
    own = [fs.rev]  # a left-out revision takes both of its entries with it
    assert [(c.path, c.source) for c in fs.changes_since(rev, "/w", skip_revs=own).changes] == [
        ("/w/sub/in", "/out"),
        ("/", None),
        ("/w/sub", None),
    ]


async def test_changes_of_an_ancestor_are_reported_for_a_subtree(fs: FileSystem) -> None:
    await fs.mkdir("/w/sub", recursive=True)
    rev = fs.rev
    await fs.rm("/w", recursive=True)
    assert [(c.path, c.op) for c in fs.changes_since(rev, "/w/sub").changes] == [("/w", "rm"), ("/", "touch")]


async def test_trimmed_change_log_is_incomplete(fs: FileSystem) -> None:
    fs.change_log_limit = 10
    for i in range(1100):
        await fs.write_file(f"/f{i % 5}", str(i).encode())
    assert not fs.changes_since(0).complete
    recent = fs.changes_since(fs.rev - 5)
    assert recent.complete
    assert len(recent.changes) == 5


async def test_a_held_revision_keeps_the_log_after_it_until_the_hold_ends(
    fs: FileSystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull in pages holds its run's revision: trims keep every entry after it, past the limit,
    until the hold is let go or runs out; then the log is trimmed to the limit again."""
    fs.change_log_limit = 10
    await fs.write_file("/start", b"0")
    held = fs.rev
    fs.hold_log(held, 600)
    for i in range(1100):
        await fs.write_file(f"/f{i % 5}", str(i).encode())
    after = fs.changes_since(held)
    assert after.complete and len(after.changes) == 1105  # and five touches of ``/``: five names made
    clock = [time.monotonic() + 601]  # the hold ran out: the next trim goes past it
    monkeypatch.setattr(_state.time, "monotonic", lambda: clock[0])
    for i in range(1100):
        await fs.write_file(f"/g{i % 5}", str(i).encode())
    assert not fs.changes_since(held).complete
    fs.hold_log(fs.rev, 600)
    fs.hold_log(fs.rev, 0)  # let go at once
    rev = fs.rev
    for i in range(1100):
        await fs.write_file(f"/h{i % 5}", str(i).encode())
    assert not fs.changes_since(rev).complete


async def test_change_log_survives_reopen(file_fs: FileSystem, tmp_path: object) -> None:
    await file_fs.write_file("/a", b"1")
    rev = file_fs.rev
    path = str(tmp_path) + "/ws.sqlite"  # type: ignore[operator]
    file_fs.close()
    again = FileSystem.open(path)
    try:
        assert [(c.path, c.op) for c in again.changes_since(rev - 1).changes] == [
            ("/a", "write"),
            ("/", "touch"),
        ]
    finally:
        again.close()


async def test_manifest_lists_every_node_below_root(fs: FileSystem) -> None:
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/d/f", b"abc", mode=0o600)
    await fs.write_file("/w/a", b"")
    await fs.symlink("d/f", "/w/link")
    await fs.write_file("/outside", b"")
    rows = fs.manifest("/w")
    assert [(p, k, s, m) for p, k, s, m, _ in rows] == [
        ("/w/a", "file", 0, 0o644),
        ("/w/d", "dir", 0, 0o755),
        ("/w/d/f", "file", 3, 0o600),
        ("/w/link", "symlink", 3, 0o777),
    ]
    assert all(isinstance(mtime, int) and mtime > 0 for *_, mtime in rows)
    assert (rows[2].path, rows[2].kind, rows[2].size, rows[2].mode) == ("/w/d/f", "file", 3, 0o600)
    with pytest.raises(FileNotFoundError):
        fs.manifest("/missing")
    assert fs.manifest("/outside") == []


async def test_commit_batch_is_one_transaction_and_one_rev(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    await fs.write_file("/w/old", b"old")
    await fs.mkdir("/w/gone/deep", recursive=True)
    rev = fs.rev
    result = fs.commit_batch(
        {"/w/new/file.txt": b"new", "/w/old": None, "/w/gone": None, "/w/missing": None, "/w/x.sh": b"#!"},
        mkdirs=["/w/empty/dir"],
        modes={"/w/x.sh": 0o755},
    )
    assert fs.rev == rev + 1 == result.rev
    assert result.skipped == []
    assert set(result.applied) >= {"/w/new/file.txt", "/w/old", "/w/gone", "/w/empty/dir", "/w/x.sh"}
    assert await fs.read_file("/w/new/file.txt") == b"new"
    assert not await fs.exists("/w/old")
    assert not await fs.exists("/w/gone")
    assert (await fs.stat("/w/empty/dir")).is_directory
    assert (await fs.stat("/w/x.sh")).mode == 0o755
    assert {c.rev for c in fs.changes_since(rev).changes} == {rev + 1}


async def test_commit_batch_skips_paths_changed_after_base_rev(fs: FileSystem) -> None:
    await fs.mkdir("/w/dir", recursive=True)
    await fs.write_file("/w/a", b"workspace")
    base = fs.rev
    await fs.write_file("/w/a", b"changed meanwhile")
    await fs.write_file("/w/dir/inner", b"also changed")
    result = fs.commit_batch({"/w/a": b"sandbox", "/w/b": b"sandbox b", "/w/dir": None}, base_rev=base)
    assert result.skipped == ["/w/a", "/w/dir"]
    assert result.applied == ["/w/b"]
    assert await fs.read_file("/w/a") == b"changed meanwhile"
    assert await fs.read_file("/w/dir/inner") == b"also changed"
    assert await fs.read_file("/w/b") == b"sandbox b"


async def test_commit_batch_with_nothing_to_apply_does_not_bump(fs: FileSystem) -> None:
    rev = fs.rev
    assert fs.commit_batch({}).rev == rev
    assert fs.rev == rev


async def test_commit_batch_replaces_what_is_in_the_way(fs: FileSystem) -> None:
    await fs.write_file("/f", b"file becomes dir")
    await fs.mkdir("/d")
    await fs.write_file("/d/x", b"")
    fs.commit_batch({"/f/inner": b"now a dir", "/d": b"dir becomes file"})
    assert await fs.read_file("/f/inner") == b"now a dir"
    assert await fs.read_file("/d") == b"dir becomes file"
    assert fs.stats()["logical_bytes"] == len(b"now a dir") + len(b"dir becomes file")


async def test_stats_reports_counts(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    await fs.write_file("/d/a", b"abc")
    await fs.write_file("/d/b", b"abc")
    stats = fs.stats()
    assert stats["files"] == 2
    assert stats["dirs"] == 2  # root included
    assert stats["chunks"] == 1
    assert stats["logical_bytes"] == 6
    assert stats["queries"] > 0


async def test_commit_batch_skips_everything_when_the_log_is_trimmed(fs: FileSystem) -> None:
    fs.change_log_limit = 10
    await fs.write_file("/a", b"workspace")
    base = fs.rev
    for i in range(1100):
        await fs.write_file("/churn", str(i).encode())
    result = fs.commit_batch({"/a": b"sandbox", "/b": b"new"}, base_rev=base)
    assert result.skipped == ["/a", "/b"]
    assert result.applied == []
    assert await fs.read_file("/a") == b"workspace"


async def test_commit_batch_sets_modes_of_existing_directories_and_files(fs: FileSystem) -> None:
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/f", b"x")
    rev = fs.rev
    fs.commit_batch({}, mkdirs=["/w/d"], modes={"/w/d": 0o700, "/w/f": 0o600})
    assert (await fs.stat("/w/d")).mode == 0o700
    assert (await fs.stat("/w/f")).mode == 0o600
    assert {(c.path, c.op) for c in fs.changes_since(rev).changes} == {("/w/d", "mkdir"), ("/w/f", "write")}
    again = fs.rev
    fs.commit_batch({}, mkdirs=["/w/d"], modes={"/w/d": 0o700})
    assert fs.changes_since(again).changes == []


async def test_commit_batch_that_changes_nothing_keeps_the_revision(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    rev = fs.rev
    result = fs.commit_batch({"/w/missing": None}, mkdirs=["/w"])
    assert result.rev == rev == fs.rev


def _chunk_refs_match_the_files(fs: FileSystem) -> None:
    """Every chunk's reference count equals the file references to it (none left at zero)."""
    db = fs._store.db
    real = dict(
        db.execute(
            "SELECT chunk, count(*) FROM (SELECT chunk FROM file_chunks UNION ALL "
            "SELECT chunk FROM inodes WHERE chunk IS NOT NULL) GROUP BY chunk"
        ).fetchall()
    )
    stored = {cid: refs for cid, refs in db.execute("SELECT id, refs FROM chunks WHERE refs > 0")}
    assert stored == real
    orphans = "SELECT count(*) FROM dirents WHERE child NOT IN (SELECT id FROM inodes)"
    assert db.one(orphans)[0] == 0


async def test_commit_batch_removes_many_files_links_and_trees_together(fs: FileSystem) -> None:
    """A pull that deletes many paths: shared chunks, a multi-chunk file, links, a file reached
    through a linked directory, and files below a directory removed in the same batch."""
    await fs.mkdir("/w/sub/deep", recursive=True)
    await fs.mkdir("/w/keep")
    writes: dict[str, bytes | None] = {f"/w/f{i}": b"%d" % i for i in range(40)}
    writes |= {f"/w/same{i}": b"shared" for i in range(10)}
    writes |= {f"/w/keep/same{i}": b"shared" for i in range(3)}
    writes |= {"/w/big": b"x" * (3 * 1024 * 1024 + 5), "/w/sub/a": b"a", "/w/sub/deep/b": b"b"}
    fs.commit_batch(writes)
    await fs.symlink("/w/f0", "/w/link")
    await fs.symlink("/w/sub", "/w/subl")
    before = fs.stats()
    rev = fs.rev
    gone = [f"/w/f{i}" for i in range(1, 40)] + [f"/w/same{i}" for i in range(10)]
    gone += ["/w/big", "/w/link", "/w/subl/a", "/w/sub/a", "/w/sub", "/w/missing"]
    result = fs.commit_batch(dict.fromkeys(gone))
    assert result.rev == rev + 1 and result.skipped == []
    assert set(result.applied) == set(gone)
    assert sorted(e.name for e in await fs.readdir("/w")) == ["f0", "keep", "subl"]
    assert await fs.read_file("/w/f0") == b"0"
    assert [await fs.read_file(f"/w/keep/same{i}") for i in range(3)] == [b"shared"] * 3
    stats = fs.stats()
    assert stats["files"] == before["files"] - 39 - 10 - 1 - 2
    assert stats["symlinks"] == before["symlinks"] - 1
    assert stats["logical_bytes"] == 1 + 3 * len(b"shared")
    _chunk_refs_match_the_files(fs)
    logged = {(c.path, c.op) for c in fs.changes_since(rev).changes}
    assert ("/w/f1", "rm") in logged and ("/w/big", "rm") in logged and ("/w/sub", "rm") in logged
    fs2_content = fs.commit_batch({"/w/f1": b"back"})  # the names are free again
    assert fs2_content.applied == ["/w/f1"] and await fs.read_file("/w/f1") == b"back"


async def test_reference_counts_dropped_many_at_once_add_up_per_chunk(fs: FileSystem) -> None:
    """Counts for one chunk given several times (more than the one-by-one limit) all apply."""
    await fs.mkdir("/d")
    fs.commit_batch({f"/d/f{i}": b"same" for i in range(30)})
    (cid, refs) = fs._store.db.one("SELECT id, refs FROM chunks WHERE refs > 0")
    assert refs == 30
    with fs._store.mutation("/d") as m:
        fs.chunks.decref_counts([(cid, 1)] * 12)
        m.log("/d", "write")
    assert fs._store.db.one("SELECT refs FROM chunks WHERE id = ?", (cid,))[0] == 18


_names = st.sampled_from(["a", "b", "a!", "a b", "é", "z", "0"])
_trees = st.lists(st.lists(_names, min_size=1, max_size=4).map(lambda s: "/r/" + "/".join(s)), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paths=_trees, limit=st.integers(min_value=1, max_value=7), inodes=st.booleans())
def test_manifest_pages_add_up_to_the_whole_manifest(paths: list[str], limit: int, inodes: bool) -> None:
    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.mkdir("/r")
            for p in paths:  # the last segment is a file unless something was made below it
                try:
                    await fs.mkdir(p, recursive=True)
                except OSError:
                    pass
            whole = fs.manifest("/r", inodes=inodes)  # type: ignore[call-overload]
            pages: list[object] = []
            after: str | None = None
            while True:
                page = fs.manifest("/r", inodes=inodes, after=after, limit=limit)  # type: ignore[call-overload]
                assert len(page) <= limit
                if not page:
                    break
                pages.extend(page)
                after = page[-1][0]
            assert pages == whole
            assert [e[0] for e in whole] == sorted((e[0] for e in whole), key=lambda p: p.split("/"))
        finally:
            fs.close()

    asyncio.run(go())


async def test_a_manifest_page_resumes_after_a_path_that_went_away(fs: FileSystem) -> None:
    for d in ("/r/a/x", "/r/b/y", "/r/c"):
        await fs.mkdir(d, recursive=True)
    first = fs.manifest("/r", limit=2)
    assert [e[0] for e in first] == ["/r/a", "/r/a/x"]
    await fs.rm("/r/a", recursive=True)  # the page's last path is gone: the walk still knows where
    rest = fs.manifest("/r", after="/r/a/x", limit=10)
    assert [e[0] for e in rest] == ["/r/b", "/r/b/y", "/r/c"]
    assert fs.manifest("/r", after="/r/c", limit=10) == []
    assert fs.manifest("/r", limit=0) == []
    with pytest.raises(OSError) as outside:
        fs.manifest("/r", after="/elsewhere", limit=1)
    assert outside.value.errno == errno.EINVAL


async def test_a_manifest_page_of_a_big_directory_reads_about_one_page(fs: FileSystem) -> None:
    await fs.mkdir("/r/deep/er", recursive=True)
    fs.commit_batch({f"/r/deep/er/f{i:05}": b"" for i in range(3000)})
    before = fs.queries
    page = fs.manifest("/r", after="/r/deep/er/f01000", limit=100, inodes=True)
    assert [e.path for e in page] == [f"/r/deep/er/f{i:05}" for i in range(1001, 1101)]
    assert fs.queries - before <= 8  # the descent, one page of children, the snapshot


async def test_small_files_are_read_in_bulk_by_inode_and_the_rest_left_to_the_caller(fs: FileSystem) -> None:
    import os

    contents = {f"/d/f{i}": os.urandom(i * 997) for i in range(40)}  # 0 B .. ~38 KiB, some compressible
    contents["/d/zeros"] = bytes(100_000)
    contents["/d/big"] = os.urandom(600 * 1024)  # two chunks: not read in bulk
    fs.commit_batch(contents, mkdirs=["/d/sub"])
    entries = {e.path: e for e in fs.manifest("/d", inodes=True)}
    found = fs.read_small_files([e.ino for e in entries.values()] + [999_999])
    by_path = {path: found.get(entries[path].ino) for path in contents}
    assert by_path.pop("/d/big") is None  # more than one chunk
    assert by_path == {path: data for path, data in contents.items() if path != "/d/big"}
    assert entries["/d/sub"].ino not in found  # a directory


async def test_a_large_change_log_is_trimmed_every_sixteenth_of_its_limit(
    fs: FileSystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim steps over ``change_log_limit`` index entries: pulls of ~1,000 new directories each must
    not pay one apiece, and the log still stays near its limit."""
    fs.change_log_limit = 32_000  # a trim every 2,000 inserts
    store = fs._store
    trims = 0
    trim = store.trim_log

    def counted() -> None:
        nonlocal trims
        trims += 1
        trim()

    monkeypatch.setattr(store, "trim_log", counted)
    for i in range(40):
        fs.commit_batch({}, mkdirs=[f"/t{i}/d{a}/{b}" for a in range(10) for b in range(110)])
    assert trims == 20  # at every second batch of 1,111 entries (at 1,024 inserts: every batch)
    assert not fs.changes_since(0).complete
    rows = store.db.one("SELECT count(*) FROM changes")[0]
    assert 32_000 - 1111 <= rows <= 32_000 + 2_000 + 1111  # whole revisions go


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(st.sampled_from(["/w/a", "/w/b", "/other", "/w/d/e"]), min_size=1, max_size=25),
    skipped=st.sets(st.integers(min_value=0, max_value=30)),
    start=st.integers(min_value=0, max_value=8),
)
def test_skipped_revisions_are_left_out_however_they_lie(
    ops: list[str], skipped: set[int], start: int
) -> None:
    """``skip_revs`` reads the log by the gaps between them (a pull in pages skips its own earlier
    pages without reading them): the same changes, in the same order, as filtering the whole log."""

    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.mkdir("/w/d", recursive=True)
            for i, path in enumerate(ops):
                if i % 5 == 4:
                    if await fs.exists(path):  # a pair of rows in one revision (rm, then rename)
                        await fs.rename(path, f"{path}.{i}")
                    else:
                        await fs.write_file(path, b"")
                else:
                    await fs.write_file(path, str(i).encode())
            for root in ("/", "/w"):
                whole = fs.changes_since(start, root).changes
                expected = [(c.path, c.op, c.rev, c.source) for c in whole if c.rev not in skipped]
                got = fs.changes_since(start, root, skip_revs=sorted(skipped)).changes
                assert [(c.path, c.op, c.rev, c.source) for c in got] == expected
        finally:
            fs.close()

    asyncio.run(go())
