"""The fuzzy view of a text used by edit's fallback lookup, with a map back to the original.

Normalisation (SPEC Appendix A step 4): NFKC, curly quotes → ASCII quotes, Unicode dashes and minus →
``-``, special spaces → space, trailing whitespace trimmed per line. It is applied per *cluster* (a
base character plus the marks, joiners and selectors that attach to it; a conservative stand-in for a
grapheme), so every cluster maps to one piece of normalised text and a normalised offset maps back to
the original only when it falls between pieces. A hit that starts or ends inside a piece (``f`` inside
``ﬁ``) has no clean original span and is rejected.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["FuzzyText", "normalize_fuzzy"]

_FOLD = str.maketrans(
    {
        **dict.fromkeys(range(0x2018, 0x201C), "'"),
        **dict.fromkeys(range(0x201C, 0x2020), '"'),
        **dict.fromkeys(range(0x2010, 0x2016), "-"),
        0x2212: "-",
        0x00A0: " ",
        **dict.fromkeys(range(0x2002, 0x200B), " "),
        0x202F: " ",
        0x205F: " ",
        0x3000: " ",
    }
)

_MARK_CATEGORIES = frozenset({"Mn", "Mc", "Me"})
_ZWJ = "\u200d"


def _attaches(ch: str) -> bool:
    """True when ``ch`` belongs to the cluster of the character before it."""
    code = ord(ch)
    return (
        unicodedata.category(ch) in _MARK_CATEGORIES
        or ch == _ZWJ
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0xE0100 <= code <= 0xE01EF
        or 0x1F3FB <= code <= 0x1F3FF  # emoji skin tones
        or 0x1160 <= code <= 0x11FF  # Hangul medial/final jamo
        or 0xD7B0 <= code <= 0xD7FF
    )


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _clusters(line: str) -> list[str]:
    out: list[str] = []
    for ch in line:
        if out and (
            _attaches(ch)
            or out[-1].endswith(_ZWJ)
            # Flags are pairs of regional indicators.
            or (_is_regional_indicator(ch) and len(out[-1]) == 1 and _is_regional_indicator(out[-1]))
        ):
            out[-1] += ch
        else:
            out.append(ch)
    return out


def _normalize_cluster(cluster: str) -> str:
    return unicodedata.normalize("NFKC", cluster).translate(_FOLD)


@dataclass(slots=True)
class _Line:
    original: str
    normalized: str  # trailing whitespace already trimmed
    trimmed: bool  # whether trailing whitespace was removed
    # normalised offset -> original offset for every clean boundary up to len(normalized);
    # None means the identity (an ASCII line).
    bounds: dict[int, int] | None


def _normalize_line(line: str, *, trim: bool = True) -> _Line:
    if line.isascii():
        stripped = line.rstrip() if trim else line
        return _Line(line, stripped, len(stripped) < len(line), None)
    bounds: dict[int, int] = {0: 0}
    pieces: list[str] = []
    norm_pos = 0
    orig_pos = 0
    for cluster in _clusters(line):
        piece = _normalize_cluster(cluster)
        pieces.append(piece)
        norm_pos += len(piece)
        orig_pos += len(cluster)
        bounds[norm_pos] = orig_pos
    full = "".join(pieces)
    trimmed = full.rstrip() if trim else full
    clean = {k: v for k, v in bounds.items() if k <= len(trimmed)}
    return _Line(line, trimmed, len(trimmed) < len(full), clean)


def normalize_fuzzy(text: str, *, keep_tail: bool = False) -> tuple[str, bool]:
    """Normalise LF text for fuzzy lookup; also say whether the last line lost trailing whitespace.

    ``keep_tail`` keeps (folded) trailing whitespace on the last line, for a needle that ends mid-line.
    """
    split = text.split("\n")
    lines = [_normalize_line(line) for line in split[:-1]]
    lines.append(_normalize_line(split[-1], trim=not keep_tail))
    return "\n".join(line.normalized for line in lines), lines[-1].trimmed


class FuzzyText:
    """The normalised view of one LF text and the map from normalised spans back to original spans."""

    def __init__(self, text: str) -> None:
        self.original = text
        self._lines = [_normalize_line(line) for line in text.split("\n")]
        self.normalized = "\n".join(line.normalized for line in self._lines)
        self._norm_starts: list[int] = []
        self._orig_starts: list[int] = []
        norm = orig = 0
        for line in self._lines:
            self._norm_starts.append(norm)
            self._orig_starts.append(orig)
            norm += len(line.normalized) + 1
            orig += len(line.original) + 1

    def is_line_end(self, pos: int) -> bool:
        """True when normalised offset ``pos`` is the end of a (trimmed) line."""
        index = bisect_right(self._norm_starts, pos) - 1
        return pos - self._norm_starts[index] == len(self._lines[index].normalized)

    def _map(self, pos: int, *, is_start: bool) -> int | None:
        index = bisect_right(self._norm_starts, pos) - 1
        line = self._lines[index]
        local = pos - self._norm_starts[index]
        base = self._orig_starts[index]
        if local == len(line.normalized) and is_start:
            # A start at a line's end goes after the trimmed whitespace, so the whitespace stays.
            return base + len(line.original)
        if line.bounds is None:
            return base + local
        mapped = line.bounds.get(local)
        return None if mapped is None else base + mapped

    def map_span(self, start: int, end: int) -> tuple[int, int] | None:
        """Original ``(start, end)`` of normalised ``[start, end)``; None when it does not map cleanly."""
        orig_start = self._map(start, is_start=True)
        orig_end = self._map(end, is_start=False)
        if orig_start is None or orig_end is None or orig_end < orig_start:
            return None
        return orig_start, orig_end
