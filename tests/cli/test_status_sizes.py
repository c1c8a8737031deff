"""`computer status`'s pool size column: a pool turned off says so; a pool is elastic when its
maximum is above its minimum (issue 23), ``auto`` when that maximum follows the cluster's CPUs."""

from __future__ import annotations

import pytest

from computer.cli._status import _size


@pytest.mark.parametrize(
    ("pool", "shown"),
    [
        ({"min": 0, "max": 0, "max_setting": None}, "off"),  # was "0..0 (elastic)"
        ({"min": 2, "max": 8, "max_setting": None}, "2..8 (elastic, auto)"),
        ({"min": 2, "max": 2, "max_setting": None}, "2..2"),  # a cluster with room for the minimum only
        ({"min": 2, "max": 4, "max_setting": 4}, "2..4 (elastic)"),
        ({"min": 3, "max": 3, "max_setting": 3}, "3..3"),
    ],
)
def test_the_size_column(pool: dict[str, object], shown: str) -> None:
    assert _size(pool) == shown
