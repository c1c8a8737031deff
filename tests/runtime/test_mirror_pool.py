"""``MirrorPool``: warm mirrors are kept for the most recently used workspaces only."""

from __future__ import annotations

from pathlib import Path

import pytest

from computer.runtime import MirrorPool
from computer.runtime._mirror import Mirror


def _used(pool: MirrorPool, workspace: str) -> Mirror:
    """Run a pretend command: take a mirror, write into it, give it back."""
    mirror = pool.acquire(workspace)
    mirror.directory.mkdir(parents=True, exist_ok=True)
    (mirror.directory / "file").write_text(workspace)
    pool.release(workspace, mirror)
    for evicted in pool.take_evicted():  # what the shell backend does, in a worker thread
        pool.discard(evicted)
    return mirror


def test_a_released_mirror_is_reused_by_the_next_run_of_its_workspace(tmp_path: Path) -> None:
    pool = MirrorPool(tmp_path, "/workspace", max_workspaces=2)
    first = _used(pool, "a")
    assert pool.acquire("a") is first


def test_idle_mirrors_of_the_least_recently_used_workspaces_are_removed(tmp_path: Path) -> None:
    pool = MirrorPool(tmp_path, "/workspace", max_workspaces=2)
    a, b = _used(pool, "a"), _used(pool, "b")
    _used(pool, "a")  # a is now more recent than b
    c = _used(pool, "c")
    assert pool.workspaces() == ["a", "c"]
    assert not b.directory.exists()
    assert a.directory.exists() and c.directory.exists()
    assert pool.acquire("b") is not b  # b starts over with an empty mirror


def test_a_mirror_lent_to_a_running_command_survives_eviction(tmp_path: Path) -> None:
    pool = MirrorPool(tmp_path, "/workspace", max_workspaces=1)
    running = pool.acquire("a")
    running.directory.mkdir(parents=True)
    (running.directory / "work").write_text("in progress")
    _used(pool, "b")
    _used(pool, "c")
    assert (running.directory / "work").read_text() == "in progress"
    pool.release("a", running)
    assert pool.workspaces() == ["a"]
    assert pool.acquire("a") is running


def test_a_pool_must_keep_at_least_one_workspace(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        MirrorPool(tmp_path, "/workspace", max_workspaces=0)


def test_the_default_pool_is_bounded_too(tmp_path: Path) -> None:
    """An embedded process serving one workspace per agent must not keep a mirror of each forever."""
    pool = MirrorPool(tmp_path, "/workspace")
    mirrors = [_used(pool, f"w{i}") for i in range(pool.max_workspaces + 10)]
    assert len(pool.workspaces()) == pool.max_workspaces == 64
    assert sum(m.directory.exists() for m in mirrors) == 64
    assert pool.workspaces()[0] == "w10"  # the ten least recently used went


def test_evicted_mirrors_wait_for_the_caller_to_remove_them(tmp_path: Path) -> None:
    pool = MirrorPool(tmp_path, "/workspace", max_workspaces=1)
    a = pool.acquire("a")
    a.directory.mkdir(parents=True)
    pool.release("a", a)
    b = pool.acquire("b")  # a's mirror is pushed out, not removed on the caller's event loop
    assert pool.take_evicted() == [a] and a.directory.exists()
    assert pool.take_evicted() == []
    assert b is not a


def test_every_pool_of_the_process_counts_against_one_scratch_budget(tmp_path: Path) -> None:
    """Issue 17 finding 6: warm mirrors held host RAM without a bound; now the idle mirrors of every
    pool count against one budget and the least recently used go first, whichever pool holds them."""
    from computer.runtime._mirror_pool import ScratchBudget

    budget = ScratchBudget(limit=2500)
    first = MirrorPool(tmp_path / "a", "/workspace", budget=budget)
    second = MirrorPool(tmp_path / "b", "/workspace", budget=budget)

    def idle(pool: MirrorPool, workspace: str, size: int) -> Mirror:
        mirror = pool.acquire(workspace)
        mirror.state = {"f": ("f", 1, size, 0, 0, 0o644)}
        assert pool.release(workspace, mirror) or size > budget.limit
        return mirror

    old = idle(first, "w1", 1000)
    middle = idle(second, "w2", 1000)
    assert budget.held() == 2000 and budget.take_evicted() == []
    idle(first, "w3", 1000)  # 3000 > 2500: the oldest idle mirror (another workspace's) goes
    evicted = first.take_evicted()
    assert [m is old for m in evicted] == [True]
    assert budget.held() == 2000 and second.idle_mirrors("w2") == [middle]
    huge = idle(second, "w4", 5000)  # alone over the budget: not kept, and nothing else is needed
    assert [m is huge for m in second.take_evicted()] == [True]  # the others fit: kept
    assert second.idle_mirrors("w4") == [] and budget.held() == 2000
