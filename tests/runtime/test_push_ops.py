"""The push's pure steps against their plain definitions, on generated trees: walk order as a string
key equals comparing components one by one, and the listing-driven ``ops_below`` gives what the
first version (the changed paths sorted, each tested against the one before) gave."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from computer.runtime._push_ops import Op, ops_below, walk_key
from computer.storage.paths import is_within

# Names chosen to hit the orderings that matter: a prefix of another name, characters below and
# above "/" (" ", "-", ".", "0"), a non-ASCII one.
_NAMES = st.sampled_from(["a", "a-b", "a.b", "a b", "ab", "b", "0", "é", "a0"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=4).map(lambda names: "/t/" + "/".join(names))


@given(st.lists(_PATHS, max_size=30))
def test_walk_key_orders_paths_as_their_components_compared_one_by_one(paths: list[str]) -> None:
    assert sorted(paths, key=walk_key) == sorted(paths, key=lambda p: p.split("/"))


def _reference(listing: list[Op], top: str, paths: Iterable[str], whole: set[str]) -> list[Op]:
    """The first version of ``ops_below``."""
    at = {op.path: i for i, op in enumerate(listing)}
    ops: list[Op] = []
    covered: list[str] = []
    for path in sorted({p for p in paths if p.startswith(top + "/")}, key=lambda p: p.split("/")):
        if covered and is_within(path, covered[-1]):
            continue
        i = at.get(path)
        if i is None:
            ops.append(Op(path, "gone"))
            covered.append(path)
            continue
        op = listing[i]
        if op.kind != "dir":
            ops.append(op)
            covered.append(path)
        elif path in whole:
            ops.append(dataclasses.replace(op, kind="tree"))
            end, prefix = i + 1, path + "/"
            while end < len(listing) and listing[end].path.startswith(prefix):
                end += 1
            ops.extend(listing[i + 1 : end])
            covered.append(path)
        else:
            ops.append(op)
    return ops


@st.composite
def _trees(draw: st.DrawFn) -> tuple[list[Op], list[str], set[str]]:
    """A tree below ``/t`` (files where a path has nothing below it), paths changed in it or gone
    from it (below files and gone directories too), and which of the changed are sent whole."""
    present = draw(st.lists(_PATHS, max_size=25))
    nodes: set[str] = set()
    for path in present:
        parent = path.rpartition("/")[0]
        while parent != "/t":
            nodes.add(parent)
            parent = parent.rpartition("/")[0]
        nodes.add(path)
    dirs = {p.rpartition("/")[0] for p in nodes}
    listing = [Op(p, "dir" if p in dirs else "file", size=len(p)) for p in sorted(nodes, key=walk_key)]
    changed = draw(
        st.lists(st.one_of(st.sampled_from(sorted(nodes)) if nodes else _PATHS, _PATHS), max_size=20)
    )
    changed += (
        draw(st.lists(st.sampled_from(sorted(nodes)).map(lambda p: p + "/x"), max_size=3)) if nodes else []
    )
    whole = set(draw(st.lists(st.sampled_from(changed), max_size=5))) if changed else set()
    return listing, changed, whole


@settings(max_examples=300, deadline=None)
@given(_trees())
def test_ops_below_gives_what_the_sorted_version_gave(tree: tuple[list[Op], list[str], set[str]]) -> None:
    listing, changed, whole = tree
    assert ops_below(listing, "/t", changed, whole) == _reference(listing, "/t", changed, whole)
