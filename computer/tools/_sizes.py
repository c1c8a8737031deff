"""Byte counts as the tools print them in descriptions and errors."""

from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(size: int) -> str:
    """``2 MiB``, ``256 KiB``, ``3.5 MiB``, ``700 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{size} bytes" if size != 1 else "1 byte"
