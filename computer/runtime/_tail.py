"""The bounded tail of one output stream: the last ``max_lines`` lines or ``max_bytes`` bytes.

Only the last ``max_bytes + 1`` bytes of a stream can ever be shown (the extra byte tells whether the
window starts at a line start), so memory stays within about twice ``max_bytes`` whatever the stream's
size. Rendering happens on demand (snapshots, the result), never per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["OutputTail", "TailView"]


@dataclass(frozen=True, slots=True)
class TailView:
    """What a tail shows now: ``data`` plus where it sits in the whole stream."""

    data: bytes
    total_bytes: int
    total_lines: int
    first_line: int  # 1-based line number of the first shown line (1 for an empty stream)
    partial_line: bool  # ``data`` starts inside a line
    truncated: bool
    reason: Literal["lines", "bytes"]


class OutputTail:
    """Keeps what is needed to render a stream's tail; ``unbounded=True`` keeps every byte."""

    def __init__(self, max_lines: int, max_bytes: int, *, unbounded: bool = False) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.unbounded = unbounded
        self.total_bytes = 0
        self.newlines = 0
        self._buf = bytearray()
        self._whole = True  # ``_buf`` holds the stream from its first byte
        # While True nothing is dropped, so a saver that starts late can still get the first bytes.
        self.hold_head = True

    @property
    def total_lines(self) -> int:
        """Lines so far; a trailing ``\\n`` ends the last line, an unterminated rest counts as one."""
        if self.total_bytes == 0:
            return 0
        return self.newlines + (0 if self._ends_with_newline() else 1)

    def _ends_with_newline(self) -> bool:
        return bool(self._buf) and self._buf[-1] == 0x0A

    @property
    def over_limit(self) -> bool:
        """True once the stream no longer fits in the tail (it must then be saved to be kept whole)."""
        return self.total_bytes > self.max_bytes or self.total_lines > self.max_lines

    def everything(self) -> bytes | None:
        """The whole stream when it is still held from its first byte, else ``None``."""
        return bytes(self._buf) if self._whole else None

    def feed(self, data: bytes) -> None:
        """Add bytes; drops what can no longer be shown (unless unbounded)."""
        if not data:
            return
        self.total_bytes += len(data)
        self.newlines += data.count(b"\n")
        self._buf += data
        if self.unbounded or self.hold_head:
            return
        keep = self.max_bytes + 1
        # Trim lazily (amortised O(1) per byte): only when the buffer has doubled.
        if len(self._buf) > 2 * keep:
            del self._buf[: len(self._buf) - keep]
            self._whole = False

    def view(self, *, final: bool = True) -> TailView:
        """Render the tail. ``final=False`` (a snapshot) hides an incomplete UTF-8 sequence at the end."""
        buf = bytes(self._buf)
        if not final:
            buf = buf[: len(buf) - _incomplete_utf8_suffix(buf)]
        total_lines = self.total_lines
        if self.unbounded:
            return TailView(buf, self.total_bytes, total_lines, 1, False, False, "bytes")
        whole = self._whole
        if not whole and len(buf) > self.max_bytes + 1:
            buf = buf[len(buf) - self.max_bytes - 1 :]
        # Line starts we may show: offset 0 only when it is the stream's start or follows a newline
        # that we cannot see (then the window's first byte itself is the newline, handled below).
        segments = _split_lines(buf)
        if not whole and segments:
            # The first segment starts mid-line unless the byte before it is a newline; we kept one
            # extra byte, so a window starting right after a newline has that newline as its own
            # one-byte first segment, which we drop along with any partial first line.
            segments = segments[1:]
        shown: list[bytes] = []
        size = 0
        reason: Literal["lines", "bytes"] = "bytes"
        for seg in reversed(segments):
            if len(shown) >= self.max_lines:
                reason = "lines"
                break
            if size + len(seg) > self.max_bytes:
                reason = "bytes"
                break
            shown.append(seg)
            size += len(seg)
        shown.reverse()
        data = b"".join(shown)
        partial = False
        if not shown and buf:
            # The last line alone is larger than max_bytes: show its end, from a UTF-8 boundary.
            tail = buf[-self.max_bytes :]
            skip = 0
            while skip < len(tail) and skip < 3 and (tail[skip] & 0xC0) == 0x80:
                skip += 1
            data = tail[skip:]
            partial = True
            reason = "bytes"
            shown_lines = 1
        else:
            shown_lines = len(shown)
        truncated = len(data) < self.total_bytes
        first_line = max(1, total_lines - shown_lines + 1)
        return TailView(data, self.total_bytes, total_lines, first_line, partial, truncated, reason)


def _split_lines(buf: bytes) -> list[bytes]:
    """Split on ``\n`` only, keeping each line's newline (``bytes.splitlines`` also splits on ``\r``)."""
    if not buf:
        return []
    parts = [piece + b"\n" for piece in buf.split(b"\n")]
    last = parts.pop()[:-1]
    if last:
        parts.append(last)
    return parts


def _incomplete_utf8_suffix(buf: bytes) -> int:
    """How many bytes at the end of ``buf`` start a UTF-8 sequence that is not complete yet."""
    for back in range(1, min(4, len(buf)) + 1):
        byte = buf[-back]
        if (byte & 0xC0) == 0x80:
            continue  # a continuation byte: keep looking for the lead byte
        if byte < 0x80:
            return 0
        need = 2 if byte >= 0xC0 and byte < 0xE0 else 3 if byte < 0xF0 else 4
        return back if back < need else 0
    return 0
