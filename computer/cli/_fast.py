"""The ``computer`` entry point: the everyday shapes of ``tool``, ``shell -c``, ``mcp``, ``ls`` and
``log`` run without typer; everything else goes to the typer app (``_app.py``).

Why: this typer builds a pydantic ``TypeAdapter`` per parameter of the command it runs, and imports
pydantic and click to do it: ~0.2 s of CPU before a command starts, a third of what ``computer tool
NAME read`` took in all. The parser here knows only plain argument lists: the global options
(``--data-dir D``, ``--address A``, also as ``--opt=V``), then the command, its positional arguments
and its own options exactly as ``_app.py`` declares them. Anything else (``--help``, ``--``, a
combined ``-fn5``, an option it does not know, a value typer would reject such as ``--limit -1``, a
missing or extra argument) returns ``None`` and typer parses the whole line as before: its messages
and exit codes stay the only ones. What it does run, it runs through the same functions as
``_app.py`` with the same values, so both paths print the same and exit with the same code
(``tests/cli/test_fast_path.py`` compares them).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _gc
from ._context import CliError, GlobalOptions, settings_error
from ._output import closed_pipe, console, report

__all__ = ["fast_command", "main"]

# Option name -> (keyword, kind): "flag" (True when given), "str", "int" (a non-negative integer).
_Options = dict[str, tuple[str, str]]


@dataclass(frozen=True)
class _Command:
    positionals: tuple[str, ...]  # required, in order
    optional: tuple[tuple[str, str], ...] = ()  # (keyword, default) positionals after them
    options: _Options = field(default_factory=dict)


_COMMANDS: dict[str, _Command] = {
    "tool": _Command(("name", "tool_name")),  # and its arguments as they are: `_tool_line`
    "shell": _Command(("name",), options={"--command": ("command", "str"), "-c": ("command", "str")}),
    "mcp": _Command(
        ("name",), options={"--readonly": ("readonly", "flag"), "--processes": ("processes", "flag")}
    ),
    "ls": _Command((), options={"--json": ("as_json", "flag"), "--prefix": ("prefix", "str")}),
    "log": _Command(
        ("name",),
        options={
            "--follow": ("follow", "flag"),
            "-f": ("follow", "flag"),
            "--json": ("as_json", "flag"),
            "--tool": ("tool", "str"),
            "--errors": ("errors_only", "flag"),
            "--limit": ("limit", "int"),
            "-n": ("limit", "int"),
        },
    ),
}
_GLOBAL: _Options = {"--data-dir": ("data_dir", "str"), "--address": ("address", "str")}


def _options(
    argv: Sequence[str], start: int, known: _Options, values: dict[str, Any]
) -> tuple[int, list[str]] | None:
    """Read ``argv[start:]``: options into ``values``, the rest as positionals; ``None`` when it is
    anything typer should parse (an unknown option, a missing value, ``--``). Stops at the first
    positional when ``known`` are the global options (the command name follows)."""
    positionals: list[str] = []
    i = start
    while i < len(argv):
        item = argv[i]
        if not item.startswith("-") or item == "-":
            if known is _GLOBAL:
                return i, positionals
            positionals.append(item)
            i += 1
            continue
        name, eq, inline = item.partition("=")
        if name not in known:
            return None
        keyword, kind = known[name]
        if kind == "flag":
            if eq:
                return None
            values[keyword] = True
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
        else:
            return None
        if kind == "int":
            if not (value.isascii() and value.isdigit()):
                return None
            values[keyword] = int(value)
        else:
            values[keyword] = value
    return (i, positionals) if known is not _GLOBAL else None


def parse(argv: Sequence[str]) -> tuple[str, GlobalOptions, dict[str, Any]] | None:
    """``(command, global options, the command's keyword arguments)``, or ``None`` for typer."""
    global_values: dict[str, Any] = {}
    read = _options(argv, 0, _GLOBAL, global_values)
    if read is None:
        return None
    at, _ = read
    command = _COMMANDS.get(argv[at])
    if command is None:
        return None
    values = _tool_line(argv[at + 1 :]) if argv[at] == "tool" else _command_line(command, argv, at + 1)
    if values is None:
        return None
    data_dir = global_values.get("data_dir")
    options = GlobalOptions(Path(data_dir) if data_dir is not None else None, global_values.get("address"))
    return argv[at], options, values


def _command_line(command: _Command, argv: Sequence[str], start: int) -> dict[str, Any] | None:
    """A command's options and positionals (``argv[start:]``) as its keyword arguments."""
    values: dict[str, Any] = {}
    parsed = _options(argv, start, command.options, values)
    if parsed is None:
        return None
    _, positionals = parsed
    required, optional = command.positionals, command.optional
    if not len(required) <= len(positionals) <= len(required) + len(optional):
        return None
    given = dict(zip([*required, *(keyword for keyword, _ in optional)], positionals, strict=False))
    values.update({keyword: given.get(keyword, default) for keyword, default in optional}, **given)
    return values


def _tool_line(rest: Sequence[str]) -> dict[str, Any] | None:
    """``tool NAME TOOL [JSON] [--name value ...]``: everything after the tool's name is its arguments
    (``_tool.parse_arguments``); a help option, ``--`` or an option before the tool's name go to typer."""
    if len(rest) < 2 or rest[0].startswith("-") or rest[1].startswith("-"):
        return None
    if any(item in ("--help", "-h", "--") for item in rest[2:]):
        return None
    return {"name": rest[0], "tool_name": rest[1], "arguments": list(rest[2:])}


def _run_tool(options: GlobalOptions, name: str, tool_name: str, arguments: str | list[str]) -> int:
    import asyncio

    from ._tool import parse_arguments, run_tool

    args = parse_arguments(tool_name, arguments, name)
    return asyncio.run(run_tool(options, name, tool_name, args))


def _run_shell(options: GlobalOptions, name: str, command: str | None = None) -> int:
    import asyncio

    from ._shell import run_shell

    return asyncio.run(run_shell(options, name, console(), command=command))


def _run_mcp(options: GlobalOptions, name: str, readonly: bool = False, processes: bool = False) -> int:
    import asyncio

    from ._mcp import serve_mcp

    asyncio.run(serve_mcp(options, name, readonly=readonly, processes=processes))
    return 0


def _run_ls(options: GlobalOptions, as_json: bool = False, prefix: str = "") -> int:
    from ._ls import check_data_dir, list_workspaces, print_workspaces

    _gc.resume()
    check_data_dir(options)
    rows = list_workspaces(options, prefix=prefix)
    print_workspaces(rows, as_json=as_json, console=console(), prefix=prefix)
    return 0


def _run_log(
    options: GlobalOptions,
    name: str,
    follow: bool = False,
    as_json: bool = False,
    tool: str | None = None,
    errors_only: bool = False,
    limit: int = 50,
) -> int:
    import asyncio

    from ._log import show_log

    _gc.resume()
    asyncio.run(
        show_log(
            options, name, follow=follow, as_json=as_json, tool=tool, errors=errors_only, limit=limit,
            console=console(),
        )
    )  # fmt: skip
    return 0


_RUNNERS: dict[str, Callable[..., int]] = {
    "tool": _run_tool,
    "shell": _run_shell,
    "mcp": _run_mcp,
    "ls": _run_ls,
    "log": _run_log,
}


def fast_command(argv: Sequence[str]) -> Callable[[], int] | None:
    """The command line ``argv`` (without the program name) as a call returning its exit code, or
    ``None`` when typer must parse it."""
    parsed = parse(argv)
    if parsed is None:
        return None
    command, options, values = parsed
    run = _RUNNERS[command]

    def call() -> int:
        try:
            return run(options, **values)
        except CliError as exc:
            return report(exc)
        except KeyboardInterrupt:
            return 130
        except ValueError as exc:  # settings that do not validate (a bad COMPUTER_* value)
            problem = settings_error(exc)
            if problem is None:
                raise
            return report(problem)

    return call


def main() -> None:
    """Console-script entry point (``computer``, ``python -m computer.cli``).

    Around a command it runs, what typer's standalone mode does too: an ``EOFError`` ends it with
    typer's "Aborted" (exit 1), a closed stdout (``EPIPE``) with exit 141 and no traceback
    (``_output.closed_pipe``). Ctrl-C while the typer app loads ends it with 130 and no traceback, as
    Ctrl-C in a command does. A shell completion request (``_COMPUTER_COMPLETE`` and the like) goes
    to typer."""
    completing = any(key.startswith("_") and key.endswith("_COMPLETE") for key in os.environ)
    call = None if completing else fast_command(sys.argv[1:])
    if call is None:
        try:
            from ._app import app
        except KeyboardInterrupt:  # Ctrl-C while typer loads (~0.1 s): no import-time traceback
            sys.exit(130)
        app()
        return
    _gc.pause()  # until the command's imports are done (``_gc``)
    try:
        code = call()
    except EOFError:
        from typer import rich_utils

        print(file=sys.stderr)
        rich_utils.rich_abort_error()
        code = 1
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        code = closed_pipe()  # 141, as `cat` ends on a closed pipe
    finally:
        _gc.resume()  # a command that ended before its workspace opened (an embedder's process goes on)
    sys.exit(code)
