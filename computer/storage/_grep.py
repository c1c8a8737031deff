"""Line matching for grep: literal or RE2 patterns over a file streamed chunk by chunk.

Regular expressions use RE2 (``google-re2``), whose matching time is linear in the input, so no
pattern (``(a+)+$``…) can hang the owner. Lines split on ``\\n``; a final line without a newline
counts; a line straddling chunks is reassembled before matching. Text is decoded as UTF-8 with
invalid bytes replaced.

The scan yields ``None`` after each chunk it has taken (a *tick*) besides the matches: a point where
its caller may give the event loop away (``FileSystem.grep`` does, in slices), so one grep over a
large file never holds the owner's loop for its whole run.

A page's ``offset`` is spent here (``skip``, shared by the files of one search): a match before it
is a tick, never a ``GrepMatch`` (nor its line number, text or context). Built and then dropped by
the pager, each cost ~2.5 us: an offset of 3 million built 3 million objects.
"""

from __future__ import annotations

import errno
import re
from collections import deque
from collections.abc import Iterable, Iterator

import re2

from .errors import fs_error
from .types import GrepContextLine, GrepMatch

__all__ = ["BINARY_SNIFF_BYTES", "LineMatcher", "grep_file"]

Skip = list[int]
"""``[n]``: how many matches are still to be skipped (the page's offset), counted down by the scan."""

BINARY_SNIFF_BYTES = 8192


def _re2_message(exc: re2.error) -> str:
    """RE2's reason as text (the binding carries it as bytes: ``b'missing ): foo('``), with what to do
    when the pattern used what RE2 leaves out by design (lookaround, backreferences, atomic groups,
    possessive repeats): "invalid perl operator: (?<=" alone sent a model round variants of the same
    lookbehind."""
    reason = exc.args[0] if exc.args else exc
    text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    if _PERL_ONLY.match(text):
        text += (
            " (RE2 runs in linear time and has no lookaround, backreferences, atomic groups or "
            "possessive repeats: search for a plainer pattern and check the lines found, or run "
            "grep -P through exec)"
        )
    return text


# RE2's reasons for a construct it does not have (not a typo in one it has).
_PERL_ONLY = re.compile(
    r"invalid perl operator: \(\?[=!<>]|invalid escape sequence: \\[1-9k]|bad repetition operator: [*+?]\+"
)


class LineMatcher:
    """A compiled grep query. ``block`` scans many lines at once; ``line`` tests one line."""

    def __init__(self, pattern: str, *, regex: bool, ignore_case: bool, path: str) -> None:
        self.literal: bytes | None = None
        self._text = pattern
        if not regex and not ignore_case:
            self.literal = pattern.encode("utf-8")
            self._line: re2._Regexp | None = None
            self._block: re2._Regexp | None = None
            return
        source = pattern if regex else re.escape(pattern)
        options = re2.Options()
        options.case_sensitive = not ignore_case
        options.log_errors = False  # the error is raised to the caller, not also written to stderr
        try:
            self._line = re2.compile(source, options)
            self._block = re2.compile("(?m:" + source + ")", options)
        except re2.error as exc:
            raise fs_error(
                errno.EINVAL, path, f"Invalid regular expression (RE2 syntax): {_re2_message(exc)}"
            ) from None

    def line(self, text: str) -> bool:
        if self.literal is not None:
            return self._text in text
        assert self._line is not None
        return self._line.search(text) is not None

    def block(self, raw: bytes) -> Iterator[int]:
        """Indices (line offsets within ``raw``, which holds whole lines) of the matching lines.

        RE2 runs on the bytes: the binding encodes a ``str`` to UTF-8 at every call and maps the
        start position back, so searching a decoded block from each match on was quadratic (a
        512 KiB chunk of 262,144 one-letter lines, every one matching, took minutes with
        ``ignore_case``). On valid UTF-8 the bytes are what RE2 saw anyway, so the lines found are
        the same; a block that is not valid UTF-8 is matched line by line on its decoded text (each
        line searched once), as before, invalid bytes read as U+FFFD."""
        assert self._block is not None and self._line is not None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            for index, line in enumerate(_decode(raw).split("\n")):
                if self._line.search(line) is not None:
                    yield index
            return
        pos, n = 0, len(raw)
        line_no, counted = 0, 0
        while pos <= n:
            m = self._block.search(raw, pos)
            if m is None:
                return
            start = raw.rfind(b"\n", 0, m.start()) + 1
            end = raw.find(b"\n", m.start())
            if end < 0:
                end = n
            line_no += raw.count(b"\n", counted, start)
            counted = start
            if self._line.search(raw[start:end]) is not None:
                yield line_no
            pos = end + 1


def _lines(chunks: Iterable[bytes | None]) -> Iterator[bytes | None]:
    """Blocks of whole lines joined by ``\\n`` (no trailing newline); the final partial line last.
    A ``None`` (a tick) in ``chunks`` is passed on as it comes.

    A line longer than a chunk is gathered as a list of its pieces and joined once its end comes:
    joined at every chunk, a 300 MB line of one file cost 147 s (quadratic), the event loop held."""
    carry: list[bytes] = []
    for chunk in chunks:
        if chunk is None:
            yield None
            continue
        cut = chunk.rfind(b"\n")
        if cut < 0:
            if chunk:
                carry.append(chunk)
            continue
        if carry:
            carry.append(chunk[:cut])
            yield b"".join(carry)
            carry = []
        else:
            yield chunk[:cut]
        if cut + 1 < len(chunk):
            carry.append(chunk[cut + 1 :])
    if carry:
        yield b"".join(carry)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def grep_file(
    path: str, chunks: Iterator[bytes], matcher: LineMatcher, context: int, skip: Skip | None = None
) -> Iterator[GrepMatch | None]:
    """The matching lines of one file, in order, with a tick (``None``) after each chunk; nothing
    but a tick for a binary file (NUL in the first 8 KiB). While ``skip[0]`` is positive, a match
    counts it down and is a tick instead (see the module docstring)."""
    skip = [0] if skip is None else skip
    first = next(chunks, None)
    if first is None or b"\x00" in first[:BINARY_SNIFF_BYTES]:
        yield None
        return

    def all_chunks() -> Iterator[bytes | None]:
        yield first
        yield None
        for chunk in chunks:
            yield chunk
            yield None

    if context == 0:
        yield from _scan(path, _lines(all_chunks()), matcher, skip)
    else:
        yield from _scan_context(path, _lines(all_chunks()), matcher, context, skip)


def _scan(
    path: str, blocks: Iterable[bytes | None], matcher: LineMatcher, skip: Skip
) -> Iterator[GrepMatch | None]:
    base = 1  # line number of the first line of the first block in ``behind``
    # Blocks already scanned whose lines are not counted yet: most blocks have no match, and
    # counting their newlines is only needed when a later block of the same file does.
    behind: list[bytes] = []
    needle = matcher.literal
    for block in blocks:
        if block is None:
            yield None
            continue
        if needle is not None:
            pos = block.find(needle)
            if pos >= 0:
                base = _fold(base, behind)
            counted, line_no = 0, base
            while pos >= 0:
                start = block.rfind(b"\n", 0, pos) + 1
                end = block.find(b"\n", pos)
                if end < 0:
                    end = len(block)
                if skip[0]:  # its line is counted with the next match kept (``counted`` stays)
                    skip[0] -= 1
                    yield None
                    pos = block.find(needle, end + 1) if end < len(block) else -1
                    continue
                line_no += block.count(b"\n", counted, start)
                counted = start
                yield GrepMatch(path=path, line=line_no, text=_decode(block[start:end]))
                pos = block.find(needle, end + 1) if end < len(block) else -1
        else:
            lines: list[str] | None = None
            for idx in matcher.block(block):
                if skip[0]:
                    skip[0] -= 1
                    yield None
                    continue
                if lines is None:
                    base = _fold(base, behind)
                    lines = _decode(block).split("\n")
                yield GrepMatch(path=path, line=base + idx, text=lines[idx])
        behind.append(block)
        if len(behind) > 2:
            base = _fold(base, behind)


def _fold(base: int, behind: list[bytes]) -> int:
    """Advance ``base`` past the lines of the blocks in ``behind`` (and forget them)."""
    for block in behind:
        base += block.count(b"\n") + 1
    behind.clear()
    return base


def _scan_context(
    path: str, blocks: Iterable[bytes | None], matcher: LineMatcher, context: int, skip: Skip
) -> Iterator[GrepMatch | None]:
    before: deque[GrepContextLine] = deque(maxlen=context)
    # Matches still collecting their after-context: (match line, its text, its list, lines still wanted).
    pending: deque[tuple[int, str, list[GrepContextLine], list[int]]] = deque()
    line_no = 0
    for block in blocks:
        if block is None:
            yield None
            continue
        for raw in block.split(b"\n"):
            line_no += 1
            text = _decode(raw)
            hit = matcher.line(text)
            entry = GrepContextLine(line=line_no, text=text, is_match=hit)
            for _, _, ctx, wanted in pending:
                ctx.append(entry)
                wanted[0] -= 1
            while pending and pending[0][3][0] <= 0:
                n, t, ctx, _ = pending.popleft()
                yield GrepMatch(path=path, line=n, text=t, context=ctx)
            if hit and skip[0]:  # emitted in the order found: the first ones are the skipped ones
                skip[0] -= 1
                yield None
            elif hit:
                pending.append((line_no, text, [*before, entry], [context]))
            before.append(entry)
    while pending:
        n, t, ctx, _ = pending.popleft()
        yield GrepMatch(path=path, line=n, text=t, context=ctx)
