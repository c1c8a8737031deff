"""Glob patterns for find and grep, matched against a path relative to the search directory.

``*`` and ``?`` stay within one segment, ``**`` crosses segments, ``**/`` also matches zero segments,
every other character is literal (no ``[...]`` classes, no escapes). A pattern is compiled once. Python's
``re`` (about 8x faster per match than RE2's wrapper) takes the patterns it cannot make backtrack for long:
one star, or two of which at most one is a ``**`` and that one is a ``**/`` (``**/*.py``, ``src/**``).
Every other pattern uses RE2, whose matching is linear, so no pattern can make a walk hang: two ``**``
(``**a**`` + 250 ``a`` + ``b``) took Python's ``re`` 2.3 s on one 4 KiB path, a ``*`` and a ``**`` 0.15 s.
A pattern ending in repeated ``/**`` prunes as one ``/**`` (``**/`` written 2,000 times built 2,000
nested globs, each compiled: 2 s, then ``RecursionError``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import re2

__all__ = ["MAX_GLOBS", "Glob", "GlobError", "GlobSet"]

# Globs one find or grep takes at most (its pattern, includes and excludes together): every entry of
# the walk is matched against each, and 100,000 excludes took minutes of the owner's event loop.
MAX_GLOBS = 1000


class GlobError(ValueError):
    """A glob that cannot be compiled (too large for RE2's memory budget)."""


class Glob:
    """One compiled glob."""

    __slots__ = ("_match", "pattern", "prunes_prefix")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._match = _compile(pattern)
        # ``X/**`` (and ``**``) match everything below a directory matching X: the walk may prune it.
        self.prunes_prefix: Glob | None = None
        if pattern.endswith("/**") and len(pattern) > 3:
            prefix = pattern[:-3]
            while prefix.endswith("/**") and len(prefix) > 3:  # ``X/**/**`` matches what ``X/**`` does
                prefix = prefix[:-3]
            self.prunes_prefix = Glob(prefix)

    def match(self, rel: str) -> bool:
        return self._match(rel)

    def covers_children(self, rel_dir: str) -> bool:
        """True when every path below directory ``rel_dir`` matches (so its subtree need not be read)."""
        if self.pattern == "**":
            return True
        return self.prunes_prefix is not None and self.prunes_prefix.match(rel_dir)


class GlobSet:
    """Several globs: matches when any matches. Empty matches nothing."""

    __slots__ = ("globs",)

    def __init__(self, patterns: Sequence[str]) -> None:
        self.globs = [Glob(p) for p in patterns]

    def __bool__(self) -> bool:
        return bool(self.globs)

    def match(self, rel: str) -> bool:
        return any(g.match(rel) for g in self.globs)

    def covers_children(self, rel_dir: str) -> bool:
        return any(g.covers_children(rel_dir) for g in self.globs)


def _compile(pattern: str) -> Callable[[str], bool]:
    out: list[str] = []
    stars = 0
    doubles = 0  # ``**``
    crossing = 0  # ``**`` that do not end at a "/": ``.*``, which backtracks over the whole path
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            stars += 1
            if i + 1 < n and pattern[i + 1] == "*":
                i += 2
                while i < n and pattern[i] == "*":
                    i += 1
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                    crossing += 1
                doubles += 1
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(ch))
        i += 1
    source = "".join(out)
    if stars <= 1 or (stars == 2 and doubles <= 1 and crossing == 0):
        compiled = re.compile(source, re.DOTALL)
        return lambda s: compiled.fullmatch(s) is not None
    options = re2.Options()
    options.dot_nl = True
    options.log_errors = False  # a glob too large is our EINVAL, not lines of RE2's log on stderr
    try:
        compiled2 = re2.compile(source, options)
    except re2.error as exc:  # "pattern too large": was re2's own error, not the fs's EINVAL
        raise GlobError(f"the glob is too large to match ({len(pattern)} characters)") from exc
    return lambda s: compiled2.fullmatch(s) is not None
