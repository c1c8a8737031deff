"""``StreamCapture``: one output stream of a run: its tail, and its saved log once it goes over."""

from __future__ import annotations

from typing import Any, Literal

from ._options import OutputOptions
from ._spool import OutputSpool
from ._tail import OutputTail, TailView
from .types import OutputTruncation

__all__ = ["StreamCapture"]


class StreamCapture:
    """Feeds a tail; when the stream first exceeds the limits, starts saving it whole to ``path``."""

    def __init__(self, fs: Any, options: OutputOptions, path: str) -> None:
        self.fs = fs
        self.options = options
        self.path = path
        self.tail = OutputTail(options.max_lines, options.max_bytes, unbounded=not options.enabled)
        self.spool: OutputSpool | None = None
        self.saved: bool | None = None  # set by finish(): None when nothing needed saving

    async def feed(self, data: bytes) -> None:
        self.tail.feed(data)
        if self.spool is not None:
            await self.spool.write(data)
        elif self.options.enabled and self.tail.over_limit:
            self.spool = OutputSpool(self.fs, self.path)
            await self.spool.start(self.tail.everything() or b"")
            self.tail.hold_head = False

    async def finish(self) -> None:
        if self.spool is not None:
            self.saved = await self.spool.close()

    async def abort(self) -> None:
        if self.spool is not None:
            await self.spool.abort()
            self.saved = False

    def view(self, *, final: bool = True) -> TailView:
        return self.tail.view(final=final)

    def text(self, view: TailView) -> str:
        return view.data.decode("utf-8", errors="replace")

    def truncation(self, view: TailView) -> OutputTruncation | None:
        if not view.truncated:
            return None
        # While running, a log being written counts as saved; finish() settles it.
        saved = self.saved if self.saved is not None else (self.spool is not None and not self.spool.failed)
        status: Literal["saved", "not-saved"] = "saved" if saved else "not-saved"
        return OutputTruncation(
            status=status,
            path=self.path if saved else None,
            total_bytes=view.total_bytes,
            total_lines=view.total_lines,
            first_line=view.first_line,
            partial_line=view.partial_line,
            reason=view.reason,
        )
