"""The consoles of the commands and how a ``CliError`` is shown: shared by the typer app (``_app``)
and the commands it does not parse (``_fast``). rich is imported at the first print through a console:
``tool`` writes its JSON directly, and rich costs ~40 ms of a command's start."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ._context import CliError

__all__ = ["console", "errors", "report"]


@functools.cache
def console() -> Console:
    """The console of stdout, made (and rich imported) when a command first prints through it."""
    from rich.console import Console

    return Console()


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
