"""The ``read`` tool: page through text by line (with byte continuations), inline images and PDFs.

One call opens one ranged stream. A continuation (``offset`` + ``byteOffset``) starts the stream at
that byte, so earlier bytes are never transferred again. Text pages are capped by ``max_lines`` and
``max_bytes`` (UTF-8 of the returned content); lines split on ``\\n`` and keep any ``\\r``.
"""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field

from ..storage.paths import canonical
from ._input import ToolInput, Whole
from ._media import MediaType, is_binary_sample, media_by_extension, media_by_magic
from ._options import LineTruncation, ReadOptions, coerce_options
from ._sizes import human_bytes
from ._tool import ContentPart, Tool, ToolUpdate
from .file_store import FileStore

__all__ = ["ReadInput", "create_read_tool", "read_model_output"]

TRUNCATION_MARKER = "... (truncated)"


class ReadInput(ToolInput):
    path: str = Field(description="Absolute path of the file to read, e.g. /workspace/src/app.py.")
    offset: Whole | None = Field(
        default=None, ge=1, description="1-based line to start from. Pass the previous result's nextOffset."
    )
    byte_offset: Whole | None = Field(
        default=None,
        ge=0,
        description="Byte position of line `offset`: pass the previous result's nextByteOffset together "
        "with nextOffset so the read continues there without rescanning. Needs offset when positive.",
    )
    limit: Whole | None = Field(default=None, ge=1, description="Maximum number of lines to return.")


def _describe(options: ReadOptions) -> str:
    return (
        "Read a file from the workspace. Text comes back by line: at most "
        f"{options.max_lines} lines or {human_bytes(options.max_bytes)} per call. When the result is truncated it has "
        "nextOffset and nextByteOffset: pass both back as offset and byteOffset to read the next page "
        "instead of reading the whole file again. Use offset and limit to read a specific range of lines. "
        "Images (png, jpg, gif, webp) and PDFs are returned as attachments; other binary files are "
        "reported as unsupported. Paths are absolute."
    )


def _stream_close(stream: AsyncIterator[bytes]) -> Any:
    close = getattr(stream, "aclose", None)
    return close() if close is not None else None


class _Source:
    """A byte stream with a buffer the page reader consumes from the front."""

    def __init__(self, stream: AsyncIterator[bytes], bounded: int | None) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.eof = False
        self.received = 0
        self.bounded = bounded

    async def pull(self) -> bool:
        """Append the next chunk; False at the end of the stream."""
        if self.eof:
            return False
        try:
            chunk = await anext(self.stream)
        except StopAsyncIteration:
            self.eof = True
            return False
        self.received += len(chunk)
        self.buf += chunk
        return True

    @property
    def range_exhausted(self) -> bool:
        """The stream ended because the requested range ended, not necessarily the file."""
        return self.eof and self.bounded is not None and self.received >= self.bounded


def _truncate_line(text: str, rule: LineTruncation, cut: bool) -> str:
    if rule.chars is not None:
        if cut or len(text) > rule.chars:
            return text[: rule.chars] + TRUNCATION_MARKER
        return text
    assert rule.bytes is not None
    raw = text.encode("utf-8", "surrogatepass")
    if cut or len(raw) > rule.bytes:
        return raw[: rule.bytes].decode("utf-8", "ignore") + TRUNCATION_MARKER
    return text


class _Page:
    """Collects one page of lines under the line and byte caps."""

    def __init__(self, options: ReadOptions, limit: int, first_line: int) -> None:
        self.options = options
        self.limit = limit
        self.first_line = first_line
        self.texts: list[str] = []
        self.size = 0  # UTF-8 bytes of the content so far
        self.rejected: int | None = None  # UTF-8 bytes the last line that did not fit would have taken

    def full(self) -> bool:
        return len(self.texts) >= self.limit

    def add(self, raw: bytes, cut: bool) -> bool:
        """Add one line; False when it does not fit in the byte cap."""
        text = raw.decode("utf-8", "replace")
        if self.options.line_truncation is not None:
            text = _truncate_line(text, self.options.line_truncation, cut)
        if self.options.include_line_numbers:
            text = f"{self.first_line + len(self.texts)}\t{text}"
        cost = (len(text) if text.isascii() else len(text.encode("utf-8"))) + (1 if self.texts else 0)
        if self.size + cost > self.options.max_bytes:
            self.rejected = cost - (1 if self.texts else 0)
            return False
        self.texts.append(text)
        self.size += cost
        return True


def create_read_tool(store: FileStore, **read_options: Any) -> Tool:
    """The ``read`` tool over ``store``; keyword options are :class:`ReadOptions` fields."""
    options = coerce_options(ReadOptions, read_options.pop("options", None), **read_options)

    async def read_media(path: str, media: MediaType) -> dict[str, Any]:
        data = bytearray()
        stream = store.read_chunks(path, 0, options.max_model_bytes + 1)
        try:
            async for chunk in stream:
                data += chunk
        finally:
            await _maybe_await(_stream_close(stream))
        if not data:
            raise ValueError(
                f"{path} is an empty {'image' if media.kind == 'image' else 'file'}; there is nothing to show."
            )
        if len(data) > options.max_model_bytes:
            stat = await store.stat(path)
            size = f"{stat.size} bytes" if stat is not None else f"more than {options.max_model_bytes} bytes"
            raise ValueError(
                f"{path} is {size}, over the {options.max_model_bytes}-byte limit for attaching "
                f"{media.media_type} content to the model (max_model_bytes)."
            )
        return {
            "path": path,
            "kind": media.kind,
            "mediaType": media.media_type,
            "size": len(data),
            "data": base64.b64encode(bytes(data)).decode("ascii"),
        }

    async def handler(params: ReadInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        byte_offset = params.byte_offset or 0
        if byte_offset > 0 and params.offset is None:
            raise ValueError(
                "byteOffset needs offset: pass the previous result's nextOffset and nextByteOffset together."
            )
        media = media_by_extension(path)
        if media is not None:
            return await read_media(path, media)
        continuing = byte_offset > 0
        start_line = params.offset or 1
        limit = min(params.limit or options.max_lines, options.max_lines)
        # Without per-line truncation a page never needs more than max_bytes + 2 bytes from its start.
        bounded: int | None = None
        if options.line_truncation is None and (continuing or start_line == 1):
            bounded = max(options.max_bytes + 2, options.media_sniff_bytes)
        stream = store.read_chunks(path, byte_offset if continuing else 0, bounded)
        source = _Source(stream, bounded)
        try:
            if not continuing:
                while len(source.buf) < options.media_sniff_bytes and await source.pull():
                    pass
                sample = bytes(source.buf[: options.media_sniff_bytes])
                sniffed = media_by_magic(sample)
                if sniffed is not None:
                    await _maybe_await(_stream_close(stream))
                    return await read_media(path, sniffed)
                if is_binary_sample(sample):
                    return {
                        "path": path,
                        "kind": "binary",
                        "unsupported": True,
                        "mediaType": "application/octet-stream",
                    }
            return await _read_page(store, path, source, options, start_line, limit, byte_offset, continuing)
        finally:
            await _maybe_await(_stream_close(stream))

    return Tool(
        name="read",
        description=_describe(options),
        input_model=ReadInput,
        handler=handler,
        model_output=read_model_output,
    )


async def _maybe_await(value: Any) -> None:
    if value is not None and hasattr(value, "__await__"):
        await value


async def _skip_lines(source: _Source, count: int) -> tuple[int, int, bool]:
    """Drop ``count`` lines from the front; return (lines skipped, bytes skipped, hit the end)."""
    skipped = 0
    consumed = 0
    while skipped < count:
        newlines = source.buf.count(b"\n")
        if newlines >= count - skipped:
            pos = -1
            for _ in range(count - skipped):
                pos = source.buf.find(b"\n", pos + 1)
            del source.buf[: pos + 1]
            consumed += pos + 1
            return count, consumed, False
        # Keep only the tail after the last newline: a partial line of unknown length.
        last = source.buf.rfind(b"\n")
        skipped += newlines
        consumed += last + 1
        del source.buf[: last + 1]
        if not await source.pull():
            if source.buf:  # a final line without a newline
                consumed += len(source.buf)
                source.buf.clear()
                skipped += 1
            return skipped, consumed, True
        if len(source.buf) > 1 << 20 and b"\n" not in source.buf:
            # A very long line being skipped: remember its length, not its bytes.
            consumed += len(source.buf) - 1
            del source.buf[:-1]
    return skipped, consumed, False


# A first line over the cap: its raw size (negative: more than that many bytes) and, when known, the
# UTF-8 size it takes on the page (undecodable bytes as U+FFFD, the line-number prefix).
Oversized = tuple[int, int | None]
# (content, lines taken, truncated, bytes consumed, a first line over the cap)
PageOutcome = tuple[str, int, bool, int, Oversized | None]


async def _read_page(
    store: FileStore,
    path: str,
    source: _Source,
    options: ReadOptions,
    start_line: int,
    limit: int,
    byte_offset: int,
    continuing: bool,
) -> dict[str, Any]:
    position = byte_offset if continuing else 0  # absolute byte of source.buf[0]
    if not continuing and start_line > 1:
        skipped, consumed, _ = await _skip_lines(source, start_line - 1)
        if skipped < start_line - 1:
            raise ValueError(f"offset {start_line} is past the end of {path} ({_lines(skipped)}).")
        position += consumed

    outcome = None
    if options.line_truncation is None:
        outcome = await _whole_lines_page(source, options, start_line, limit)
    if outcome is None:
        outcome = await _line_by_line_page(source, options, start_line, limit)
    content, count, truncated, consumed, oversized = outcome

    if oversized is not None:
        raw, shown = oversized
        size = f"{raw} bytes" if raw >= 0 else f"more than {-raw} bytes"
        if 0 <= raw <= options.max_bytes and shown is not None:
            size += f" but {shown} bytes as read shows it ({_growth(options, start_line, raw, shown)})"
        raise ValueError(
            f"Line {start_line} of {path} is {size}, over the {options.max_bytes}-byte read cap (max_bytes). "
            "Use grep to find what you need in it, or a read tool with line_truncation."
        )
    if count == 0 and continuing and not truncated:
        stat = await store.stat(path)
        size_text = f"{stat.size} bytes" if stat is not None else "missing"
        raise ValueError(
            f"byteOffset {byte_offset} is at or past the end of {path} ({size_text}): the file changed since "
            "the previous read. Read it again from the start, or with offset alone."
        )
    if count == 0 and not continuing and start_line > 1 and not truncated:
        raise ValueError(f"offset {start_line} is past the end of {path} ({_lines(start_line - 1)}).")
    result: dict[str, Any] = {
        "path": path,
        "content": content,
        "startLine": start_line,
        "endLine": start_line + count - 1,
        "totalLines": None if truncated else start_line + count - 1,
        "truncated": truncated,
    }
    if truncated:
        result["nextOffset"] = start_line + count
        result["nextByteOffset"] = position + consumed
    return result


def _growth(options: ReadOptions, line: int, raw: int, shown: int) -> str:
    """Why a line's shown size exceeds its raw size."""
    prefix = len(str(line)) + 1 if options.include_line_numbers else 0
    why = ["its line number is prefixed"] if prefix else []
    if shown > raw + prefix:
        why.insert(0, "each undecodable byte becomes U+FFFD, 3 bytes")
    return " and ".join(why)


async def _whole_lines_page(
    source: _Source, options: ReadOptions, start_line: int, limit: int
) -> PageOutcome | None:
    """The page in bulk when lines are not truncated: find the cut, then decode once.

    None when undecodable bytes would make the decoded page larger than the byte cap (the
    line-by-line reader then handles it exactly).
    """
    cap = options.max_bytes
    while len(source.buf) < cap + 2 and await source.pull():
        pass
    buf = source.buf
    numbered = options.include_line_numbers
    # A line that fits ends within the first cap + 1 bytes (its newline included).
    window_end = min(len(buf), cap + 1)
    count = 0
    end = 0
    prefixes = 0
    if numbered:
        parts = bytes(buf[:window_end]).split(b"\n", limit)
        for length in map(len, parts[:-1]):
            prefix = len(str(start_line + count)) + 1
            if end + length + prefixes + prefix > cap:
                break
            prefixes += prefix
            count += 1
            end += length + 1
    else:
        count, end = _cut_after_lines(buf, window_end, limit)
    if count < limit and source.eof and not source.range_exhausted and end < len(buf):
        if buf.find(b"\n", end) < 0:  # the file's last line, without a trailing newline
            prefix = len(str(start_line + count)) + 1 if numbered else 0
            if len(buf) + prefixes + prefix <= cap:
                count += 1
                end = len(buf)
    while len(buf) == end and await source.pull():
        pass
    truncated = len(buf) > end
    if count == 0:
        if not truncated:
            return "", 0, False, 0, None
        newline = buf.find(b"\n")
        if 0 <= newline <= cap:
            return None  # the line fits raw but not as shown: the line-by-line reader measures it
        return "", 0, True, 0, ((newline if newline >= 0 else -len(buf)), None)
    raw = buf[: end - 1] if buf[end - 1] == 0x0A else buf[:end]
    text = raw.decode("utf-8", "replace")
    if numbered:
        text = "\n".join(f"{start_line + i}\t{line}" for i, line in enumerate(text.split("\n")))
    if "\ufffd" in text and len(text.encode("utf-8")) > cap:
        return None
    return text, count, truncated, end, None


def _cut_after_lines(buf: bytearray, window_end: int, limit: int) -> tuple[int, int]:
    """(lines, end): the first ``min(limit, newlines in window)`` lines of ``buf[:window_end]``.

    Counting is C-level; when the window holds more than ``limit`` lines, the cut is first estimated
    from the average line length and then corrected newline by newline (few steps on typical text).
    """
    # Estimate where the limit-th newline is from the first few KiB, then count only up to there.
    sample = min(window_end, 8192)
    sampled = buf.count(b"\n", 0, sample)
    guess = window_end if sampled == 0 else min(window_end, sample * limit // sampled + 1)
    before = buf.count(b"\n", 0, guess)  # newlines strictly before ``guess``
    if before >= limit:
        pos = guess
        for _ in range(before - limit + 1):
            pos = buf.rfind(b"\n", 0, pos)
        return limit, pos + 1
    found = before
    pos = guess - 1
    while found < limit:
        following = buf.find(b"\n", pos + 1, window_end)
        if following < 0:
            break
        pos = following
        found += 1
    if found == before:  # no newline at or after the guess
        return found, (buf.rfind(b"\n", 0, guess) + 1 if found else 0)
    return found, pos + 1


async def _line_by_line_page(
    source: _Source, options: ReadOptions, start_line: int, limit: int
) -> PageOutcome:
    """The page one line at a time (per-line truncation), keeping at most ``keep`` bytes of any line."""
    rule = options.line_truncation
    if rule is None:
        keep = options.max_bytes + 1
    elif rule.chars is not None:
        keep = 4 * rule.chars + 8
    else:
        keep = (rule.bytes or 0) + 8
    page = _Page(options, limit, start_line)
    truncated = False
    oversized: Oversized | None = None
    position = 0
    cursor = 0
    while True:
        newline = source.buf.find(b"\n", cursor)
        if newline < 0:
            if not source.eof and len(source.buf) - cursor <= keep:
                if cursor:
                    del source.buf[:cursor]
                    cursor = 0
                await source.pull()
                continue
            rest = len(source.buf) - cursor
            if rest == 0 and source.eof:
                break
            if page.full():
                truncated = True
                break
            if source.eof and not source.range_exhausted:
                # The file's last line, without a trailing newline.
                if not page.add(bytes(source.buf[cursor:]), cut=False):
                    if not page.texts:
                        oversized = (rest, page.rejected)
                    truncated = True
                    break
                position += rest
                break
            # A line longer than what a page keeps: it fits only when lines are truncated.
            if rule is None:
                if not page.texts:
                    oversized = (-rest, None)
                truncated = True
                break
            head = bytes(source.buf[cursor : cursor + keep])
            length = await _line_length(source, cursor)
            cursor = 0
            if not page.add(head, cut=True):
                if not page.texts:
                    oversized = (length, page.rejected)
                truncated = True
                break
            position += length
            if source.buf[:1] == b"\n":
                position += 1
                cursor = 1
            continue
        if page.full():
            truncated = True
            break
        length = newline - cursor
        if not page.add(bytes(source.buf[cursor : cursor + min(length, keep)]), cut=length > keep):
            if not page.texts:
                oversized = (length, page.rejected)
            truncated = True
            break
        position += length + 1
        cursor = newline + 1
    return "\n".join(page.texts), len(page.texts), truncated, position, oversized


async def _line_length(source: _Source, cursor: int) -> int:
    """Consume the rest of an over-long line (its bytes are dropped); the newline stays in front."""
    length = 0
    while True:
        newline = source.buf.find(b"\n", cursor)
        if newline >= 0:
            length += newline - cursor
            del source.buf[:newline]
            return length
        length += len(source.buf) - cursor
        source.buf.clear()
        cursor = 0
        if not await source.pull():
            return length


def read_model_output(result: dict[str, Any]) -> list[ContentPart]:
    """Plain text for a complete, unpositioned, non-empty read; media as an attachment; else JSON."""
    kind = result.get("kind")
    if kind in ("image", "file"):
        name = posixpath.basename(result["path"]) or result["path"]
        return [
            {"type": "text", "text": f"{result['path']} ({result['mediaType']}, {result['size']} bytes)"},
            {"type": kind, "media_type": result["mediaType"], "data": result["data"], "filename": name},
        ]
    if (
        "content" in result
        and not result.get("truncated")
        and result.get("startLine") == 1
        and result["content"] != ""
    ):
        return [{"type": "text", "text": result["content"]}]
    return [{"type": "text", "text": json.dumps(result, ensure_ascii=False)}]


def _lines(count: int) -> str:
    """``count`` with "line" or "lines" ("(1 lines)" read oddly in an error)."""
    return f"{count} line" if count == 1 else f"{count} lines"
