"""``Lifts``: what the sync lifts in a mirror its program locked, and how it is put back.

These run as any user: a lift is decided by the modes it finds, not by an ``EACCES`` (the end-to-end
cases without ``CAP_DAC_OVERRIDE`` are ``tests/fidelity/test_locked_modes.py``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from computer.runtime import MirrorDir, MirrorFile, SyncPush
from computer.runtime._lifts import Lifts, open_top
from computer.runtime._mirror import Mirror
from computer.runtime._mirror_base import LOCKED_OUT


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_chain_of_locked_directories_is_lifted_top_down_and_put_back_deepest_first(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("x")
    os.chmod(tmp_path / "d" / "e" / "f", 0o000)
    os.chmod(tmp_path / "d" / "e", 0o100)
    os.chmod(tmp_path / "d", 0o500)
    lifts = Lifts(active=True)
    os.chmod(tmp_path, 0o500)  # the top too: lifted and put back like the rest
    assert lifts.lift(tmp_path, "d/e/f", itself=False)
    assert (_mode(tmp_path / "d"), _mode(tmp_path / "d" / "e"), _mode(tmp_path / "d" / "e" / "f")) == (
        0o700,
        0o700,
        0,
    )
    assert lifts.lift(tmp_path, "d/e/f")  # now the file too
    assert _mode(tmp_path / "d" / "e" / "f") == 0o600
    assert not lifts.lift(tmp_path, "d/e/f")  # nothing more to lift
    assert lifts.locked == {"": 0o500, "d": 0o500, "d/e": 0o100, "d/e/f": 0}
    restored = lifts.restore(tmp_path)
    assert set(restored) == {"", "d", "d/e", "d/e/f"}
    assert _mode(tmp_path) == 0o500
    os.chmod(tmp_path, 0o700)
    assert stat.S_IMODE(restored["d/e/f"].st_mode) == 0  # the lstat after: the ctime the state keeps
    assert (_mode(tmp_path / "d"), _mode(tmp_path / "d" / "e"), _mode(tmp_path / "d" / "e" / "f")) == (
        0o500,
        0o100,
        0,
    )
    assert lifts.lifted == set()
    assert lifts.locked == {"": 0o500, "d": 0o500, "d/e": 0o100, "d/e/f": 0}  # known: a push lifts them again


def test_a_link_a_program_planted_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    os.chmod(outside / "secret", 0o000)
    os.chmod(outside, 0o500)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a").symlink_to(outside)
    lifts = Lifts(active=True)
    assert not lifts.lift(mirror, "a/secret/x")
    assert not lifts.lift(mirror, "a")
    assert (_mode(outside), _mode(outside / "secret")) == (0o500, 0)
    assert lifts.locked == {} and lifts.lifted == set()
    os.chmod(outside, 0o700)


def test_a_file_below_a_locked_directory_and_files_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    os.chmod(tmp_path / "d" / "f", 0o400)
    os.chmod(tmp_path / "d", 0o000)
    lifts = Lifts(active=True)
    lifts.locked = {"d": 0, "d/f": 0o400}
    lifts.lift_all(tmp_path)  # directories only (a new watch reads them; files would move their ctime)
    assert (_mode(tmp_path / "d"), _mode(tmp_path / "d" / "f")) == (0o700, 0o400)
    lifts.lift_locked(tmp_path, ["d/f"])  # a push writing it: the file too
    assert _mode(tmp_path / "d" / "f") == 0o600
    restored = lifts.restore(tmp_path)  # the file first: below a directory locked again, no lstat reaches it
    assert {rel: stat.S_IMODE(st.st_mode) for rel, st in restored.items()} == {"d": 0, "d/f": 0o400}
    assert _mode(tmp_path / "d") == 0


def test_what_a_pull_notes_and_a_push_gives() -> None:
    lifts = Lifts(active=True)
    lifts.note("d", "d", 0o500)
    lifts.note("f", "f", 0o444)
    lifts.note("g", "f", 0o644)
    lifts.note("l", "l", 0o777)
    assert lifts.locked == {"d": 0o500, "f": 0o444}
    lifts.note("d", "d", 0o755)  # the program opened it up again
    assert lifts.locked == {"f": 0o444}
    assert lifts.given("n", "d", 0o555) == 0o755  # lifted until the sync ends
    assert lifts.locked["n"] == 0o555 and "n" in lifts.lifted
    assert lifts.given("n", "d", 0o750) == 0o750  # the workspace opened it: nothing to put back
    assert "n" not in lifts.locked and "n" not in lifts.lifted
    lifts.forget("f")
    assert lifts.locked == {}


def test_the_top_directory_gets_its_owner_search_bit_back_for_good(tmp_path: Path) -> None:
    top = tmp_path / "m"
    top.mkdir()
    os.chmod(top, 0o050)
    assert open_top(top)
    assert _mode(top) == 0o150
    assert not open_top(top)
    assert not open_top(tmp_path / "missing")


def test_a_path_below_a_directory_that_cannot_be_lifted_is_kept_not_taken_for_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a locked directory cannot be lifted (its files are not this process's own), what lies
    below it is kept as the mirror last saw it instead of being taken for removed (and deleted from
    the workspace)."""
    mirror = Mirror(tmp_path / "m", "/workspace")
    mirror.apply(
        SyncPush(
            5,
            "/workspace",
            True,
            [MirrorFile("/workspace/d/f", b"hi\n")],
            [MirrorDir("/workspace/d"), MirrorDir("/workspace/d/e")],
        )
    )
    mirror.arm()
    mirror.lifts = Lifts(active=False)
    (tmp_path / "m" / "d" / "f").write_bytes(b"hi\nmore\n")
    os.chmod(tmp_path / "m" / "d" / "e", 0o700)  # an event on a directory below it too
    lstat = os.lstat

    def denied(path: str | os.PathLike[str], *args: object, **kwargs: object) -> os.stat_result:
        if os.fspath(path).endswith(("/d/f", "/d/e")):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", denied)
    plan, now = mirror.plan()
    monkeypatch.setattr(os, "lstat", lstat)
    assert plan.deleted == [] and [rel for rel, _ in plan.files] == []
    assert now["d/f"] == mirror.state["d/f"] and now["d/e"] == mirror.state["d/e"]
    # ... and listed, with its reason, in the run's ``skipped`` (the mirror keeps it).
    assert plan.unsyncable == dict.fromkeys(["/workspace/d/e", "/workspace/d/f"], LOCKED_OUT)
