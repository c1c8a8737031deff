"""What the read tool does with a file: text, inline media (image/PDF) or unsupported binary.

Known image and PDF extensions decide without reading; other files are sniffed from their first
``media_sniff_bytes``: magic bytes first, then NUL bytes or mostly invalid UTF-8 mean binary.
SVG is XML source, so it is read as text.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal

__all__ = ["MediaKind", "MediaType", "is_binary_sample", "media_by_extension", "media_by_magic"]

MediaKind = Literal["image", "file"]


@dataclass(frozen=True, slots=True)
class MediaType:
    kind: MediaKind
    media_type: str


_BY_EXTENSION = {
    ".png": MediaType("image", "image/png"),
    ".jpg": MediaType("image", "image/jpeg"),
    ".jpeg": MediaType("image", "image/jpeg"),
    ".gif": MediaType("image", "image/gif"),
    ".webp": MediaType("image", "image/webp"),
    ".pdf": MediaType("file", "application/pdf"),
}

# Share of undecodable bytes above which a sample counts as binary (``caf\xe9\n`` stays text).
_INVALID_SHARE = 0.3


def media_by_extension(path: str) -> MediaType | None:
    """Image/PDF by extension, case-insensitively; None for anything else (including ``.svg``)."""
    return _BY_EXTENSION.get(posixpath.splitext(path)[1].lower())


def media_by_magic(sample: bytes) -> MediaType | None:
    """Image/PDF by the magic bytes at the start of ``sample``."""
    if sample.startswith(b"\x89PNG\r\n\x1a\n"):
        return _BY_EXTENSION[".png"]
    if sample.startswith(b"\xff\xd8\xff"):
        return _BY_EXTENSION[".jpg"]
    if sample.startswith((b"GIF87a", b"GIF89a")):
        return _BY_EXTENSION[".gif"]
    if len(sample) >= 12 and sample.startswith(b"RIFF") and sample[8:12] == b"WEBP":
        return _BY_EXTENSION[".webp"]
    if sample.startswith(b"%PDF-"):
        return _BY_EXTENSION[".pdf"]
    return None


def _invalid_utf8_bytes(sample: bytes) -> int:
    invalid = 0
    pos = 0
    while pos < len(sample):
        try:
            sample[pos:].decode("utf-8")
            break
        except UnicodeDecodeError as exc:
            start, end = pos + exc.start, pos + exc.end
            if end >= len(sample) and exc.reason == "unexpected end of data":
                break  # a character cut by the end of the sample, not an invalid one
            invalid += end - start
            pos = end
    return invalid


def is_binary_sample(sample: bytes) -> bool:
    """A NUL byte, or a sample that is mostly not UTF-8."""
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    return _invalid_utf8_bytes(sample) > _INVALID_SHARE * len(sample)
