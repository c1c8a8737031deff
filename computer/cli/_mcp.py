"""``computer mcp NAME``: the workspace tools over MCP on stdin/stdout."""

from __future__ import annotations

import io
import json
import os
import sys

from ._context import CliError, GlobalOptions
from ._workspaces import open_workspace

__all__ = ["serve_mcp", "terminal_note"]


async def serve_mcp(options: GlobalOptions, name: str, *, readonly: bool, processes: bool = False) -> None:
    """Serve until the client closes stdin; ``processes``: the ``processes`` and ``kill`` tools too
    (``processes`` alone when ``readonly``, which has no exec backend: then neither).

    stdout is the protocol channel, so everything else this process (or a child it starts, such as a
    local Ray) might print is sent to stderr: fd 1 is pointed at stderr and the protocol gets a
    private copy of the original stdout.
    """
    try:
        from ..tools.mcp import run_stdio
    except ModuleNotFoundError as exc:
        raise CliError(
            f"computer mcp needs the MCP SDK ({exc}); install it: pip install -e '.[mcp]'"
        ) from None

    if sys.stdin.isatty():  # a person at a terminal, not an MCP host: it waits silently for JSON-RPC
        print(terminal_note(options, name), file=sys.stderr, flush=True)
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    protocol_out = io.TextIOWrapper(os.fdopen(protocol_fd, "wb"), encoding="utf-8", write_through=True)
    sys.stdout = protocol_out
    try:
        # Read-only serves read, ls, find and grep: no exec backends, no share-link publisher to build.
        async with open_workspace(options, name, backends=not readonly, assets=not readonly) as workspace:
            if not readonly:  # the user root the server's instructions name, as `shell` makes it
                await workspace.fs.mkdir("/workspace", recursive=True)
            await run_stdio(workspace, readonly=readonly, processes=processes)
            if options.local and not readonly:  # in process, the live sandbox ends with this command
                await _say_what_ends(workspace)
    finally:
        sys.stdout = sys.__stdout__
        protocol_out.close()


def terminal_note(options: GlobalOptions, name: str) -> str:
    """What ``computer mcp NAME`` says when started from a terminal. Decision: it said nothing and
    waited for JSON-RPC on stdin, so a person trying it saw a command that hung. The line goes to
    stderr (stdout is the protocol's) and only when stdin is a terminal: an MCP host never sees it.
    It gives the host config that starts this same command (program, global options, name)."""
    program = sys.argv[0]
    if not program or program.endswith(".py") or program == "-m":  # python -m computer[.cli]
        command, args = sys.executable, ["-m", "computer"]
    else:
        command, args = os.path.abspath(program), []
    if options.data_dir is not None:
        args += ["--data-dir", str(options.data_dir.expanduser().absolute())]
    if options.address is not None:
        args += ["--address", options.address]
    config = json.dumps({"command": command, "args": [*args, "mcp", name]}, ensure_ascii=False)
    return (
        f"computer mcp: serving workspace {name!r} over MCP on stdin/stdout, for an MCP client that "
        f"starts this command (an MCP host's config: {config}); it reads JSON-RPC here, one message a "
        "line: Ctrl-D or Ctrl-C ends it"
    )


async def _say_what_ends(workspace: object) -> None:
    """Name on stderr (an MCP host's log) the processes that end with the session."""
    from ._ps import ending_processes

    note = await ending_processes(workspace)
    if note is not None:
        print(f"computer: {note}", file=sys.stderr)
