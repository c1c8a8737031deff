"""Forgetting paths of a mirror's state (``MirrorBase.state`` and the dicts keyed like it, by path
relative to the mirror): each path and everything below it, many in one pass."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

from ._entry import KIND

__all__ = ["forget"]


def forget(
    state: MutableMapping[str, Any], others: Iterable[MutableMapping[str, Any]], rels: Iterable[str]
) -> None:
    """Forget each of ``rels`` and everything below it in ``state`` and in ``others``.

    A file's entry (which has nothing below it) goes by its key. The rest (directories, and paths the
    state no longer holds, which may still have entries below them) in one pass over the state, each
    key's ancestors looked up in a set: one pass per path made a pull that refused 137,000 removed
    paths (a ``mv`` of a big directory) quadratic, minutes of one CPU holding the interpreter."""
    maps = [state, *others]
    tops: set[str] = set()
    for rel in rels:
        entry = state.get(rel)
        if entry is not None and entry[KIND] != "d":
            for held in maps:
                held.pop(rel, None)
        else:
            tops.add(rel)
    if not tops:
        return
    # Each directory's verdict (below a top or not) is looked up once and kept for what is below it:
    # a walk up from every key was quadratic in the depth (a chain 2,000 deep with 20,000 links at its
    # end: ~4 KB keys, 2,000 ever shorter copies each, a push page taking minutes in a pool thread).
    verdicts: dict[str, bool] = {}
    doomed = []
    for key in state:
        chain = []
        above = key
        while True:
            if above in tops:
                verdict = True
                break
            known = verdicts.get(above)
            if known is not None:
                verdict = known
                break
            chain.append(above)
            above, slash, _ = above.rpartition("/")
            if not slash:
                verdict = False
                break
        for walked in chain:
            verdicts[walked] = verdict
        if verdict:
            doomed.append(key)
    for key in doomed:
        for held in maps:
            held.pop(key, None)
