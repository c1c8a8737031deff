"""Property: compiled globs agree with a direct recursive reading of the glob rules (SPEC 4 find)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computer.storage._glob import Glob


@cache
def reference(pattern: str, path: str) -> bool:
    """``*``/``?`` within a segment, ``**`` across segments, ``**/`` also zero segments, rest literal."""
    if not pattern:
        return not path
    if pattern.startswith("**"):
        rest = pattern.lstrip("*")
        if rest.startswith("/"):
            rest = rest[1:]
            return reference(rest, path) or any(
                reference(rest, path[j + 1 :]) for j, ch in enumerate(path) if ch == "/"
            )
        return any(reference(rest, path[i:]) for i in range(len(path) + 1))
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        end = path.find("/")
        end = len(path) if end < 0 else end
        return any(reference(rest, path[i:]) for i in range(end + 1))
    if head == "?":
        return bool(path) and path[0] != "/" and reference(rest, path[1:])
    return path.startswith(head) and reference(rest, path[1:])


patterns = st.text(alphabet="ab/*?.[", min_size=0, max_size=8)
paths = st.text(alphabet="ab/.[", min_size=0, max_size=10)


@settings(max_examples=300, deadline=None)
@given(patterns, paths)
def test_glob_matches_the_reference_rules(pattern: str, path: str) -> None:
    assert Glob(pattern).match(path) == reference(pattern, path)


def test_many_stars_use_a_linear_engine() -> None:
    glob = Glob("*a*a*a*a*a*b")
    assert not glob.match("a" * 4000)
    assert glob.match("aaaaab")


@pytest.mark.timeout(30)
def test_two_stars_one_of_them_crossing_use_a_linear_engine() -> None:
    """``**a**`` + 250 ``a`` + ``b`` (two stars) went to Python's ``re``, which backtracked for 2.3 s on
    one 4 KiB path: a find over a few hundred such paths held the owner for minutes. Now RE2."""
    path = "/".join(["a" * 250] * 16)
    for pattern in ("**a**" + "a" * 250 + "b", "*a**" + "a" * 250 + "b", "**/a" + "a" * 250 + "/**b"):
        glob = Glob(pattern)
        assert not any(glob.match(path) for _ in range(40))
        assert glob.match("a" * 251 + "b") == reference(pattern, "a" * 251 + "b")


def test_repeated_trailing_double_stars_prune_as_one() -> None:
    """``**/`` written 2,000 times built one nested prune glob per ``/**`` (RecursionError)."""
    glob = Glob("/".join(["**"] * 2000))
    assert glob.match("a/b/c")
    assert glob.covers_children("a")
    assert Glob("x/**/**/**").covers_children("x")
    assert not Glob("x/**/**/**").covers_children("y")
