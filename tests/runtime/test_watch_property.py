"""Property: mirrors sharing the process's inotify instance each collect exactly what a full walk finds,
whatever the interleaving of changes to both and of cheap looks (``pending``) that move events around.
The changes include ``renameat2(RENAME_EXCHANGE)``, whose last event on a path it fills is a move away
(before, such a path was taken for gone: every few examples)."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.runtime import MirrorDir, MirrorFile, SyncPush
from computer.runtime._mirror import Mirror

NAMES = st.sampled_from(["a", "b", "c", "d/e", "d/f", "g/h/i"])
OPS = st.lists(
    st.tuples(
        st.integers(0, 1),  # which mirror
        st.sampled_from(
            ["write", "append", "mkdir", "rmtree", "unlink", "rename", "exchange", "symlink", "chmod", "look"]
        ),
        NAMES,
        NAMES,
    ),
    max_size=30,
)


_libc = ctypes.CDLL(None, use_errno=True)


def seeded(base: Path, name: str) -> Mirror:
    mirror = Mirror(base / name, "/workspace")
    files = [MirrorFile(f"/workspace/{p}", p.encode(), 0o644, 1_000) for p in ("a", "d/e", "g/h/x")]
    dirs = [MirrorDir(f"/workspace/{d}") for d in ("d", "g", "g/h")]
    mirror.apply(SyncPush(1, "/workspace", True, files, dirs))
    mirror.arm()
    assert mirror.watch is not None
    return mirror


def apply(root: Path, op: str, one: str, two: str) -> None:
    path, other = root / one, root / two
    try:
        if op in ("write", "append"):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w" if op == "write" else "a") as f:
                f.write(op)
        elif op == "mkdir":
            path.mkdir(parents=True, exist_ok=True)
        elif op == "rmtree":
            shutil.rmtree(path.parent if path.parent != root else path)
        elif op == "unlink":
            path.unlink()
        elif op == "rename":
            other.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, other)
        elif op == "exchange":  # renameat2(RENAME_EXCHANGE): inotify says one -> two, then two -> one
            if _libc.renameat2(-100, os.fsencode(path), -100, os.fsencode(other), 2) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
        elif op == "symlink":
            os.symlink(two, path)
        elif op == "chmod":
            os.chmod(path, 0o600)
    except OSError:
        pass  # the op did not apply to this tree's current shape: fine, it is still a valid history


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_shared_watches_collect_what_a_full_walk_finds(ops: list[tuple[int, str, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mirrors = [seeded(Path(tmp), "m0"), seeded(Path(tmp), "m1")]
        for which, op, one, two in ops:
            if op == "look":
                mirrors[which].quiet()
            else:
                apply(mirrors[which].directory, op, one, two)
        for mirror in mirrors:
            now = mirror.scan()
            expected = mirror._diff(now, set(now) | set(mirror.state))
            pull, watched_now = mirror.collect()
            assert watched_now == now
            assert {f.path for f in pull.files} == {f.path for f in expected.files}
            assert {d.path for d in pull.dirs} == {d.path for d in expected.dirs}
            assert set(pull.deleted) == set(expected.deleted)
        for mirror in mirrors:
            mirror.unwatch()
