"""A deep path is made canonical without a step per segment: a program's chain of 2,000 directories
gives ~4 KB paths, and every workspace call on one (a push's ``readlink`` of each of 20,000 symlinks
at its end) paid ~0.7 ms of Python on the owner's loop, 14 s in all. Same answers as the step per
segment gives, for any path."""

from __future__ import annotations

import errno
import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from computer.storage import paths
from computer.storage.paths import MAX_NAME_BYTES, MAX_PATH_BYTES, canonical


def _reference(path: str) -> str:
    """The step per segment (the rules, spelled out)."""
    out: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not out:
                raise OSError(errno.EINVAL, "escapes")
            out.pop()
            continue
        if len(seg.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise OSError(errno.ENAMETOOLONG, "name")
        out.append(seg)
    result = "/" + "/".join(out)
    if len(result.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise OSError(errno.ENAMETOOLONG, "path")
    return result


def _outcome(call: Any, path: str) -> tuple[str, Any]:
    try:
        return "ok", call(path)
    except OSError as exc:
        return "error", exc.errno


def test_a_deep_plain_path_takes_no_step_per_segment() -> None:
    deep = "/workspace/" + "/".join(["c"] * 2000)
    encoded = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", "") == "encode":
            encoded[0] += 1

    sys.setprofile(profile)
    try:
        result = paths._normalize(deep)
    finally:
        sys.setprofile(None)
    assert result == deep
    assert encoded[0] <= 2  # before: one a segment (2,001)


segment = st.one_of(
    st.sampled_from(["", ".", "..", "a", "b", "é" * 70, "x" * 64, "😀" * 63, "😀" * 64]),
    st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s and "\x00" not in s),
)


@given(st.lists(segment, max_size=30), st.integers(0, 1200))
def test_canonical_agrees_with_a_step_per_segment(segments: list[str], repeat: int) -> None:
    path = "/" + "/".join(segments)
    assert _outcome(canonical, path) == _outcome(_reference, path)
    deep = "/" + "/".join(["ab"] * repeat + segments)  # around the path limit too
    assert _outcome(canonical, deep) == _outcome(_reference, deep)
