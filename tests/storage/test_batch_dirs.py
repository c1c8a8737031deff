"""``commit_batch`` making many directories at once (a pull of ``mkdir -p tree/d{0..9}/{0..9}/{0..9}``):
a handful of statements, with every invariant of one ``mkdir`` at a time (parents exist, modes,
mtimes, the change log, a file or link in the way)."""

from __future__ import annotations

from typing import Any

import pytest

from computer.storage import FileSystem, _batch_dirs

LEAVES = [f"/w/tree/d{a}/{b}/{c}" for a in range(10) for b in range(10) for c in range(10)]


async def test_the_leaves_of_a_tree_make_it_whole_in_a_few_statements(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    before, rev = fs.queries, fs.rev
    result = fs.commit_batch({}, mkdirs=LEAVES, modes={LEAVES[5]: 0o700}, mtimes={LEAVES[7]: 1234})
    assert fs.queries - before < 40  # was ~4,450: four per directory
    assert result.applied == sorted(LEAVES)
    rows = fs.manifest("/w/tree", inodes=True)
    assert len(rows) == 1110 and {r.kind for r in rows} == {"dir"}
    assert len({r.ino for r in rows}) == 1110  # every directory its own inode
    by_path = {r.path: r for r in rows}
    assert by_path[LEAVES[5]].mode == 0o700
    assert by_path["/w/tree/d0/0"].mode == 0o755  # a parent made on the way: the default mode
    assert by_path[LEAVES[7]].mtime == 1234
    assert by_path[LEAVES[0]].mtime > 1234
    assert [e.name for e in await fs.readdir("/w/tree/d3/4")] == [str(i) for i in range(10)]
    changes = fs.changes_since(rev, "/w").changes
    assert sorted(c.path for c in changes) == sorted(["/w/tree", *by_path])
    assert {c.op for c in changes} == {"mkdir"} and {c.rev for c in changes} == {fs.rev}
    await fs.write_file(f"{LEAVES[-1]}/f", b"x")  # the store takes new nodes after them
    assert (await fs.read_file(f"{LEAVES[-1]}/f")) == b"x"
    stats = fs.stats()
    assert stats["dirs"] == 1113 and stats["files"] == 1  # with /, /w and /w/tree


async def test_existing_directories_links_and_files_in_the_way(fs: FileSystem) -> None:
    await fs.mkdir("/w/real/old", recursive=True)
    await fs.write_file("/w/real/old/keep", b"k")
    await fs.symlink("/w/real", "/w/link")
    await fs.write_file("/w/file", b"in the way")
    result = fs.commit_batch(
        {},
        mkdirs=["/w/link/old/new/a", "/w/link/fresh/b", "/w/file/c", "/w/real/old"],
        modes={"/w/real/old": 0o711},
    )
    assert "/w/real/old" in result.applied
    assert await fs.read_file("/w/real/old/keep") == b"k"  # an existing directory is kept
    assert (await fs.stat("/w/real/old")).mode & 0o7777 == 0o711  # its mode set
    assert (await fs.stat("/w/real/old/new/a")).is_directory  # through the link
    assert (await fs.stat("/w/real/fresh/b")).is_directory
    assert (await fs.stat("/w/file")).is_directory  # the file in the way was replaced
    assert (await fs.stat("/w/file/c")).is_directory
    assert await fs.readlink("/w/link") == "/w/real"  # still the link
    paths = {c.path for c in fs.changes_since(0, "/w").changes}
    assert {"/w/real/old/new", "/w/real/old/new/a", "/w/real/fresh", "/w/real/fresh/b"} <= paths


async def test_new_directories_deep_below_existing_ones_cost_one_probe_per_ancestor(
    fs: FileSystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A live sandbox's pull of ``for i in $(seq 1500); do mkdir d && cd d; done`` comes in ticks:
    # each batch names a few new directories below hundreds that exist. Each ancestor used to be
    # walked from the root (ensure_dirs per ancestor: quadratic in the depth, 1,500 deep timed out).
    walks: list[str] = []
    real = _batch_dirs.ensure_dirs

    def counting(st: Any, p: str, *args: Any, **kwargs: Any) -> int:
        walks.append(p)
        return real(st, p, *args, **kwargs)

    monkeypatch.setattr(_batch_dirs, "ensure_dirs", counting)
    chain = "/w" + "/d" * 300
    fs.commit_batch({}, mkdirs=[chain])
    walks.clear()
    before = fs.queries
    deeper = [chain + "/d" * i for i in range(1, 21)]
    result = fs.commit_batch({}, mkdirs=deeper)
    assert result.applied == deeper
    assert walks == ["/w"]  # the top alone; every ancestor below it is one probe under its parent
    assert fs.queries - before < 400  # ~300 probes and a few statements
    assert (await fs.stat(deeper[-1])).is_directory


async def test_parents_made_for_a_batch_take_their_given_times_and_modes(fs: FileSystem) -> None:
    """A pull names only the leaves of ``mkdir -p`` and sends every new directory's time: the parents
    are made with theirs (not the batch's time, then set again), varied times in one go."""
    times = {f"/p/{i}": 1_000_000 + i for i in range(20)} | {"/p": 999, "/p/3/x": 5}
    result = fs.commit_batch({}, mkdirs=[*(f"/p/{i}" for i in range(20) if i != 3), "/p/3/x"], mtimes=times)
    # Listed as the parents of a written file are (a pull's ``mkdir -p a/b/c`` reported ``a/b/c`` only,
    # ``echo > x/y/f`` reported ``x`` and ``x/y``: a run's ``pulled`` depended on how the pull was paged).
    assert "/p" in result.applied and "/p/3" in result.applied
    for path, mtime in times.items():
        assert (await fs.stat(path)).mtime == mtime, path


async def test_a_directory_time_alone_conflicts_with_nothing_below_it(fs: FileSystem) -> None:
    fs.commit_batch({"/t/a": b"1"}, mkdirs=["/t"])
    base = fs.rev
    fs.commit_batch({}, mtimes={"/t": 42})  # another run's pull: the directory's time alone
    assert [(c.path, c.op) for c in fs.changes_since(base).changes] == [("/t", "touch")]
    result = fs.commit_batch({"/t/a": b"2"}, base_rev=base)
    assert result.applied == ["/t/a"] and result.skipped == []
    fs.commit_batch({}, mtimes={"/t": 43}, modes={"/t": 0o700})  # with its mode: a change as before
    result = fs.commit_batch({"/t/a": b"3"}, base_rev=base + 2)
    assert result.skipped == ["/t/a"]
