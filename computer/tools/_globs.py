"""The globs of find and grep as the tools take them, turned into the storage walk's globs.

The walk matches globs against paths relative to the searched directory, with ``*``, ``?`` and ``**``
and every other character literal (SPEC section 4). Models also send what other tools taught them:

- an absolute glob below the directory (``/workspace/**/*.py``): a relative path never starts with
  "/", so it matched nothing; it loses that prefix;
- brace alternatives (``**/*.{ts,tsx}``, as in bash, ripgrep and most glob tools): matched literally,
  they found nothing; a group of two or more comma-separated alternatives (nested groups too) expands
  into one glob per alternative. A group without a comma (``{{name}}``) stays literal.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

__all__ = ["MAX_ALTERNATIVES", "below", "expand", "walk_globs"]

MAX_ALTERNATIVES = 64


def below(root: str, glob: str) -> str:
    """``glob`` relative to the directory ``root`` (canonical) when it is absolute below it."""
    prefix = root.rstrip("/") + "/"
    return glob[len(prefix) :] if glob.startswith(prefix) else glob


def expand(glob: str) -> list[str]:
    """``glob`` with its brace groups expanded, in order, duplicates dropped; a ``ValueError`` past
    :data:`MAX_ALTERNATIVES`."""
    out: list[str] = []
    pending = [glob]
    while pending:
        current = pending.pop()
        group = _first_group(current)
        if group is None:
            if current not in out:
                out.append(current)
                if len(out) > MAX_ALTERNATIVES:
                    raise ValueError(
                        f"the glob {glob!r} expands to more than {MAX_ALTERNATIVES} alternatives: "
                        "use fewer brace groups"
                    )
            continue
        start, end, choices = group
        pending.extend(current[:start] + choice + current[end:] for choice in reversed(choices))
    return out


def walk_globs(root: str, globs: Iterable[str]) -> list[str]:
    """Every glob made relative to ``root`` and expanded (an include or exclude list)."""
    out: list[str] = []
    for glob in globs:
        out.extend(g for g in expand(below(root, glob)) if g not in out)
    return out


def _first_group(glob: str) -> tuple[int, int, list[str]] | None:
    """The first ``{...}`` holding a top-level comma: (start, end past ``}``, alternatives)."""
    for start, char in enumerate(glob):
        if char != "{":
            continue
        depth = 0
        commas: list[int] = []
        for index in range(start, len(glob)):
            c = glob[index]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    if commas:
                        cuts = [start, *commas, index]
                        choices = [glob[a + 1 : b] for a, b in pairwise(cuts)]
                        return start, index + 1, choices
                    break
            elif c == "," and depth == 1:
                commas.append(index)
    return None
