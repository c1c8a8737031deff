"""The rules of followed renames (``computer.runtime._moves``) and of a push's steps
(``computer.runtime._push_ops``), on change logs made by a real store and on hand-made pull pages."""

from __future__ import annotations

import os
from pathlib import Path

from computer.runtime._backend import MirrorDir, MirrorFile, MirrorSymlink, SyncPull, SyncPush
from computer.runtime._mirror import Mirror
from computer.runtime._mirror_base import entry_of
from computer.runtime._moves import Move, follow, followable, translate
from computer.runtime._push_ops import Op, below_tops, ops_below
from computer.storage import FileSystem
from computer.storage.types import Change

from ._planted import host_with, plant_link

W = "/w"


async def _tree(fs: FileSystem, *files: str) -> int:
    for path in files:
        await fs.mkdir(path.rpartition("/")[0] or "/", recursive=True)
        await fs.write_file(path, path.encode())
    return fs.rev


def _moves(
    fs: FileSystem, rev: int, lacking: tuple[str, ...] = ()
) -> tuple[list[tuple[str, str]], list[str]]:
    """The followed renames since ``rev`` and the paths a push still sends as changes (entries not
    followed; a directory's time alone, ``"touch"``, is no change of the tree: left out)."""
    changes = fs.changes_since(rev, W).changes
    moves, followed = followable(changes, W, lacking)
    sent = [c.path for i, c in enumerate(changes) if i not in followed and c.op != "touch"]
    return [(m.src, m.dst) for m in moves], sent


async def test_a_rename_of_what_the_mirror_holds_is_followed_and_leaves_nothing_to_send(
    fs: FileSystem,
) -> None:
    rev = await _tree(fs, "/w/a", "/w/d/x")
    await fs.rename("/w/a", "/w/b")
    await fs.rename("/w/d", "/w/e")
    assert _moves(fs, rev) == ([("/w/a", "/w/b"), ("/w/d", "/w/e")], [])


async def test_renames_in_a_chain_are_all_followed(fs: FileSystem) -> None:
    rev = await _tree(fs, "/w/a", "/w/d/x")
    await fs.rename("/w/a", "/w/b")
    await fs.rename("/w/b", "/w/c")
    await fs.rename("/w/d", "/w/e")
    await fs.rename("/w/e/x", "/w/y")  # out of a directory a followed rename moved
    assert _moves(fs, rev)[0] == [("/w/a", "/w/b"), ("/w/b", "/w/c"), ("/w/d", "/w/e"), ("/w/e/x", "/w/y")]
    assert translate("/w/d/x", [Move("/w/d", "/w/e", 1), Move("/w/e/x", "/w/y", 2)]) == ("/w/y", [0, 1])
    assert translate("/w/d/z", [Move("/w/d", "/w/e", 1), Move("/w/e/x", "/w/y", 2)]) == ("/w/e/z", [0])
    assert translate("/w/q", [Move("/w/d", "/w/e", 1)]) == ("/w/q", [])


async def test_a_rename_of_a_path_changed_before_it_is_sent_as_before(fs: FileSystem) -> None:
    rev = await _tree(fs, "/w/a", "/w/d/x")
    await fs.write_file("/w/a", b"new")  # the mirror does not hold this version
    await fs.rename("/w/a", "/w/b")
    await fs.write_file("/w/d/x", b"new")  # a change below a directory renamed after it
    await fs.rename("/w/d", "/w/e")
    moves, paths = _moves(fs, rev)
    assert moves == []
    assert paths == ["/w/a", "/w/a", "/w/b", "/w/d/x", "/w/d", "/w/e"]


async def test_a_rename_of_a_path_the_mirror_lacks_is_not_followed(fs: FileSystem) -> None:
    rev = await _tree(fs, "/w/d/x", "/w/f")
    await fs.rename("/w/d", "/w/e")
    await fs.rename("/w/f", "/w/g")
    assert _moves(fs, rev, lacking=("/w/d/x",))[0] == [("/w/f", "/w/g")]


async def test_renames_across_the_root_or_of_it_are_not_followed(fs: FileSystem) -> None:
    rev = await _tree(fs, "/w/a", "/out")
    await fs.rename("/out", "/w/in")
    await fs.rename("/w/a", "/gone")
    moves, paths = _moves(fs, rev)
    assert moves == []
    assert paths == ["/w/in", "/w/a"]
    await fs.rename("/w", "/v")
    changes = fs.changes_since(fs.rev - 1, "/w").changes
    assert followable(changes, W)[0] == []


async def test_earlier_changes_at_a_followed_renames_new_name_are_superseded(fs: FileSystem) -> None:
    rev = await _tree(fs, "/w/a", "/w/b")
    await fs.write_file("/w/b", b"replaced by the rename below")
    await fs.write_file("/w/c", b"not below the new name")
    await fs.rename("/w/a", "/w/b", overwrite=True)
    assert _moves(fs, rev) == ([("/w/a", "/w/b")], ["/w/c"])


def _change(path: str, op: str, rev: int, source: str | None = None) -> Change:
    return Change(path=path, op=op, rev=rev, source=source)


def test_a_live_pull_takes_what_the_program_changed_below_a_renamed_path_to_the_new_name() -> None:
    changes = [
        _change("/w/d", "rm", 5),
        _change("/w/e", "rename", 5, "/w/d"),
        _change("/w/e/late", "write", 6),  # the workspace wrote this name after the rename
    ]
    page = SyncPull(
        root=W,
        files=[
            MirrorFile("/w/d/log", b"appended"),
            MirrorFile("/w/d/late", b"the program's"),
            MirrorFile("/w/d/name2", b"", link="/w/d/log"),
            MirrorFile("/w/other", b"not moved"),
        ],
        dirs=[MirrorDir("/w/d/sub")],
        symlinks=[MirrorSymlink("/w/d/link", "log")],
        deleted=["/w/d/old", "/w/d"],
    )
    followed = follow(page, changes, W)
    assert followed.moves == [Move("/w/d", "/w/e", 5)]
    assert [(f.path, f.link) for f in followed.pull.files] == [
        ("/w/e/log", None),
        ("/w/e/name2", "/w/e/log"),
        ("/w/other", None),
    ]
    assert [d.path for d in followed.pull.dirs] == ["/w/e/sub"]
    assert [s.path for s in followed.pull.symlinks] == ["/w/e/link"]
    # a removal of the renamed path itself stays as it is (the ordinary conflict rule refuses it)
    assert followed.pull.deleted == ["/w/e/old", "/w/d"]
    assert followed.refused == ["/w/e/late"]
    assert followed.translated == {"/w/e/log", "/w/e/name2", "/w/e/sub", "/w/e/link", "/w/e/old"}


def test_a_translated_path_another_followed_rename_replaced_is_refused() -> None:
    changes = [
        _change("/w/a", "rm", 5),
        _change("/w/b", "rename", 5, "/w/a"),
        _change("/w/c", "rm", 6),
        _change("/w/b", "rename", 6, "/w/c"),  # the workspace then renamed another file over it
    ]
    followed = follow(SyncPull(root=W, files=[MirrorFile("/w/a", b"appended")]), changes, W)
    assert [m.src for m in followed.moves] == ["/w/a", "/w/c"]
    assert followed.pull.files == []
    assert followed.refused == ["/w/b"]


def test_a_page_with_no_followed_rename_is_left_as_it_is() -> None:
    page = SyncPull(root=W, files=[MirrorFile("/w/a", b"x")])
    followed = follow(page, [_change("/w/a", "write", 3)], W)
    assert followed.pull is page and followed.moves == [] and followed.refused == []


def test_changes_below_a_directory_only_made_are_sent_alone_a_replaced_one_whole() -> None:
    listing = [
        Op("/w/n/kept", "file", 3),  # moved in by a followed rename: not sent again
        Op("/w/n/new", "file", 1),
        Op("/w/n/r", "dir", mode=0o755),
        Op("/w/n/r/x", "file", 2),
        Op("/w/n/r/y/z", "file", 2),
        Op("/w/n/s", "dir", mode=0o700),
        Op("/w/n/s/t", "file", 1),
    ]
    paths = ["/w/n/new", "/w/n/gone", "/w/n/gone/below", "/w/n/r", "/w/n/r/x", "/w/n/s", "/w/n"]
    ops = ops_below(listing, "/w/n", paths, whole={"/w/n/r"})
    assert [(op.path, op.kind) for op in ops] == [
        ("/w/n/gone", "gone"),
        ("/w/n/new", "file"),
        ("/w/n/r", "tree"),
        ("/w/n/r/x", "file"),
        ("/w/n/r/y/z", "file"),
        ("/w/n/s", "dir"),
    ]


def _mirror(tmp_path: Path) -> Mirror:
    mirror = Mirror(tmp_path / "m", "/w")
    files = [MirrorFile("/w/a", b"a"), MirrorFile("/w/d/x", b"x"), MirrorFile("/w/b", b"b")]
    mirror.apply(SyncPush(3, "/w", True, files, [MirrorDir("/w/d"), MirrorDir("/w/sub")]))
    return mirror


def test_the_mirror_moves_its_node_and_its_state_with_it(tmp_path: Path) -> None:
    mirror = _mirror(tmp_path)
    inode = os.lstat(mirror.directory / "d/x").st_ino
    assert mirror.move("/w/d", "/w/n/e")  # a parent the same push makes is made first
    assert mirror.move("/w/a", "/w/b")  # over an existing file
    assert os.lstat(mirror.directory / "n/e/x").st_ino == inode
    assert sorted(mirror.state) == ["b", "n", "n/e", "n/e/x", "sub"]
    assert mirror.state["b"] == entry_of(os.lstat(mirror.directory / "b"))
    assert (mirror.directory / "b").read_bytes() == b"a"
    assert mirror.scan() == mirror.state  # nothing for a pull to find


def test_the_mirror_does_not_follow_what_it_does_not_hold_as_synced(tmp_path: Path) -> None:
    mirror = _mirror(tmp_path)
    (mirror.directory / "a").write_bytes(b"changed by a program")
    assert not mirror.move("/w/a", "/w/c")  # not what it synced
    assert not mirror.move("/w/nothing", "/w/c")
    assert not mirror.move("/w/d", "/w/d/inside")  # into itself
    assert not mirror.move("/w", "/w2") and not mirror.move("/w/b", "/elsewhere")
    (mirror.directory / "sub/full").write_bytes(b"")
    mirror.state["sub/full"] = entry_of(os.lstat(mirror.directory / "sub/full"))
    assert not mirror.move("/w/d", "/w/sub")  # a non-empty directory in the way
    mirror.refetch.add("/w/d/x")
    assert not mirror.move("/w/d", "/w/e")  # it holds something to fetch again below it
    assert sorted(os.listdir(mirror.directory)) == ["a", "b", "d", "sub"]


def test_a_link_a_program_planted_on_the_way_is_never_followed(tmp_path: Path) -> None:
    """A program replaced ``sub`` (a directory the mirror synced) by a link to a host directory: the
    rename into it is not followed (and the push's fallback removes the link, fetching the new name
    again), so nothing is ever moved onto the host."""
    host = tmp_path / "host"
    host.mkdir()
    mirror = _mirror(tmp_path)
    (mirror.directory / "sub").rmdir()
    (mirror.directory / "sub").symlink_to(host)
    assert not mirror.move("/w/a", "/w/sub/a")
    (mirror.directory / "d").rename(mirror.directory / "d-real")
    (mirror.directory / "d").symlink_to(host)
    assert not mirror.move("/w/d/x", "/w/y")  # nor through a link on the old name's way
    mirror.apply(SyncPush(4, "/w", False, moves=[("/w/a", "/w/sub/a")]))
    assert os.listdir(host) == []
    assert "/w/sub/a" in mirror.refetch and not (mirror.directory / "a").exists()


def test_a_removal_never_goes_through_a_link_a_program_planted(tmp_path: Path) -> None:
    """The push's removals and the fallback of a rename it cannot follow resolve the parents without
    following a link: a program's ``d -> /host/dir`` never makes the host lose a file."""
    host = host_with(tmp_path, "x")
    mirror = _mirror(tmp_path)
    plant_link(mirror.directory, "d", host)
    mirror.apply(SyncPush(4, "/w", False, deleted=["/w/d/x"], moves=[("/w/d/x", "/w/z")]))
    assert (host / "x").read_bytes() == b"the host's"
    (mirror.directory / "sub/gone").mkdir()
    (mirror.directory / "sub/gone/f").write_bytes(b"")
    mirror.apply(SyncPush(5, "/w", False, deleted=["/w/sub/gone", "/w/b"]))
    assert (
        sorted(os.listdir(mirror.directory)) == ["a", "d", "sub"]
        and os.listdir(mirror.directory / "sub") == []
    )


def test_changed_paths_are_grouped_under_their_outermost_path_by_their_ancestors() -> None:
    tops = ["/w/a", "/w/n"]
    paths = ["/w/a", "/w/n/x", "/w/n/x/y", "/w/a/b", "/w/other/z"]
    assert below_tops(tops, paths) == {"/w/a": ["/w/a/b"], "/w/n": ["/w/n/x", "/w/n/x/y"]}


async def test_a_push_carries_earlier_changes_below_a_renamed_directory_to_its_new_name(
    fs: FileSystem,
) -> None:
    """``write d/x``, ``rm d/y``, ``mkdir d/s``, then ``mv d e``: a push follows the rename and sends
    those changes at ``e/`` (:func:`carried`); the plain rule (a live pull's) still does not follow."""
    from computer.runtime._moves import carried

    rev = await _tree(fs, "/w/d/x", "/w/d/y", "/w/f")
    await fs.write_file("/w/d/x", b"new")
    await fs.rm("/w/d/y")
    await fs.mkdir("/w/d/s")
    await fs.rename("/w/d", "/w/e")
    await fs.write_file("/w/f", b"elsewhere")
    changes = fs.changes_since(rev, W).changes
    assert followable(changes, W)[0] == []
    moves, followed, log = carried(changes, W)
    assert [(m.src, m.dst) for m in moves] == [("/w/d", "/w/e")]
    assert [(c.path, c.op) for i, c in enumerate(log) if i not in followed] == [
        ("/w/e/x", "write"),
        ("/w/e/y", "rm"),
        ("/w/e", "touch"),  # the directory's times go with it too (not fetched again: no ``carried``)
        ("/w/e/s", "mkdir"),
        ("/w/e", "touch"),
        ("/w", "touch"),  # the rename's parents (one here), after its pair
        ("/w/f", "write"),
    ]
    assert moves[0].carried == ("/w/e/x", "/w/e/y", "/w/e/s")
    # Not carried: a change at or above the old name, a link below it, or a path the mirror lacks.
    rev = fs.rev
    await fs.write_file("/w/e/x", b"again")
    await fs.link("/w/e/x", "/w/e/l")
    await fs.rename("/w/e", "/w/g")
    assert carried(fs.changes_since(rev, W).changes, W)[0] == []
    rev = fs.rev
    await fs.write_file("/w/g/x", b"once more")
    await fs.rename("/w/g", "/w/h")
    assert carried(fs.changes_since(rev, W).changes, W, ["/w/g/l"])[0] == []
    assert [(m.src, m.dst) for m in carried(fs.changes_since(rev, W).changes, W)[0]] == [("/w/g", "/w/h")]
