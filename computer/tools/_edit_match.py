"""Edit matching (SPEC Appendix A): locate every ``oldText`` in the original and splice replacements.

Pure functions over strings. Matching runs on an LF view of the file; the replacements are spliced into
the *original* text (BOM stripped and restored, CRLF kept where it was), so bytes outside the matched
ranges never change, even in a file with mixed line endings.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from ._fuzzy_text import FuzzyText, normalize_fuzzy

__all__ = ["Edit", "EditError", "EditOutcome", "apply_edits", "check_edits", "to_lf"]

_BOM = "\ufeff"
_MAX_FUZZY_CANDIDATES = 1000
# Characters of fuzzy candidate work per oldText (each candidate costs about len(needle) to find and
# to check): a long needle that overlaps itself everywhere ("a a a ...") gets fewer candidates, so one
# edit stays bounded in time (it took 15 s for a 10,000-character needle in a 1 MB file).
_FUZZY_WORK = 2_000_000
_CRLF = re.compile("\r\n")


class EditError(ValueError):
    """An edit batch that cannot be applied; the message tells the model what to do instead."""


@dataclass(frozen=True, slots=True)
class Edit:
    old_text: str
    new_text: str


@dataclass(frozen=True, slots=True)
class EditOutcome:
    """The new file text plus LF views of before and after (for the diff)."""

    content: str
    old_view: str
    new_view: str
    applied: int
    changed: tuple[int, int, int]  # (start, old_end, new_end): where the LF views differ, at most


def to_lf(text: str) -> str:
    """``\\r\\n`` → ``\\n``, then a lone ``\\r`` → ``\\n``."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_edits(edits: Sequence[Edit]) -> None:
    """Reject an empty batch and any empty ``oldText`` before touching the file."""
    if not edits:
        raise EditError("edits is empty: give at least one {oldText, newText} pair.")
    for index, edit in enumerate(edits):
        if edit.old_text == "":
            raise EditError(
                f"edits[{index}].oldText is empty: copy the exact text to replace from the file "
                "(use write to create or replace a whole file)."
            )


class _LfView:
    """The LF view of a text and the map from LF offsets back to original offsets."""

    def __init__(self, text: str) -> None:
        self.text = to_lf(text)
        # LF offsets of every "\n" whose "\r" was dropped; a lone "\r" became "\n" in place.
        self._dropped = [m.start() - k for k, m in enumerate(_CRLF.finditer(text))] if "\r" in text else []

    def to_original(self, pos: int) -> int:
        return pos + bisect_left(self._dropped, pos)


def _occurrences(haystack: str, needle: str, cap: int) -> list[int]:
    found: list[int] = []
    pos = haystack.find(needle)
    while pos >= 0 and len(found) < cap:
        found.append(pos)
        pos = haystack.find(needle, pos + 1)
    return found


def _count_text(count: int, cap: int) -> str:
    return f"at least {cap}" if count >= cap else str(count)


def _fuzzy_candidates(fuzzy: FuzzyText, old: str) -> tuple[list[tuple[int, int, bool]], dict[bool, str], int]:
    """Normalised hits ``(start, end, tail_kept)`` of ``old``, the normalised needle for each
    ``tail_kept``, and the candidate cap used.

    The needle's last line is tried trimmed (a hit must then end where a line ends, or ``x = `` would
    match the ``x =`` of ``x = 1``) and, when trimming removed something, untrimmed (a hit inside a line).
    """
    needle, tail_trimmed = normalize_fuzzy(old)
    variants = [(needle, False)]
    if tail_trimmed:
        variants.append((normalize_fuzzy(old, keep_tail=True)[0], True))
    hits: list[tuple[int, int, bool]] = []
    cap = _fuzzy_cap(len(needle))
    for text, tail_kept in variants:
        if not text.strip():
            continue
        for start in _occurrences(fuzzy.normalized, text, cap):
            end = start + len(text)
            if tail_trimmed and not tail_kept and not fuzzy.is_line_end(end):
                continue
            hits.append((start, end, tail_kept))
    return hits, {kept: text for text, kept in variants}, cap


def _fuzzy_cap(needle_length: int) -> int:
    """How many fuzzy candidates one needle may try: at least 2 (enough to tell "not unique")."""
    return max(2, min(_MAX_FUZZY_CANDIDATES, _FUZZY_WORK // max(1, needle_length)))


def _locate_fuzzy(fuzzy: FuzzyText, old: str, index: int, path: str) -> tuple[int, int] | None:
    hits, wanted, cap = _fuzzy_candidates(fuzzy, old)
    if not hits:
        return None
    spans: list[tuple[int, int]] = []
    for start, end, tail_kept in hits:
        span = fuzzy.map_span(start, end)
        if span is None:
            continue
        original = fuzzy.original[span[0] : span[1]]
        if normalize_fuzzy(original, keep_tail=tail_kept)[0] != wanted[tail_kept]:
            continue
        spans.append(span)
    if len(spans) > 1:
        raise EditError(
            f"edits[{index}].oldText was found {_count_text(len(spans), cap)} times in "
            f"{path} (after normalising quotes, dashes, spaces and trailing whitespace); it must be "
            "unique. Include more surrounding lines to pick one occurrence."
        )
    if not spans:
        raise EditError(
            f"edits[{index}].oldText matches {path} only after Unicode normalisation, and the match "
            "does not map cleanly onto the file's characters. Copy a larger exact range from the file."
        )
    return spans[0]


def _locate(text: str, fuzzy: list[FuzzyText], old: str, index: int, path: str) -> tuple[int, int]:
    exact = _occurrences(text, old, 2)
    if len(exact) == 1:
        return exact[0], exact[0] + len(old)
    if len(exact) > 1:
        # Non-overlapping count in one linear pass (counting overlapping hits one find at a time was
        # quadratic: 61 s for a 20,000-character run of one letter); two overlapping hits say "2".
        count = max(2, text.count(old))
        raise EditError(
            f"edits[{index}].oldText was found {count} times in {path}; it must be unique. "
            "Include more surrounding lines to pick one occurrence."
        )
    if not fuzzy:
        fuzzy.append(FuzzyText(text))
    span = _locate_fuzzy(fuzzy[0], old, index, path)
    if span is None:
        if _REPLACEMENT in old and _matches_undecodable(text, old):
            # read shows each undecodable byte as U+FFFD; copying it again would fail again.
            raise EditError(
                f"edits[{index}].oldText was not found in {path}. It contains U+FFFD ({_REPLACEMENT}), "
                "which read shows in place of bytes of this file that are not valid UTF-8; edit matches "
                "the file's real bytes, so that text can never match. Use an oldText without those "
                "characters (the text next to them), or change those bytes with exec (sed, iconv)."
            )
        raise EditError(
            f"edits[{index}].oldText was not found in {path}. It must match the file exactly, "
            "including whitespace and indentation: read the file again and copy the text."
        )
    return span


_REPLACEMENT = "\ufffd"


def _matches_undecodable(text: str, old: str) -> bool:
    """Whether ``old`` is in ``text`` once each run of U+FFFD stands for a run of undecodable bytes (in
    the surrogateescape decoding of the file: U+DC80-U+DCFF). Only on the not-found path."""
    pattern = "[\udc80-\udcff]+".join(re.escape(part) for part in re.split("\ufffd+", old))
    return re.search(pattern, text) is not None


def apply_edits(original: str, edits: Sequence[Edit], path: str) -> EditOutcome:
    """Apply a batch against ``original``; every ``oldText`` is matched against the original content."""
    check_edits(edits)
    bom = _BOM if original.startswith(_BOM) else ""
    body = original[len(bom) :]
    first_newline = body.find("\n")
    newline = "\r\n" if first_newline > 0 and body[first_newline - 1] == "\r" else "\n"
    view = _LfView(body)
    fuzzy: list[FuzzyText] = []  # built lazily: only a missed exact lookup pays for it

    spans: list[tuple[int, int, int, str]] = []
    for index, edit in enumerate(edits):
        start, end = _locate(view.text, fuzzy, to_lf(edit.old_text), index, path)
        spans.append((start, end, index, to_lf(edit.new_text)))
    spans.sort()
    for before, after in pairwise(spans):
        if after[0] < before[1]:
            first, second = sorted((before[2], after[2]))
            raise EditError(
                f"edits[{first}] and edits[{second}] overlap in {path}. Every oldText is matched against "
                "the original content, not the result of earlier edits: merge them into one edit."
            )

    pieces: list[str] = []
    cursor = len(body)
    for start, end, _, new in reversed(spans):
        orig_start, orig_end = view.to_original(start), view.to_original(end)
        pieces.append(body[orig_end:cursor])
        pieces.append(new.replace("\n", newline) if newline != "\n" else new)
        cursor = orig_start
    pieces.append(body[:cursor])
    new_body = "".join(reversed(pieces))
    if new_body == body:
        raise EditError(f"No changes: the edits leave {path} exactly as it was.")
    new_view = to_lf(new_body)
    old_end = spans[-1][1]
    changed = (spans[0][0], old_end, old_end + len(new_view) - len(view.text))
    return EditOutcome(bom + new_body, view.text, new_view, len(edits), changed)
