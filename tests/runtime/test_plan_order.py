"""A pull's plan orders its paths without holding the GIL for the whole sort: ``sorted`` is one C call,
and the plan of a program's 500,000 files in one directory held the GIL ~0.45-1.3 s in its worker
thread while the owner's loop (every workspace of the process) waited for it."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computer.runtime import _mirror_pull, _pull_pages
from computer.runtime._backend import SyncLimits
from computer.runtime._context import LocalExecContext
from computer.runtime._mirror import Mirror
from computer.runtime._pull_pages import path_order
from computer.storage import FileSystem


@settings(max_examples=60, deadline=None)
@given(st.sets(st.text(alphabet="ab/€\n\udcff", max_size=6), max_size=60), st.integers(1, 9))
def test_the_order_is_sorted_whatever_the_slices(paths: set[str], size: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_pull_pages, "SORT_SLICE", size)
        assert path_order(paths) == sorted(paths)


async def test_a_plan_of_many_paths_sorts_none_past_a_slice(
    fs: FileSystem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull's plan of 3,000 new files (``SORT_SLICE`` at 500 here) sorts no more than a slice in one
    call (with one ``sorted`` of all its paths: 3,000), and plans every file in path order."""
    monkeypatch.setattr(_pull_pages, "SORT_SLICE", 500)
    longest = 0

    def recorded(items: Iterable[Any], **kwargs: Any) -> list[Any]:
        nonlocal longest
        items = list(items)
        longest = max(longest, len(items))
        return builtins.sorted(items, **kwargs)

    monkeypatch.setattr(_pull_pages, "sorted", recorded, raising=False)
    monkeypatch.setattr(_mirror_pull, "sorted", recorded, raising=False)
    await fs.mkdir("/w")
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    mirror = Mirror(tmp_path / "m", "/w")
    mirror.apply(await ctx.sync_push(None, "/w", SyncLimits()))
    mirror.finish_push(fs.rev)
    mirror.unwatch()  # a walk: every path is a candidate
    for i in range(3000):
        (mirror.directory / f"e{i}").write_bytes(b"")
    plan, _ = mirror.plan()
    assert [rel for rel, _ in plan.files] == builtins.sorted(f"e{i}" for i in range(3000))
    assert 0 < longest <= 500


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.text(alphabet="a/.-0\x00€\udcff", max_size=6), max_size=60),
    st.text(alphabet="a/.-0€", max_size=3),
)
def test_keys_below_a_path_are_what_a_prefix_scan_finds(paths: set[str], rel: str) -> None:
    """``keys_below`` (a pull's plan after a directory went: what was below it leaves with it, by
    bisection in the sorted paths, not a scan of every path per directory) finds exactly the paths a
    prefix scan finds, whatever characters sort beside ``/`` (``.``, ``-``, ``0``, NUL, surrogates)."""
    assert _pull_pages.keys_below(sorted(paths), rel) == sorted(p for p in paths if p.startswith(rel + "/"))
