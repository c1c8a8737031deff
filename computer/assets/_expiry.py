"""Link lifetimes: whole seconds, rounded up, at most seven days."""

from __future__ import annotations

import math

__all__ = ["DEFAULT_EXPIRES_AFTER", "MAX_EXPIRES_AFTER", "link_lifetime"]

DEFAULT_EXPIRES_AFTER = 3600.0
MAX_EXPIRES_AFTER = 7 * 24 * 3600


def link_lifetime(expires_after: float) -> int:
    """Seconds a link lives: ``expires_after`` rounded up and capped; ≤0, NaN or inf is ``ValueError``."""
    if isinstance(expires_after, bool) or not isinstance(expires_after, int | float):
        raise ValueError(f"expires_after must be a number of seconds, got {expires_after!r}")
    if not math.isfinite(expires_after) or expires_after <= 0:
        raise ValueError(f"expires_after must be a positive, finite number of seconds, got {expires_after!r}")
    return min(MAX_EXPIRES_AFTER, math.ceil(expires_after))
