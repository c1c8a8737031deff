"""What tells a store from copies of its file and from an earlier copy restored over it (``_lineage``):
``instance`` (stable across reopens of one file, new for a copy) and the sessions ``continues`` checks."""

from __future__ import annotations

import shutil
from pathlib import Path

from computer.storage import FileSystem
from computer.storage._lineage import SESSIONS_KEPT


async def _write(fs: FileSystem, name: str) -> None:
    await fs.write_file(f"/{name}", name.encode())


def test_a_reopened_file_keeps_its_instance_and_a_copy_gets_its_own(tmp_path: Path) -> None:
    a_path, b_path = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    a = FileSystem.open(a_path)
    first, workspace_id = a.instance, a.id
    a.close()
    shutil.copyfile(a_path, b_path)
    b = FileSystem.open(b_path)
    a = FileSystem.open(a_path)
    try:
        assert a.id == b.id == workspace_id  # the id is the file's
        assert a.instance == first
        assert b.instance != first and b.instance.startswith(workspace_id)
        copy = b.instance
    finally:
        a.close()
        b.close()
    b = FileSystem.open(b_path)
    reader = FileSystem.open(a_path, readonly=True)
    try:
        assert b.instance == copy  # the copy's own, from its first open on
        assert reader.instance == first and reader.session == ""
    finally:
        b.close()
        reader.close()


def test_in_memory_stores_are_all_different() -> None:
    one, two = FileSystem.open(None), FileSystem.open(None)
    try:
        assert one.instance != two.instance and one.session != two.session
    finally:
        one.close()
        two.close()


async def test_a_mirror_goes_on_across_reopens_but_not_into_a_restored_copy(tmp_path: Path) -> None:
    path, backup = str(tmp_path / "ws.sqlite"), str(tmp_path / "backup.sqlite")
    fs = FileSystem.open(path)
    await _write(fs, "a")
    early = (fs.session, fs.rev)
    assert fs.continues(*early)
    assert not fs.continues(early[0], fs.rev + 1)  # not reached yet
    assert not fs.continues("another", early[1])
    assert fs.continues(None, fs.rev) and not fs.continues(None, fs.rev + 1)  # no session: the rev only
    fs.close()
    shutil.copyfile(path, backup)
    fs = FileSystem.open(path)
    assert fs.continues(*early)  # a reopen of the same file: its history goes on
    await _write(fs, "b")
    later = (fs.session, fs.rev)
    fs.close()
    shutil.copyfile(backup, path)  # restored in place (the same inode)
    fs = FileSystem.open(path)
    try:
        assert fs.continues(*early)
        assert not fs.continues(*later)  # the later history is not this store's
        for name in "cdefg":  # nor once the revision is past it again
            await _write(fs, name)
        assert fs.rev > later[1]
        assert not fs.continues(*later)
        assert not fs.continues(early[0], early[1] + 1)  # the early session ended at early[1]
    finally:
        fs.close()


def test_sessions_kept_are_bounded(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    first = (fs.session, fs.rev)
    fs.close()
    for _ in range(SESSIONS_KEPT):
        FileSystem.open(path).close()
    fs = FileSystem.open(path)
    try:
        assert not fs.continues(*first)  # forgotten: a mirror that old is pushed in full
        assert fs.continues(fs.session, fs.rev)
    finally:
        fs.close()
