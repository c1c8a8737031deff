"""The consoles of the commands and how a ``CliError`` is shown: shared by the typer app (``_app``)
and the commands it does not parse (``_fast``). rich is imported at the first print through a console:
``tool`` writes its JSON directly, and rich costs ~40 ms of a command's start."""

from __future__ import annotations

import functools
import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ._context import CliError

__all__ = ["EXIT_CLOSED_PIPE", "closed_pipe", "console", "errors", "report", "write_out"]

EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `cat big | head -1`'s cat


@functools.cache
def console() -> Console:
    """The console of stdout, made (and rich imported) when a command first prints through it."""
    from rich.console import Console

    class _Stdout(Console):
        def on_broken_pipe(self) -> None:
            """Raise, so the command ends as for any closed stdout (``closed_pipe``: 141, the
            workspace closed on the way out). Decision: rich's own ends the process with
            ``SystemExit(1)`` from inside the print, which an exec's ``cat big | head -1`` does not."""
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    return _Stdout()


@functools.cache
def errors() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def report(exc: CliError) -> int:
    """Print ``exc`` as one red line on stderr; its exit code."""
    from rich.text import Text

    from .display import plain_text

    errors().print(Text("error: ", style="red") + plain_text(str(exc)), soft_wrap=True)
    return exc.code


def write_out(data: bytes | str, stream: IO[str] | None = None) -> None:
    """Write all of ``data`` to ``stream`` (stdout by default) and flush; ``BrokenPipeError`` when the
    reader has gone (the command then ends with ``EXIT_CLOSED_PIPE``, as ``cat`` killed by SIGPIPE).

    Decision: Python's ``BufferedWriter.write`` returns a short count without raising when the reader
    of a pipe closes during a large write, and ``TextIOWrapper.write`` ignores that count:
    ``computer shell NAME -c 'cat big' | head -1`` exited 0 with the output silently cut. Bytes go to
    the binary buffer as they are; a text-only stream (a test's) gets text, undecodable bytes as U+FFFD.
    """
    stream = sys.stdout if stream is None else stream
    binary = getattr(stream, "buffer", None)
    if binary is None:
        stream.write(data if isinstance(data, str) else data.decode("utf-8", "replace"))
        stream.flush()
        return
    stream.flush()  # what was printed through the text layer goes first
    view = memoryview(
        data.encode(getattr(stream, "encoding", None) or "utf-8", "replace")
        if isinstance(data, str)
        else data
    )
    while view:
        written = binary.write(view)
        if not written:  # None (a non-blocking stream would block) never happens on stdout; 0: gone
            raise BrokenPipeError(32, "Broken pipe")
        view = view[written:]
    binary.flush()


def closed_pipe() -> int:
    """End a command whose stdout's reader has gone (``EPIPE``): no traceback, and nothing more
    written (stdout becomes /dev/null, so the flush at exit cannot fail again); ``EXIT_CLOSED_PIPE``.
    Decision: 141, the code a shell reports for ``cat`` killed by SIGPIPE (``cat big | head -1``),
    so a script's ``set -o pipefail`` treats both alike; it was 1 (or 0 when the write came up short)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE
