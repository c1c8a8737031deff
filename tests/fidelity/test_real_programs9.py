"""Where real users break the exec layer (session 67, fid10): real programs across separate calls, per
call and live, after reopens; each a regression test of a defect found so.

- A run that moves a directory into another one and then moves that one (``mv e d/s/e && mv d dd``:
  a build staging its output, ``git worktree``/``rsync`` temp trees renamed into place) moved
  ``dd/s``'s time in the sandbox (a name arrived in it), but the pull never sent it: the parents of a
  rename pair were read at the names they had at that rename, ``d/s``, gone once ``d`` became ``dd``.
  The store took the time of the pull's commit instead (its rename of ``e`` moves the parent's time,
  ``storage/_parent_time``): ``stat dd/s`` said 9-15 ms later after a reopen than the run had seen.
  Each pair's parents are followed through the later pairs now (``runtime/_pull_moves.py``,
  ``rename_parents``).
- A directory moved aside and back in one sync (``mv d/s/t x && mv x d/s/t``: a build parking its
  output, a script's backup restored) moved ``d/s``'s time in the sandbox; a kept watch
  drops such a move (no rename is left to send) and with it every trace of ``d/s``, whose time
  stayed the store's (a year-2001 ``touch -d`` here) until a reopen put it back under the
  sandbox. The parents of every move the watch saw are read at the pull now
  (``runtime/_mirror_pull.py``, ``plan``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._support import KINDS, ROOT, ok, opened, shell

TIMES = "stat -c '%n %.9Y' dd dd/s dd/s/e dd/s/e/f"


async def _store_times(ws: object, names: list[str]) -> str:
    lines = []
    for name in names:
        st = await ws.fs.stat(ROOT if name == "." else f"{ROOT}/{name}")  # type: ignore[attr-defined]
        ns = st.mtime * 1_000_000 + st.sub_ns
        lines.append(f"{name} {ns // 10**9}.{ns % 10**9:09d}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_moved_into_one_then_moved_keeps_its_new_parent_s_time(
    db: Path, live: bool
) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p d/s e && echo 1 > e/f && touch -d @1000000000 d d/s e")
        seen = (await ok(ws, f"mv e d/s/e && mv d dd; {TIMES}")).stdout
        assert seen.splitlines()[1].endswith(" 1000000000.000000000") is False, seen  # (``s`` took ``e``)
        assert (await ok(ws, TIMES)).stdout == seen
        assert await _store_times(ws, ["dd", "dd/s", "dd/s/e", "dd/s/e/f"]) == seen
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, TIMES)).stdout == seen  # was: dd/s at the pull's commit, ms later


@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_moved_away_and_back_moves_its_parents_times(db: Path, live: bool) -> None:
    times = "stat -c '%n %.9Y' . d d/s d/s/t d/s/t/f"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p d/s/t && echo 1 > d/s/t/f && touch -d @1000000000 d d/s d/s/t")
        seen = (await ok(ws, f"mv d/s/t x && mv x d/s/t; {times}")).stdout
        assert [line.endswith(" 1000000000.000000000") for line in seen.splitlines()] == [
            False,  # (``x`` came and went)
            True,
            False,
            True,
            False,
        ], seen
        assert await _store_times(ws, [".", "d", "d/s", "d/s/t", "d/s/t/f"]) == seen  # was: d/s in 2001
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, times)).stdout == seen
