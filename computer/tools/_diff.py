"""The diffs edit returns: a unified ``patch`` (4 lines of context) and a line-numbered display ``diff``.

Common leading and trailing lines are stripped first, so a small edit of a large file costs little. The
rest is diffed by a work-bounded Myers (``_myers``): whatever the lines are, one diff costs at most
``DIFF_BUDGET`` units of work (~1-2 s). Past that budget the changed region is *summarised*: shown as one
hunk that replaces every line between the common head and tail (still a valid patch) and flagged
``truncated``. Very large diffs are shortened and flagged the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._myers import DEFAULT_BUDGET, Opcode, myers_opcodes

__all__ = ["CONTEXT_LINES", "DIFF_BUDGET", "MAX_DIFF_BYTES", "MAX_DIFF_LINES", "FileDiff", "diff_texts"]

CONTEXT_LINES = 4
MAX_DIFF_LINES = 2000  # changed lines beyond which the diff is shortened
MAX_DIFF_BYTES = 128 * 1024
DIFF_BUDGET = DEFAULT_BUDGET  # units of Myers work per diff before the region is summarised


@dataclass(frozen=True, slots=True)
class FileDiff:
    patch: str
    diff: str
    first_changed_line: int | None  # 1-based, in the new text
    truncated: bool  # shortened or summarised: read the file to see the result


def _opcodes(old: list[str], new: list[str], budget: int) -> tuple[list[Opcode], bool]:
    """Opcodes over the whole texts and whether the middle was summarised (over ``budget``)."""
    head = 0
    limit = min(len(old), len(new))
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[len(old) - 1 - tail] == new[len(new) - 1 - tail]:
        tail += 1
    old_middle, new_middle = old[head : len(old) - tail], new[head : len(new) - tail]
    middle = myers_opcodes(old_middle, new_middle, budget) if old_middle and new_middle else None
    summarised = middle is None and bool(old_middle) and bool(new_middle)
    if middle is None:  # one side empty (a pure insert or delete), or over the budget
        tag = "replace" if old_middle and new_middle else ("delete" if old_middle else "insert")
        middle = [(tag, 0, len(old_middle), 0, len(new_middle))] if old_middle or new_middle else []
    codes: list[Opcode] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    for tag, i1, i2, j1, j2 in middle:
        codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(old) - tail, len(old), len(new) - tail, len(new)))
    return codes, summarised


def _groups(codes: list[Opcode], n: int) -> list[list[Opcode]]:
    """Hunks with ``n`` lines of context (the same grouping as ``SequenceMatcher.get_grouped_opcodes``)."""
    codes = [c for c in codes if not (c[0] == "equal" and c[1] == c[2])]
    if not codes or all(c[0] == "equal" for c in codes):
        return []
    codes = list(codes)
    tag, i1, i2, j1, j2 = codes[0]
    if tag == "equal":
        codes[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    tag, i1, i2, j1, j2 = codes[-1]
    if tag == "equal":
        codes[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups: list[list[Opcode]] = []
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def _range(start: int, stop: int) -> str:
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def _body(line: str) -> tuple[str, bool]:
    return (line[:-1], True) if line.endswith("\n") else (line, False)


def _line_start_before(text: str, pos: int, lines: int) -> int:
    """Start of the line holding ``pos``, moved back ``lines`` more lines."""
    start = text.rfind("\n", 0, pos) + 1
    for _ in range(lines):
        if start == 0:
            break
        start = text.rfind("\n", 0, start - 1) + 1
    return start


def _line_start_after(text: str, pos: int, lines: int) -> int:
    """Start of the line after the one holding ``pos``, moved forward ``lines`` more lines (or the end)."""
    end = pos
    for _ in range(lines + 1):
        newline = text.find("\n", end)
        if newline < 0:
            return len(text)
        end = newline + 1
    return end


def _line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def diff_texts(
    old: str,
    new: str,
    path: str,
    *,
    changed: tuple[int, int, int] | None = None,
    budget: int = DIFF_BUDGET,
) -> FileDiff:
    """Diff two LF texts in bounded time (see the module docstring).

    ``changed = (start, old_end, new_end)`` promises that the texts differ only within
    ``old[start:old_end]`` / ``new[start:new_end]``; only that region (plus context) is then diffed.
    """
    base = 0
    if changed is not None and not (
        old[: changed[0]] == new[: changed[0]] and old[changed[1] :] == new[changed[2] :]
    ):
        changed = None  # a wrong promise costs speed, never correctness
    if changed is not None:
        start, old_end, new_end = changed
        window_start = _line_start_before(old, start, CONTEXT_LINES)
        window_old_end = _line_start_after(old, old_end, CONTEXT_LINES)
        window_new_end = window_old_end + (new_end - old_end)
        base = old.count("\n", 0, window_start)
        old_lines = old[window_start:window_old_end].splitlines(keepends=True)
        new_lines = new[window_start:window_new_end].splitlines(keepends=True)
        width = len(str(max(_line_count(old), _line_count(new), 1)))
    else:
        old_lines = old.splitlines(keepends=True)
        new_lines = new.splitlines(keepends=True)
        width = len(str(max(len(old_lines), len(new_lines), 1)))
    codes, summarised = _opcodes(old_lines, new_lines, budget)
    first_changed: int | None = None
    for tag, _, _, j1, _ in codes:
        if tag != "equal":
            first_changed = base + j1 + 1
            break
    patch: list[str] = [f"--- {path}\n", f"+++ {path}\n"]
    display: list[str] = []
    changed_lines = 0
    size = 0
    truncated = False
    for group in _groups(codes, CONTEXT_LINES):
        if truncated:
            break
        first, last = group[0], group[-1]
        patch.append(
            f"@@ -{_range(base + first[1], base + last[2])} +{_range(base + first[3], base + last[4])} @@\n"
        )
        if display:
            display.append(" " * (width + 1) + "...")
        for tag, i1, i2, j1, j2 in group:
            rows: list[tuple[str, int, str]] = []
            if tag == "equal":
                rows = [(" ", base + j1 + k + 1, old_lines[i1 + k]) for k in range(i2 - i1)]
            else:
                rows = [("-", base + i1 + k + 1, old_lines[i1 + k]) for k in range(i2 - i1)]
                rows += [("+", base + j1 + k + 1, new_lines[j1 + k]) for k in range(j2 - j1)]
            for sign, number, line in rows:
                if sign != " ":
                    changed_lines += 1
                text, has_newline = _body(line)
                patch.append(f"{sign}{text}\n")
                if not has_newline:
                    patch.append("\\ No newline at end of file\n")
                display.append(f"{sign}{number:>{width}} {text}")
                size += len(text) * 2 + width + 4
                if changed_lines > MAX_DIFF_LINES or size > MAX_DIFF_BYTES:
                    truncated = True
                    break
            if truncated:
                break
    if truncated:
        note = "... (diff truncated: too many changed lines; read the file to see the result)"
        patch.append(note + "\n")
        display.append(note)
    elif summarised:
        # The patch stays a valid unified diff; only the display says it is coarser than a minimal one.
        display.append("... (diff summarised: the changed lines are shown as one replacement)")
    return FileDiff(
        "".join(patch) if len(patch) > 2 else "", "\n".join(display), first_changed, truncated or summarised
    )
