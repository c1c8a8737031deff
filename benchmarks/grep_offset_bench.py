"""grep's paging: what a page far into the matches costs, against the old path in the same process.

Run: ``.venv/bin/python benchmarks/grep_offset_bench.py [--matches N]``.

One file of ``N`` matching lines (default 1,000,000), a page of 10 at ``offset = N - 10``, literal
and regex, with and without context. ``now`` is ``FileSystem.grep`` (the scan spends the offset: a
match before the page is a tick, never built). ``old`` is the path before: every match built as a
``GrepMatch`` (the same scan with no offset) and dropped by the pager, reproduced here from the same
generator, so both columns run the same code but for the skip. Best of 3 rounds, alternated.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterator
from typing import Any

from computer.storage import FileSystem, _search


def _old_paged(found: Iterator[Any], offset: int, limit: int) -> list[Any]:
    """The pager before: each match built by the scan, then skipped here until ``offset``."""
    out: list[Any] = []
    skip = offset
    for item in found:
        if item is None:
            continue
        if skip:
            skip -= 1
            continue
        out.append(item)
        if len(out) >= limit:
            break
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--matches", type=int, default=1_000_000)
    n = parser.parse_args().matches
    fs = FileSystem.open(None)
    await fs.write_file("/f", b"a hit here\n" * n)
    offset, limit = n - 10, 10
    print(f"{n:,} matching lines, a page of {limit} at offset {offset:,}")
    for label, options in [
        ("literal", {}),
        ("regex", {"regex": True}),
        ("literal, context 2", {"context": 2}),
    ]:
        best = {"old": float("inf"), "now": float("inf")}
        for _ in range(3):
            start = time.perf_counter()
            now = await fs.grep("hit", "/f", offset=offset, limit=limit, **options)
            best["now"] = min(best["now"], time.perf_counter() - start)
            start = time.perf_counter()
            found = _search.grep(
                fs._store,
                "hit",
                "/f",
                regex=bool(options.get("regex")),
                ignore_case=False,
                context=int(options.get("context", 0)),
                include=None,
                exclude=(),
                limit=None,
                offset=0,
            )
            old = _old_paged(found, offset, limit)
            best["old"] = min(best["old"], time.perf_counter() - start)
            assert old == now, label
        per = (best["old"] - best["now"]) / offset * 1e6
        print(
            f"{label:20} old {best['old'] * 1000:8.1f} ms   now {best['now'] * 1000:8.1f} ms   "
            f"now/old {best['now'] / best['old']:.2f}x   saved {per:.2f} us per skipped match"
        )
    fs.close()


if __name__ == "__main__":
    asyncio.run(main())
