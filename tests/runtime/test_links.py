"""Names the workspace links (``fs.link``) as a push sends them (``_push_ops.link_sources``, on change
logs made by a real store) and as a mirror makes them (a link of the file it holds, never through a
link a program planted)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from computer.runtime._backend import MirrorDir, MirrorFile, SyncLimits, SyncPush
from computer.runtime._context import LocalExecContext
from computer.runtime._entry import SIZE
from computer.runtime._mirror import Mirror
from computer.runtime._mirror_base import entry_of
from computer.runtime._pull_rules import CONFLICT, LINKED, refused_files
from computer.runtime._push_ops import link_sources, plan_changes
from computer.storage import FileSystem

from ._planted import host_with, plant_link

W = "/w"


async def _sources(fs: FileSystem, rev: int, refetch: tuple[str, ...] = ()) -> dict[str, tuple[str, bool]]:
    return link_sources(fs.changes_since(rev, W).changes, refetch)


async def test_a_new_name_of_a_held_file_is_linked_to_it(fs: FileSystem) -> None:
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/a", b"a")
    rev = fs.rev
    await fs.link("/w/a", "/w/d/e")
    await fs.link("/w/d/e", "/w/f")  # from a name linked in the same push: its source
    assert await _sources(fs, rev) == {"/w/d/e": ("/w/a", False), "/w/f": ("/w/a", False)}
    await fs.write_file("/w/f", b"b")  # written after: linked, then written into
    assert (await _sources(fs, rev))["/w/f"] == ("/w/a", True)
    await fs.rm("/w/d/e")  # removed after: not a link any more
    assert "/w/d/e" not in await _sources(fs, rev)


async def test_a_source_the_mirror_may_not_hold_as_synced_is_not_used(fs: FileSystem) -> None:
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/d/a", b"a")
    rev = fs.rev
    await fs.link("/w/d/a", "/w/e")
    assert await _sources(fs, rev, ("/w/d",)) == {}  # the mirror fetches it again
    await fs.write_file("/w/d/a", b"changed")  # changed after the mirror's revision
    assert await _sources(fs, rev) == {}
    other = fs.rev
    await fs.link("/w/d/a", "/w/g")
    await fs.rename("/w/d", "/w/d2")
    assert await _sources(fs, other) == {}  # a change above it


async def _planned(fs: FileSystem, rev: int) -> dict[str, tuple[str, bool]]:
    plan = plan_changes(fs.changes_since(rev, W).changes, W, [])
    assert plan is not None
    return plan.linked


async def test_a_source_a_followed_rename_moves_after_the_link_is_linked_from_its_new_name(
    fs: FileSystem,
) -> None:
    """The mirror follows the renames before it links: the source is named as it is by then. Before:
    by its old name, gone then, so the new name came as a copy (s49 finding 1)."""
    await fs.mkdir("/w/d", recursive=True)
    for name in ("a", "b", "h", "d/a", "x"):
        await fs.write_file(f"/w/{name}", name.encode())
    rev = fs.rev
    await fs.link("/w/a", "/w/g")
    await fs.rename("/w/a", "/w/h", overwrite=True)  # over a file the mirror holds
    await fs.link("/w/d/a", "/w/k")
    await fs.rename("/w/d", "/w/e")  # the source's directory
    await fs.link("/w/b", "/w/c")
    await fs.rename("/w/b", "/w/m")
    await fs.link("/w/m", "/w/n")  # linked again under the new name, renamed again
    await fs.rename("/w/m", "/w/p")
    assert await _planned(fs, rev) == {
        "/w/g": ("/w/h", False),
        "/w/k": ("/w/e/a", False),
        "/w/c": ("/w/p", False),
        "/w/n": ("/w/p", False),
    }
    later = fs.rev
    await fs.link("/w/h", "/w/q")
    await fs.rename("/w/x", "/w/h", overwrite=True)  # another file renamed onto the source
    assert await _planned(fs, later) == {}  # q is the only name of the file: sent whole


def test_the_names_of_one_file_on_a_pull_page_are_refused_together() -> None:
    """A page sends one name of a hard-linked file with its content and the others as links of it:
    one name refused (the workspace changed it) refuses the others (s49 finding 3), whichever it is,
    also when the content went on an earlier page (the link names it)."""
    page = [
        MirrorFile("/w/a", b"x"),
        MirrorFile("/w/b", b"", link="/w/a"),
        MirrorFile("/w/c", b"", link="/w/a"),
        MirrorFile("/w/d", b"y"),
        MirrorFile("/w/e", b"", link="/w/gone"),  # its content on an earlier page
    ]

    def conflicts(*paths: str) -> dict[str, str]:
        return refused_files(page, lambda path: CONFLICT if path in paths else None)

    assert conflicts() == {}
    assert conflicts("/w/d") == {"/w/d": CONFLICT}
    assert conflicts("/w/b") == {"/w/a": LINKED, "/w/b": CONFLICT, "/w/c": LINKED}
    assert conflicts("/w/a") == {"/w/a": CONFLICT, "/w/b": LINKED, "/w/c": LINKED}
    assert conflicts("/w/gone") == {"/w/gone": CONFLICT, "/w/e": LINKED}


def _mirror(tmp_path: Path) -> Mirror:
    mirror = Mirror(tmp_path / "m", W)
    mirror.apply(
        SyncPush(3, W, True, [MirrorFile("/w/d/a", b"a"), MirrorFile("/w/b", b"b")], [MirrorDir("/w/d")])
    )
    return mirror


def test_the_mirror_links_the_file_it_holds_and_every_name_takes_in_its_ctime(tmp_path: Path) -> None:
    mirror = _mirror(tmp_path)
    inode = os.lstat(mirror.directory / "d/a").st_ino
    mirror.apply(SyncPush(4, W, False, [MirrorFile("/w/e", b"", link="/w/d/a")]))
    mirror.apply(SyncPush(5, W, False, [MirrorFile("/w/f", b"", link="/w/e")]))
    assert {os.lstat(mirror.directory / n).st_ino for n in ("d/a", "e", "f")} == {inode}
    assert mirror.scan() == mirror.state  # nothing for a pull to find (three names, one ctime)
    assert not mirror.refetch


def test_a_link_a_program_planted_on_the_way_to_the_held_file_is_never_followed(tmp_path: Path) -> None:
    """A program replaced ``d`` by a link to a host directory holding an ``a``: the new name is not a
    link of the host's file; it is fetched again whole (one more round of the push)."""
    host = host_with(tmp_path, "a")
    mirror = _mirror(tmp_path)
    plant_link(mirror.directory, "d", host)
    mirror.apply(SyncPush(4, W, False, [MirrorFile("/w/e", b"", link="/w/d/a")]))
    assert not (mirror.directory / "e").exists() and os.lstat(host / "a").st_nlink == 1
    assert mirror.refetch == {"/w/e"}
    (mirror.directory / "b").unlink()
    (mirror.directory / "b").symlink_to(host / "a")  # the held name itself a link now
    mirror.apply(SyncPush(5, W, False, [MirrorFile("/w/g", b"", link="/w/b")]))
    assert not (mirror.directory / "g").exists() and mirror.refetch == {"/w/e", "/w/g"}
    assert entry_of(os.lstat(host / "a"))[SIZE] == len(b"the host's")


async def test_a_name_the_mirror_dropped_comes_as_a_new_file_not_written_into_the_one_it_holds(
    fs: FileSystem, tmp_path: Path
) -> None:
    """A workspace rename onto ``d/a`` (a hard link of ``b``) the mirror cannot follow (it does not hold
    the old name): the fallback removes what it held at ``d/a`` too, so the new ``d/a`` is fetched whole
    as a new file and ``b`` keeps its bytes. Before: ``d/a`` stayed, and the refetch, sent as a write of
    the same file, went into ``b`` too (found by the rename machine, randomized). A conflict's refetch
    keeps its file (``test_workspace_writes``: a program appending to it goes on after the rewrite)."""
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/d/a", b"a")
    await fs.link("/w/d/a", "/w/b")
    await fs.write_file("/w/e", b"renamed over d/a")
    mirror = Mirror(tmp_path / "m", W)  # holds d/a and b, not e
    mirror.apply(
        SyncPush(fs.rev, W, True, [MirrorFile("/w/d/a", b"a"), MirrorFile("/w/b", b"", link="/w/d/a")])
    )
    await fs.rename("/w/e", "/w/d/a", overwrite=True)
    rev = fs.rev
    mirror.apply(SyncPush(rev, W, False, moves=[("/w/e", "/w/d/a")]))  # not followed: e is not held
    # b too: the workspace may have written d/a before the rename replaced it (s50/h7)
    assert mirror.refetch == {"/w/d/a", "/w/b"} and not (mirror.directory / "d/a").exists()
    push = await LocalExecContext(SimpleNamespace(fs=fs, id="w")).sync_push(
        rev, W, SyncLimits(refetch=tuple(mirror.refetch))
    )
    assert [f.path for f in push.files] == ["/w/b", "/w/d/a"]
    mirror.apply(push)
    assert (mirror.directory / "d/a").read_bytes() == b"renamed over d/a"
    assert (mirror.directory / "b").read_bytes() == b"a" and os.lstat(mirror.directory / "b").st_nlink == 1
    assert mirror.state["b"] == entry_of(os.lstat(mirror.directory / "b"))  # read again: its ctime changed
