"""Property: compiled globs agree with a direct recursive reading of the glob rules (SPEC 4 find)."""

from __future__ import annotations

from functools import cache

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
