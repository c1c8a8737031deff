"""Attacks of a hostile agent or program through surfaces the other files leave (session 63's hunt).

Terminal codes through the CLI: a link's target and a background process's command line are whatever
a program chose. `computer ls`, `ps` and `log` escape such text (`computer.cli.display.plain_text`);
`computer shell`'s error lines and the note naming the processes that end with a session printed it
raw: ``ESC [2J`` cleared the user's terminal, and a newline wrote a line of its own into an MCP host's
log.
"""

from __future__ import annotations

import asyncio
import io
import re

from rich.console import Console

import computer
from computer.cli._ps import ending_processes
from computer.cli._shell import WorkspaceShell

CLEAR = "\x1b[2J"


def _terminal() -> tuple[Console, io.StringIO]:
    """A console as a user's terminal has it (colours on), writing to a buffer."""
    out = io.StringIO()
    return Console(file=out, width=200, force_terminal=True, color_system="standard"), out


async def test_a_shell_error_naming_a_links_target_writes_no_terminal_code(ws: computer.Workspace) -> None:
    await ws.fs.symlink(f"/nowhere{CLEAR}\nforged line", "/workspace/link")
    console, _ = _terminal()
    errors, said = _terminal()
    shell = WorkspaceShell(ws, console, errors=errors)
    for line in ("cat /workspace/link", "cd /workspace/link"):
        assert await shell.run_line(line)
        assert shell.failed
    text = re.sub(r"\x1b\[[0-9;]*m", "", said.getvalue())  # the console's own colours
    assert "\x1b" not in text and "\nforged line" not in text, text
    assert "nowhere\\x1b[2J\\nforged line" in text, text


async def test_the_note_of_processes_ending_with_a_session_writes_no_terminal_code(
    ws: computer.Workspace,
) -> None:
    started = await ws.runtime.exec(
        f"(exec -a $'spoof{CLEAR}\\nforged line' sleep 300) & echo ok", backend="shell"
    )
    result = await started.result()
    assert result.stdout == "ok\n", result
    note = None
    for _ in range(100):  # bounded: the background process shows in the listing within 10 s
        note = await ending_processes(ws)
        if note is not None and "spoof" in note:
            break
        await asyncio.sleep(0.1)
    assert note is not None and "spoof" in note, note
    assert CLEAR not in note and "\n" not in note, note
    assert "spoof\\x1b[2J\\nforged line" in note, note
    await ws.runtime.end_sandbox("shell")
