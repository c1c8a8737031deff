"""What a process leaves on the host is removed (issue 17, item 6): trees of any depth, never through a
link, read-only directories included; scratch directories and cgroups of dead processes, never of
live ones; a process's own at release (exit, a Ray worker's shutdown)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from computer.runtime._bwrap import Bind
from computer.runtime._cgroups import CGROUP_PARENT, CGROUP_ROOT
from computer.runtime._lifetime import process_tag, start_time
from computer.runtime._sandbox import Sandbox
from computer.runtime._scratch import process_scratch, reap_dead, remove_tree

DEPTH = 5_000


@pytest.fixture
def base() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="computer-test-base-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _deep_tree(top: Path, depth: int) -> None:
    """``top/d/d/.../d/f`` ``depth`` levels deep (its paths are far beyond PATH_MAX: made by descriptor)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)


def test_a_tree_5000_deep_is_removed_where_rmtree_gives_up(base: Path) -> None:
    top = base / "deep"
    _deep_tree(top, DEPTH)
    with pytest.raises((RecursionError, OSError)):
        shutil.rmtree(top)
    assert top.exists()
    remove_tree(top)
    assert not top.exists()


def test_removal_never_follows_a_link(base: Path) -> None:
    outside = base / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    top = base / "tree"
    (top / "a").mkdir(parents=True)
    (top / "a" / "link").symlink_to(outside)
    (top / "link-to-file").symlink_to(outside / "keep")
    remove_tree(top)
    assert not top.exists() and (outside / "keep").read_text() == "x"
    link = base / "top-link"
    link.symlink_to(outside)
    remove_tree(link)  # the link goes, not what it points to
    assert not link.is_symlink() and (outside / "keep").exists()


def test_read_only_directories_are_removed_by_their_unprivileged_owner(base: Path) -> None:
    """As root read-only directories stop nothing; run the removal as their unprivileged owner."""
    top = base / "ro"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "a" / "g").write_text("y")
    uid = 2_000_000_001 if os.geteuid() == 0 else os.geteuid()
    for path in [top, *top.rglob("*")]:
        if os.geteuid() == 0:
            os.lchown(path, uid, uid)
    for path in sorted([top, *top.rglob("*")], key=lambda p: -len(p.parts)):
        if path.is_dir():
            path.chmod(0o500)
    os.chmod(base, 0o777)
    prefix = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if os.geteuid() == 0 else []
    code = f"from computer.runtime._scratch import remove_tree; remove_tree({str(top)!r})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert not top.exists()


def test_a_missing_path_is_no_error(base: Path) -> None:
    remove_tree(base / "never-made")


def _ended_tag() -> tuple[int, int]:
    """(pid, start time) of a process that has ended."""
    child = subprocess.Popen(["sleep", "0"])
    start = start_time(child.pid)
    child.wait()
    assert start is not None
    return child.pid, start


def test_reap_dead_removes_dead_processes_directories_and_keeps_live_ones(base: Path) -> None:
    live = subprocess.Popen(["sleep", "60"])
    try:
        live_start = start_time(live.pid)
        dead_pid, dead_start = _ended_tag()
        me = process_tag()
        kept = [f"computer-{live.pid}-{live_start}", f"computer-{me}", f"computer-{me}-2000000000"]
        kept += [f"computer-shell-{live.pid}-abcdef", "unrelated", f"computer-etc-0-{live.pid}-x1y2"]
        pid, start = (int(x) for x in me.split("-"))
        gone = [f"computer-{dead_pid}-{dead_start}", f"computer-{dead_pid}-{dead_start}-2000000000"]
        gone += [f"computer-{pid}-{start + 1}"]  # this pid, but another process (pid reused)
        gone += [f"computer-shell-{dead_pid}-abcdef", f"computer-etc-0-{dead_pid}-x1y2"]
        for name in kept + gone:
            (base / name / "sub").mkdir(parents=True)
            (base / name / "sub" / "file").write_text("x")
        removed = reap_dead(base)
        assert sorted(p.name for p in removed) == sorted(gone)
        assert sorted(os.listdir(base)) == sorted(kept)
    finally:
        live.kill()
        live.wait()


def test_reap_dead_judges_pids_within_their_boot_and_pid_namespace(base: Path) -> None:
    """A directory of another pid namespace (a container sharing the base) is left alone even when its
    pid means nothing here; one of an earlier boot goes even when its pid and start match a live one."""
    dead_pid, dead_start = _ended_tag()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    other_namespace = base / f"computer-{dead_pid}-{dead_start}"
    earlier_boot = base / f"computer-{process_tag()}"
    for directory, mark in ((other_namespace, f"{boot} 1"), (earlier_boot, "another-boot 1")):
        directory.mkdir()
        (directory / ".owner").write_text(mark)
    assert reap_dead(base) == [earlier_boot]
    assert other_namespace.exists()


def test_reap_dead_removes_dead_processes_cgroups(base: Path) -> None:
    parent = CGROUP_ROOT / "pids" / CGROUP_PARENT
    if not os.access(parent, os.W_OK):
        pytest.skip("no writable pids cgroup here")
    dead_pid, dead_start = _ended_tag()
    dead = [parent / f"run-{dead_pid}-{dead_start}-0badc0de", parent / f"run-{dead_pid}-0badc0de"]
    mine = parent / f"run-{process_tag()}-0badc0de"
    for group in [*dead, mine]:
        group.mkdir()
    try:
        reap_dead(base)
        assert [g.exists() for g in dead] == [False, False] and mine.exists()
    finally:
        for group in [*dead, mine]:
            if group.exists():
                group.rmdir()


def _python(code: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)


def test_process_scratch_is_private_and_removed_at_exit(base: Path) -> None:
    code = f"""
import os, stat
from pathlib import Path
from computer.runtime._lifetime import process_tag
from computer.runtime._scratch import process_scratch
scratch = process_scratch({str(base)!r})
assert scratch == process_scratch({str(base)!r})
assert scratch.name == f"computer-{{process_tag()}}", scratch
st = scratch.stat()
assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
(scratch / "mirror" / "deep").mkdir(parents=True)
print(scratch)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr.decode()
    assert not Path(done.stdout.decode().strip()).exists()
    assert os.listdir(base) == []


def test_release_process_removes_it_now_and_a_later_one_is_fresh(base: Path) -> None:
    """What a Ray worker's shutdown calls (Ray may end it without ``atexit``)."""
    code = f"""
from computer.runtime._scratch import process_scratch, release_process
first = process_scratch({str(base)!r})
(first / "x").write_text("x")
release_process()
assert not first.exists()
again = process_scratch({str(base)!r})
assert again.is_dir() and not (again / "x").exists()
import os; os._exit(0)  # no atexit: the directory stays, for the next process to reap
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr.decode()
    (left,) = os.listdir(base)
    assert reap_dead(base) == [base / left] and os.listdir(base) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root maps the sandbox to another host user")
async def test_an_unprivileged_sandbox_binds_a_mirror_only_from_a_scratch_directory_it_owns(
    base: Path,
) -> None:
    """bubblewrap started as the sandbox user must search every directory on a bind's path: the
    scratch directory (0700) is that user's; one owned by root keeps it out."""
    sandbox = Sandbox(unprivileged=True)
    if not sandbox.bwrap:
        pytest.skip("bubblewrap does not work here")
    ids = sandbox.host_ids
    assert ids is not None
    os.chmod(base, 0o1777)  # as /dev/shm and /tmp are
    try:
        mirror = process_scratch(base, ids) / "mirror"
        mirror.mkdir()
        os.chown(mirror, *ids)
        sp = await sandbox.spawn(
            ["/bin/bash", "-c", "echo hi > f && cat f"], binds=[Bind(str(mirror), "/w", True)], cwd="/w"
        )
        out, err = await sp.proc.communicate()
        await sp.discard()
        assert out == b"hi\n", err
        assert (mirror / "f").stat().st_uid == ids[0]
        closed = process_scratch(base) / "mirror"  # the root-owned 0700 one
        closed.mkdir()
        os.chown(closed, *ids)
        sp = await sandbox.spawn(["/bin/true"], binds=[Bind(str(closed), "/w", True)])
        await sp.proc.communicate()
        await sp.discard()
        assert sp.proc.returncode != 0
    finally:
        remove_tree(process_scratch(base, ids))
        remove_tree(process_scratch(base))
