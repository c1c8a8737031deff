"""The pieces of a link: ids, lifetimes and Content-Disposition values."""

from __future__ import annotations

import math
import re

import pytest

from computer.assets import (
    CROCKFORD_ALPHABET,
    ID_LENGTH,
    MAX_EXPIRES_AFTER,
    content_disposition,
    link_lifetime,
    new_asset_id,
)

CROCKFORD_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def test_ids_are_26_crockford_characters_of_128_random_bits() -> None:
    ids = {new_asset_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert ID_LENGTH == 26
    for asset_id in ids:
        assert CROCKFORD_ID.match(asset_id), asset_id
        assert not set(asset_id) & set("ILOU")
    # 26 base-32 digits carry 130 bits; the top one holds only 3 bits of the 128, so it is 0-7.
    assert {a[0] for a in ids} <= set("01234567")
    assert len({a[0] for a in ids}) == 8
    assert len({c for a in ids for c in a[1:]}) == len(CROCKFORD_ALPHABET) == 32


@pytest.mark.parametrize(
    ("requested", "seconds"),
    [(0.001, 1), (0.2, 1), (1, 1), (1.0001, 2), (59.5, 60), (3600.0, 3600), (7 * 86400, 7 * 86400)],
)
def test_lifetime_is_rounded_up_to_whole_seconds(requested: float, seconds: int) -> None:
    assert link_lifetime(requested) == seconds


@pytest.mark.parametrize("requested", [7 * 86400 + 0.5, 8 * 86400, 10**12])
def test_lifetime_is_capped_at_seven_days(requested: float) -> None:
    assert link_lifetime(requested) == MAX_EXPIRES_AFTER == 604800


@pytest.mark.parametrize("requested", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, True, "60"])
def test_invalid_lifetime_is_value_error(requested: object) -> None:
    with pytest.raises(ValueError):
        link_lifetime(requested)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("disposition", "name", "expected"),
    [
        ("inline", "a.txt", 'inline; filename="a.txt"'),
        ("attachment", "report 1.pdf", 'attachment; filename="report 1.pdf"'),
        (
            "inline",
            'say "hi".txt',
            'inline; filename="say \\"hi\\".txt"; filename*=UTF-8\'\'say%20%22hi%22.txt',
        ),
        (
            "attachment",
            "日本.txt",
            "attachment; filename=\"__.txt\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC.txt",
        ),
        ("inline", "😀", "inline; filename=\"_\"; filename*=UTF-8''%F0%9F%98%80"),
    ],
)
def test_content_disposition_encodes_the_filename(disposition: str, name: str, expected: str) -> None:
    assert content_disposition(disposition, name) == expected


def test_content_disposition_rejects_other_types() -> None:
    with pytest.raises(ValueError):
        content_disposition("form-data", "a.txt")
