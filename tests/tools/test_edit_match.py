"""The pure pieces behind edit: Appendix A matching, the diff builder and media sniffing."""

from __future__ import annotations

import difflib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computer.tools._diff import diff_texts
from computer.tools._edit_match import Edit, EditError, apply_edits
from computer.tools._fuzzy_text import FuzzyText, normalize_fuzzy
from computer.tools._media import is_binary_sample, media_by_extension, media_by_magic


def test_normalisation_folds_quotes_dashes_spaces_and_trailing_whitespace() -> None:
    text, tail_trimmed = normalize_fuzzy("“a” ‘b’ x–y—z−w\u00a0v\u3000u  \nnext\t")
    assert text == "\"a\" 'b' x-y-z-w v u\nnext"
    assert tail_trimmed is True


def test_fuzzy_map_rejects_a_boundary_inside_a_cluster() -> None:
    fuzzy = FuzzyText("aﬁb")
    assert fuzzy.normalized == "afib"
    assert fuzzy.map_span(1, 3) == (1, 2)  # "fi" is the whole ligature
    assert fuzzy.map_span(1, 2) is None  # "f" alone cuts the ligature


def test_fuzzy_map_keeps_combining_marks_with_their_base() -> None:
    fuzzy = FuzzyText("cafe\u0301!")
    assert fuzzy.normalized == "café!"
    assert fuzzy.map_span(3, 4) == (3, 5)


def test_fuzzy_start_at_line_end_goes_after_trailing_whitespace() -> None:
    fuzzy = FuzzyText("ab  \ncd")
    assert fuzzy.normalized == "ab\ncd"
    assert fuzzy.map_span(2, 4) == (4, 6)  # "\nc": the spaces stay outside the span
    assert fuzzy.map_span(0, 2) == (0, 2)  # "ab": ends before the spaces


def test_emoji_with_modifiers_is_one_cluster() -> None:
    fuzzy = FuzzyText("x👍🏽y")
    assert fuzzy.map_span(1, 2) is None
    assert fuzzy.map_span(1, 3) == (1, 3)


def test_flags_are_one_cluster_each() -> None:
    fuzzy = FuzzyText("x🇫🇷🇩🇪y")
    assert fuzzy.map_span(1, 3) == (1, 3)  # the French flag
    assert fuzzy.map_span(2, 4) is None  # half of two flags


def test_lone_cr_is_a_line_break_for_matching() -> None:
    outcome = apply_edits("a\rb\rc", [Edit("b\nc", "B")], "/f")
    assert outcome.content == "a\rB"


def test_crlf_old_text_matches_lf_file_and_vice_versa() -> None:
    assert apply_edits("a\nb\n", [Edit("a\r\nb", "x")], "/f").content == "x\n"
    assert apply_edits("a\r\nb\r\n", [Edit("a\nb", "x\ny")], "/f").content == "x\r\ny\r\n"


def test_identical_old_texts_in_one_batch_overlap() -> None:
    with pytest.raises(EditError, match=r"edits\[0\] and edits\[1\] overlap"):
        apply_edits("abc", [Edit("b", "1"), Edit("b", "2")], "/f")


def test_overlapping_occurrences_are_not_unique() -> None:
    with pytest.raises(EditError, match="found 2 times"):
        apply_edits("aaa", [Edit("aa", "b")], "/f")


def test_whitespace_only_old_text_is_only_matched_exactly() -> None:
    with pytest.raises(EditError, match="not found"):
        apply_edits("a\tb", [Edit("   ", "x")], "/f")


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.text(max_size=40),
    target=st.text(min_size=1, max_size=10),
    suffix=st.text(max_size=40),
    replacement=st.text(max_size=10),
)
def test_exact_unique_edit_changes_only_the_span(
    prefix: str, target: str, suffix: str, replacement: str
) -> None:
    marker = "\x00" + target + "\x01"  # NUL/SOH bracket the target so it occurs exactly once
    original = prefix.replace("\x00", "") + marker + suffix.replace("\x00", "")
    try:
        outcome = apply_edits(original, [Edit(marker, replacement)], "/f")
    except EditError as exc:
        assert "No changes" in str(exc) and replacement == marker
        return
    head, _, tail = original.partition(marker)
    if "\r" in original or "\r" in replacement:
        return  # line endings are restyled inside the replacement; covered by the CRLF tests
    assert outcome.content == head + replacement + tail


def apply_patch(old: str, patch: str) -> str:
    """Apply a unified diff (as produced by ``diff_texts``) to ``old``, checking every context line."""
    lines = old.splitlines(True)
    out: list[str] = []
    cursor = 0
    body = patch.splitlines(True)[2:]
    i = 0
    while i < len(body):
        header = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", body[i])
        assert header, body[i]
        start = int(header.group(1)) - (0 if header.group(2) == "0" else 1)
        out.extend(lines[cursor:start])
        cursor = start
        i += 1
        while i < len(body) and not body[i].startswith("@@"):
            sign, text = body[i][0], body[i][1:]
            if i + 1 < len(body) and body[i + 1].startswith("\\"):
                text = text[:-1]
                i += 1
            if sign in " -":
                assert lines[cursor] == text
                cursor += 1
            if sign in " +":
                out.append(text)
            i += 1
    out.extend(lines[cursor:])
    return "".join(out)


@settings(max_examples=200, deadline=None)
@given(
    old=st.lists(st.sampled_from(["a", "b", "c", "dd", ""]), max_size=30),
    new=st.lists(st.sampled_from(["a", "b", "c", "dd", ""]), max_size=30),
    old_final_newline=st.booleans(),
    new_final_newline=st.booleans(),
)
def test_patch_applies_to_old_and_gives_new(
    old: list[str], new: list[str], old_final_newline: bool, new_final_newline: bool
) -> None:
    old_text = "\n".join(old) + ("\n" if old and old_final_newline else "")
    new_text = "\n".join(new) + ("\n" if new and new_final_newline else "")
    result = diff_texts(old_text, new_text, "/f")
    assert apply_patch(old_text, result.patch) == new_text
    if old_text == new_text:
        assert result.patch == "" and result.first_changed_line is None


def test_patch_matches_difflib_for_a_simple_change() -> None:
    old = "".join(f"{i}\n" for i in range(20))
    new = old.replace("7\n", "seven\n")
    expected = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "/f", "/f", n=4))
    assert diff_texts(old, new, "/f").patch == expected


def test_diff_first_changed_line_and_missing_final_newline() -> None:
    result = diff_texts("a\nb", "a\nc", "/f")
    assert result.first_changed_line == 2
    assert result.patch.endswith("+c\n\\ No newline at end of file\n")


def test_media_detection() -> None:
    assert media_by_extension("/x/Photo.JPEG") is not None
    assert media_by_extension("/x/logo.svg") is None
    assert media_by_magic(b"GIF89a...") is not None
    assert media_by_magic(b"RIFF\x00\x00\x00\x00WEBPVP8 ") is not None
    assert is_binary_sample(b"caf\xe9\n") is False
    assert is_binary_sample("日本語".encode()[:-1]) is False  # a character cut by the sample end
    assert is_binary_sample(b"a\x00b") is True


FUZZY_ALPHABET = ["a", "b", " ", "'", '"', "-", "\n", "“", "’", "—", "\u00a0", "ﬁ", "e\u0301", "é", "\t"]
FOLD_VARIANTS = {"“": '"', "’": "'", "—": "-", "\u00a0": " ", "ﬁ": "fi", "e\u0301": "é"}


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(FUZZY_ALPHABET), min_size=1, max_size=30),
    start=st.integers(0, 29),
    length=st.integers(1, 10),
    trailing=st.sampled_from(["", " ", "  "]),
)
def test_fuzzy_edit_changes_nothing_outside_a_span_that_normalises_to_the_needle(
    pieces: list[str], start: int, length: int, trailing: str
) -> None:
    original = "".join(pieces)
    chosen = pieces[start : start + length]
    needle = "".join(FOLD_VARIANTS.get(p, p) for p in chosen) + trailing
    sentinel = "\x00NEW\x00"
    try:
        outcome = apply_edits(original, [Edit(needle, sentinel)], "/f")
    except EditError:
        return  # not found, not unique or ambiguous: the error path is covered elsewhere
    head, _, tail = outcome.content.partition(sentinel)
    assert original.startswith(head) and original.endswith(tail)
    span = original[len(head) : len(original) - len(tail)]
    assert span == needle or normalize_fuzzy(span)[0] == normalize_fuzzy(needle)[0]


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["a", "b", "c", "", "dd", "a b"]), min_size=1, max_size=40),
    picks=st.lists(
        st.tuples(st.integers(0, 39), st.sampled_from(["X", "", "Y\nZ", "a\n"])), min_size=1, max_size=3
    ),
    final_newline=st.booleans(),
)
def test_diff_of_the_changed_region_equals_the_full_diff(
    lines: list[str], picks: list[tuple[int, str]], final_newline: bool
) -> None:
    original = "\n".join(f"{i}:{line}" for i, line in enumerate(lines)) + ("\n" if final_newline else "")
    edits = []
    for index, replacement in picks:
        if index < len(lines):
            edits.append(Edit(f"{index}:{lines[index]}", replacement))
    if not edits:
        return
    try:
        outcome = apply_edits(original, edits, "/f")
    except EditError:
        return
    hinted = diff_texts(outcome.old_view, outcome.new_view, "/f", changed=outcome.changed)
    full = diff_texts(outcome.old_view, outcome.new_view, "/f")
    assert apply_patch(outcome.old_view, hinted.patch) == outcome.new_view
    assert hinted.first_changed_line == full.first_changed_line
    assert hinted.diff.count("\n") == full.diff.count("\n")
