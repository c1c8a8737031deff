"""Forgetting paths of a mirror's state in one pass gives what forgetting them one at a time gave
(each path, and everything below it), on generated states: directories, files, and paths the state
no longer holds (which may still have entries below them)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from computer.runtime._entry import KIND, Entry
from computer.runtime._forget import forget

_NAMES = st.sampled_from(["a", "b", "a-b", "a b", "ab"])
_RELS = st.lists(_NAMES, min_size=1, max_size=3).map("/".join)


def _one_at_a_time(state: dict[str, Entry], chunks: dict[str, int], rels: list[str]) -> None:
    """The first ``MirrorBase._forget``, called per path."""
    for rel in rels:
        entry = state.get(rel)
        if entry is not None and entry[KIND] != "d":
            del state[rel]
            chunks.pop(rel, None)
            continue
        for key in [k for k in state if k == rel or k.startswith(rel + "/")]:
            del state[key]
            chunks.pop(key, None)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RELS, max_size=20), st.lists(_RELS, max_size=8), st.data())
def test_forgetting_many_at_once_equals_one_at_a_time(
    held: list[str], rels: list[str], data: st.DataObject
) -> None:
    dirs = {rel.rpartition("/")[0] for rel in held} - {""}
    state = {
        rel: ("d" if rel in dirs else data.draw(st.sampled_from("fl")), 1, 0, 0, 0, 0o644) for rel in held
    }
    state.update({d: ("d", 1, 0, 0, 0, 0o755) for d in dirs if data.draw(st.booleans())})  # some missing
    chunks = {rel: 1 for rel in state if data.draw(st.booleans())}
    expected_state, expected_chunks = dict(state), dict(chunks)
    _one_at_a_time(expected_state, expected_chunks, rels)
    forget(state, [chunks], rels)
    assert (state, chunks) == (expected_state, expected_chunks)
