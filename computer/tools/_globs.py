"""The globs of find and grep as the tools take them, turned into the storage walk's globs.

The walk matches globs against paths relative to the searched directory, with ``*``, ``?`` and ``**``
and every other character literal (SPEC section 4). Models also send what other tools taught them:

- an absolute glob below the directory (``/workspace/**/*.py``): a relative path never starts with
  "/", so it matched nothing; it loses that prefix;
- ``./`` in front (``./src/*.py``) and a directory's trailing ``/`` (``node_modules/``, as in
  ``.gitignore``): relative paths have neither, so such a glob matched nothing (an exclude pruned
  nothing); both are dropped;
- brace alternatives (``**/*.{ts,tsx}``, as in bash, ripgrep and most glob tools): matched literally,
  they found nothing; a group of two or more comma-separated alternatives (nested groups too) expands
  into one glob per alternative. A group without a comma (``{{name}}``) stays literal. The glob as
  written is kept as one more alternative: braces are literal characters of a name to the walk
  (SPEC), so a file really named ``a{b,c}.txt`` is still found by that pattern.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

__all__ = [
    "MAX_ALTERNATIVES",
    "MAX_EXPANSIONS",
    "below",
    "expand",
    "reachable_alternatives",
    "relative_alternatives",
    "walk_globs",
]

MAX_ALTERNATIVES = 64
MAX_EXPANSIONS = 4 * MAX_ALTERNATIVES  # globs made, repeats counted


def below(root: str, glob: str) -> str:
    """``glob`` as the walk below the directory ``root`` (canonical) can match it: relative, without a
    leading ``./`` or a trailing ``/``."""
    prefix = root.rstrip("/") + "/"
    if glob.startswith(prefix):
        glob = glob[len(prefix) :]
    while glob.startswith("./"):
        glob = glob[2:].lstrip("/")
    return glob.rstrip("/") if glob.strip("/") else glob


def relative_alternatives(root: str, glob: str) -> list[str]:
    """The globs the walk takes for one glob a caller sent: the glob itself (its braces literal), then
    its brace alternatives, each :func:`below` ``root``, duplicates dropped."""
    out: list[str] = []
    for alternative in dict.fromkeys([glob, *expand(glob)]):
        relative = below(root, alternative)
        if relative not in out:
            out.append(relative)
    return out


def reachable_alternatives(root: str, glob: str, what: str) -> list[str]:
    """:func:`relative_alternatives` of a find pattern or grep include, computed once for both the check
    and the walk; a ``ValueError`` naming ``what`` when every one has a ``..`` segment (``../src/*.py``):
    no path below ``root`` has one (canonical paths never do), so such a glob matched nothing, silently,
    and an agent took "no results" for an answer. An absolute glob elsewhere (``/etc/**`` searching
    ``/workspace``) still finds nothing, as decided before
    (``test_absolute_globs_below_the_path_match_as_the_relative_ones``); an exclude that can match
    nothing excludes nothing and stays allowed."""
    alternatives = relative_alternatives(root, glob)
    if all(".." in g.split("/") for g in alternatives):
        raise ValueError(
            f"{what} {_shown(glob)} has a '..' segment: globs match paths below path and never go "
            "above it; set path to a higher directory instead"
        )
    return alternatives


def expand(glob: str) -> list[str]:
    """``glob`` with its brace groups expanded, in order, duplicates dropped; a ``ValueError`` past
    :data:`MAX_ALTERNATIVES` distinct ones or :data:`MAX_EXPANSIONS` in all (repeats counted: ``{a,a}``
    written 30 times is one glob but 2**30 expansions, which ran for hours on the owner's event loop)."""
    out: list[str] = []
    pending = [glob]
    made = 0
    while pending:
        current = pending.pop()
        group = _first_group(current)
        if group is None:
            made += 1
            if current not in out:
                out.append(current)
            if len(out) > MAX_ALTERNATIVES or made > MAX_EXPANSIONS:
                raise ValueError(
                    f"the glob {_shown(glob)} expands to more than {MAX_ALTERNATIVES} alternatives: "
                    "use fewer brace groups"
                )
            continue
        start, end, choices = group
        if made + len(pending) + len(choices) > MAX_EXPANSIONS:
            raise ValueError(
                f"the glob {_shown(glob)} expands to more than {MAX_ALTERNATIVES} alternatives: "
                "use fewer brace groups"
            )
        pending.extend(current[:start] + choice + current[end:] for choice in reversed(choices))
    return out


def _shown(glob: str) -> str:
    """``glob`` as an error names it: at most 200 characters."""
    return repr(glob) if len(glob) <= 200 else repr(glob[:200]) + f" (cut, {len(glob)} characters)"


def walk_globs(root: str, globs: Iterable[str]) -> list[str]:
    """Every glob of an include or exclude list as the walk takes it (:func:`relative_alternatives`)."""
    out: dict[str, None] = {}  # a dict: a list's ``in`` made 20,000 globs 4 s of the owner's loop
    for glob in globs:
        out.update(dict.fromkeys(relative_alternatives(root, glob)))
    return list(out)


def _first_group(glob: str) -> tuple[int, int, list[str]] | None:
    """The first ``{...}`` holding a top-level comma: (start, end past ``}``, alternatives).

    One pass with a stack of the open groups (a group closes at the first ``}`` that brings its depth
    back, as counting from its ``{`` would; an unclosed ``{`` is literal). Scanning again from each
    ``{`` was quadratic: 8,000 unclosed ``{`` took 13 s.
    """
    found: tuple[int, int, list[int]] | None = None
    open_groups: list[tuple[int, list[int]]] = []
    for index, c in enumerate(glob):
        if c == "{":
            open_groups.append((index, []))
        elif c == "," and open_groups:
            open_groups[-1][1].append(index)
        elif c == "}" and open_groups:
            start, commas = open_groups.pop()
            if commas and (found is None or start < found[0]):
                found = (start, index, commas)
    if found is None:
        return None
    start, index, commas = found
    cuts = [start, *commas, index]
    return start, index + 1, [glob[a + 1 : b] for a, b in pairwise(cuts)]
