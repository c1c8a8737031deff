"""Share-link ids: 16 random bytes in Crockford base32 (26 characters, unguessable)."""

from __future__ import annotations

import secrets

__all__ = ["CROCKFORD_ALPHABET", "ID_LENGTH", "new_asset_id"]

CROCKFORD_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_BYTES = 16
ID_LENGTH = 26  # ceil(128 / 5)


def new_asset_id() -> str:
    """A fresh id: 128 bits from ``secrets``, most significant 5-bit group first."""
    value = int.from_bytes(secrets.token_bytes(ID_BYTES), "big")
    digits = []
    for _ in range(ID_LENGTH):
        digits.append(CROCKFORD_ALPHABET[value & 0x1F])
        value >>= 5
    return "".join(reversed(digits))
