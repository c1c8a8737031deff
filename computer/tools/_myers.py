"""A work-bounded line diff: Myers' greedy O((N+M)·D) algorithm with a budget, or ``None`` past it.

Why not ``difflib``: ``SequenceMatcher`` is quadratic (cubic at worst) in the number of lines when lines
repeat (two lines swapped, repeated 16,000 times, took 37 s), and an ``edit`` result must come back
in bounded time whatever the file holds. Myers finds a shortest edit script; its cost grows with the
number of differences ``D`` rather than with how often a line repeats, and every unit of work (one
diagonal visited, one line compared) is counted against ``budget``. Past the budget the caller gets
``None`` and shows a summarised hunk instead.

Space: the lines as small integers (O(N+M)) plus one saved frontier per step for the backtrack, whose
total size is at most the work already spent (the frontier of step ``d`` holds ``2d+1`` entries, all
counted), so memory is bounded by the budget too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["DEFAULT_BUDGET", "Opcode", "myers_opcodes"]

Opcode = tuple[str, int, int, int, int]

# Units of work (diagonals visited + lines compared); ~1-2 s of pure Python on a slow core.
DEFAULT_BUDGET = 3_000_000


def myers_opcodes(
    old: Sequence[str], new: Sequence[str], budget: int = DEFAULT_BUDGET
) -> list[Opcode] | None:
    """``difflib``-style opcodes (``equal``/``replace``/``delete``/``insert``) turning ``old`` into ``new``,
    or ``None`` when a shortest script costs more than ``budget`` units of work."""
    ids: dict[str, int] = {}
    a = [ids.setdefault(line, len(ids)) for line in old]
    b = [ids.setdefault(line, len(ids)) for line in new]
    trace = _forward(a, b, budget)
    if trace is None:
        return None
    return _to_opcodes(_matches(trace, len(a), len(b)), len(a), len(b))


def _forward(a: list[int], b: list[int], budget: int) -> list[list[int]] | None:
    """The frontiers ``V`` saved at the start of every step ``d`` (entries for ``k`` in ``[-d, d]``)."""
    n, m = len(a), len(b)
    if n == 0 and m == 0:
        return []
    # Step d alone costs 2d+1 units, so no step past sqrt(budget) can start within it: the frontier
    # never needs more room than that (and is never one huge allocation for a huge input).
    max_d = min(n + m, math.isqrt(max(budget, 0)) + 1)
    offset = max_d + 1
    v = [0] * (2 * max_d + 3)
    trace: list[list[int]] = []
    work = 0
    for d in range(max_d + 1):
        trace.append(v[offset - d : offset + d + 1])
        work += 2 * d + 1
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            work += x - start
            v[offset + k] = x
            if x >= n and y >= m:
                return trace
        if work > budget:
            return None
    return None  # max_d steps were not enough (only when capped by the budget)


def _matches(trace: list[list[int]], n: int, m: int) -> list[tuple[int, int, int]]:
    """Matching blocks ``(i, j, size)`` in order, from a backtrack through the saved frontiers."""
    blocks: list[tuple[int, int, int]] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        frontier = trace[d]  # V after step d-1, the entry of diagonal k at index k + d
        k = x - y
        if d == 0:
            prev_x = prev_y = 0
            snake_from = 0
        else:
            if k == -d or (k != d and frontier[k - 1 + d] < frontier[k + 1 + d]):
                prev_k = k + 1  # moved down: one line of ``new`` inserted, x unchanged
                prev_x = frontier[prev_k + d]
                snake_from = prev_x
            else:
                prev_k = k - 1  # moved right: one line of ``old`` deleted
                prev_x = frontier[prev_k + d]
                snake_from = prev_x + 1
            prev_y = prev_x - prev_k
        size = x - snake_from
        if size > 0:
            blocks.append((x - size, y - size, size))
        x, y = prev_x, prev_y
    blocks.reverse()
    return blocks


def _to_opcodes(blocks: list[tuple[int, int, int]], n: int, m: int) -> list[Opcode]:
    """The same conversion as ``SequenceMatcher.get_opcodes`` from matching blocks."""
    codes: list[Opcode] = []
    i = j = 0
    for bi, bj, size in [*blocks, (n, m, 0)]:
        tag = ""
        if i < bi and j < bj:
            tag = "replace"
        elif i < bi:
            tag = "delete"
        elif j < bj:
            tag = "insert"
        if tag:
            codes.append((tag, i, bi, j, bj))
        i, j = bi + size, bj + size
        if size:
            codes.append(("equal", bi, i, bj, j))
    return codes
