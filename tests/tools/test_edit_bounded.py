"""edit in bounded time (issue 17, item 5): adversarial diffs finish, and the event loop keeps ticking.

Before the bounded diff, two lines swapped and repeated 16,000 times took 37 s inside ``difflib``, on
the event loop; at the 2 MiB cap, hours. The bounds here are generous safety caps (the work runs in
well under a second or two), not performance targets: those live in ``benchmarks/``.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from computer.tools import create_edit_tool
from computer.tools._diff import MAX_DIFF_LINES, diff_texts

from .directory_store import DirectoryFileStore
from .test_edit_match import apply_patch

BOUND = 15.0  # seconds; the old quadratic diff needs minutes (16,000 pairs) to hours (2 MiB)
# Seconds the event loop may go without running a ready callback. Inline, the old diff stalled it for
# the whole diff (37 s for 16,000 pairs); off the loop the stalls are GIL hand-offs of milliseconds, but
# a machine loaded far past its cores can delay a hand-off by a few hundred ms, hence the margin.
MAX_STALL = 1.0
CAP = 2 * 1024 * 1024
PAIRS_AT_CAP = (CAP - 16) // 4


def swapped(pairs: int) -> tuple[str, str]:
    return "A\nB\n" * pairs, "B\nA\n" * pairs


def random_lines(size: int, seed: int) -> str:
    return "\n".join(random.Random(seed).choices("ab", k=size // 2)) + "\n"


def finishes_in_a_thread(work: Callable[[], object]) -> object:
    """Run ``work`` in a daemon thread and fail if it is not done within ``BOUND`` seconds."""
    box: list[object] = []
    thread = threading.Thread(target=lambda: box.append(work()), daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), f"the diff took more than {BOUND} s"
    return box[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pairs", [16_000, PAIRS_AT_CAP], ids=["16000-pairs", "2MiB-cap"])
def test_swapped_lines_diff_is_exact_and_bounded(pairs: int) -> None:
    old, new = swapped(pairs)
    result = finishes_in_a_thread(lambda: diff_texts(old, new, "/f"))
    assert not result.truncated  # type: ignore[attr-defined]
    assert apply_patch(old, result.patch) == new  # type: ignore[attr-defined]
    assert result.first_changed_line == 1  # type: ignore[attr-defined]


@pytest.mark.timeout(120)
def test_random_two_letter_lines_at_the_cap_are_summarised_and_flagged() -> None:
    old, new = random_lines(CAP, 1), random_lines(CAP, 2)
    result = finishes_in_a_thread(lambda: diff_texts(old, new, "/f"))
    assert result.truncated  # type: ignore[attr-defined]
    assert "truncated" in result.patch  # type: ignore[attr-defined]
    assert result.patch.count("\n") < MAX_DIFF_LINES + 100  # type: ignore[attr-defined]


def test_a_summarised_diff_that_fits_is_a_valid_patch_and_flagged() -> None:
    old, new = "x\n" + random_lines(600, 3) + "y\n", "x\n" + random_lines(600, 4) + "y\n"
    result = diff_texts(old, new, "/f", budget=10)
    assert result.truncated
    assert apply_patch(old, result.patch) == new
    assert "summarised" in result.diff
    assert result.patch.count("@@ -") == 1


def test_the_bounded_diff_is_minimal_for_spread_changes() -> None:
    lines = [f"line {i}\n" for i in range(20_000)]
    changed = list(lines)
    for index in range(5, 20_000, 1_000):
        changed[index] = "x\n"
    old, new = "".join(lines), "".join(changed)
    result = diff_texts(old, new, "/f")
    assert not result.truncated
    assert result.patch.count("@@ -") == 20
    assert apply_patch(old, result.patch) == new


async def max_stall_during(call: Callable[[], Awaitable[object]]) -> tuple[object, float]:
    """Run ``call`` while a ticker measures the longest gap between its wake-ups."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    stop = asyncio.Event()

    async def tick() -> None:
        nonlocal worst
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = loop.time()
            worst = max(worst, now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    try:
        result = await asyncio.wait_for(call(), BOUND)
    finally:
        stop.set()
        await ticker
    return result, worst


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pairs", [16_000, PAIRS_AT_CAP], ids=["16000-pairs", "2MiB-cap"])
async def test_adversarial_edit_finishes_and_never_stalls_the_loop(tmp_path: Path, pairs: int) -> None:
    old, new = swapped(pairs)
    (tmp_path / "f.txt").write_text(old)
    tool = create_edit_tool(DirectoryFileStore(tmp_path))
    result, stall = await max_stall_during(
        lambda: tool.run({"path": "/f.txt", "edits": [{"oldText": old, "newText": new}]})
    )
    assert isinstance(result, dict) and "error" not in result, result
    assert (tmp_path / "f.txt").read_text() == new
    assert apply_patch(old, result["patch"]) == new
    assert stall < MAX_STALL, f"the event loop stalled {stall:.2f} s"


@pytest.mark.timeout(120)
async def test_random_edit_at_the_cap_is_flagged_and_never_stalls_the_loop(tmp_path: Path) -> None:
    old, new = random_lines(CAP - 2, 5), random_lines(CAP - 2, 6)
    (tmp_path / "f.txt").write_text(old)
    tool = create_edit_tool(DirectoryFileStore(tmp_path))
    result, stall = await max_stall_during(
        lambda: tool.run({"path": "/f.txt", "edits": [{"oldText": old, "newText": new}]})
    )
    assert isinstance(result, dict) and result.get("diffTruncated") is True, result
    assert (tmp_path / "f.txt").read_text() == new
    assert stall < MAX_STALL, f"the event loop stalled {stall:.2f} s"


@pytest.mark.timeout(120)
def test_counting_a_self_overlapping_exact_needle_is_linear() -> None:
    from computer.tools._edit_match import Edit, EditError, apply_edits

    def attempt() -> str:
        try:
            apply_edits("a" * 1_000_000, [Edit("a" * 200_000, "b")], "/f")
        except EditError as exc:
            return str(exc)
        return "applied"

    message = finishes_in_a_thread(attempt)
    assert "found 5 times" in str(message) and "unique" in str(message)


@pytest.mark.timeout(120)
def test_fuzzy_candidates_of_a_long_self_overlapping_needle_are_bounded() -> None:
    from computer.tools._edit_match import Edit, EditError, apply_edits

    def attempt() -> str:
        try:
            apply_edits("a " * 500_000, [Edit("a\u00a0" * 20_000, "b")], "/f")
        except EditError as exc:
            return str(exc)
        return "applied"

    message = finishes_in_a_thread(attempt)
    assert "at least" in str(message) and "unique" in str(message)
