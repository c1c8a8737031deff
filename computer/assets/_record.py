"""``AssetRecord``: what a store keeps about one shared file (never the bytes themselves)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["AssetRecord"]


@dataclass(frozen=True)
class AssetRecord:
    """One share link. ``key`` is ``[<prefix>/]<id>/<filename>``; times are Unix seconds.

    ``source_path``, ``workspace_id`` and ``prefix`` are kept for bookkeeping; the HTTP server never
    sends them. ``size`` and ``etag`` (hex SHA-256 of the bytes) are filled in by the store's ``put``.
    """

    key: str
    filename: str
    content_type: str
    disposition: str
    created_at: float
    expires_at: float
    source_path: str = ""
    workspace_id: str = ""
    prefix: str | None = None
    size: int = 0
    etag: str = ""

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def remaining(self, now: float) -> int:
        """Whole seconds left (rounded down, never negative): the bound for ``Cache-Control``."""
        return max(0, math.floor(self.expires_at - now))

    @property
    def expires_at_ms(self) -> int:
        return math.ceil(self.expires_at * 1000)

    def to_wire(self) -> dict[str, Any]:
        """Plain values for msgpack or JSON."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> AssetRecord:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in fields})
