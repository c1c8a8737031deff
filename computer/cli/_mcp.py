"""``computer mcp NAME``: the workspace tools over MCP on stdin/stdout."""

from __future__ import annotations

import io
import os
import sys

from ._context import CliError, GlobalOptions
from ._workspaces import open_workspace

__all__ = ["serve_mcp"]


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

    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    protocol_out = io.TextIOWrapper(os.fdopen(protocol_fd, "wb"), encoding="utf-8", write_through=True)
    sys.stdout = protocol_out
    try:
        # Read-only serves read, ls, find and grep: no exec backends, no share-link publisher to build.
        async with open_workspace(options, name, backends=not readonly, assets=not readonly) as workspace:
            await run_stdio(workspace, readonly=readonly, processes=processes)
            if options.local and not readonly:  # in process, the live sandbox ends with this command
                await _say_what_ends(workspace)
    finally:
        sys.stdout = sys.__stdout__
        protocol_out.close()


async def _say_what_ends(workspace: object) -> None:
    """Name on stderr (an MCP host's log) the processes that end with the session."""
    from ._ps import ending_processes

    note = await ending_processes(workspace)
    if note is not None:
        print(f"computer: {note}", file=sys.stderr)
