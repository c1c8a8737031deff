"""``computer shell NAME``: an interactive prompt over one workspace (ls, cat, edit, exec, cd); with
``-c LINE``, one line of it, for scripts."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import shlex
import signal
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..surface import WorkspaceSurface
from ._context import GlobalOptions, command_exit_code
from ._output import errors, write_out
from ._workspaces import made_here, new_workspace_note, open_workspace
from .display import plain_text

__all__ = ["WorkspaceShell", "run_shell"]

HELP = """commands:
  ls [PATH]          list a directory
  cat PATH           print a file
  edit PATH          open PATH in $EDITOR (created if missing), save it back when changed
  exec COMMAND...    run a command in the workspace's first exec backend (also: !COMMAND)
  cd PATH / pwd      change / show the current directory (paths are relative to it)
  help / exit        this text / leave (Ctrl-D too)
Ctrl-C stops the running command (or clears the prompt line); the session goes on."""


class WorkspaceShell:
    """The commands of the prompt, over any workspace surface."""

    def __init__(
        self,
        workspace: WorkspaceSurface,
        console: Console,
        *,
        cwd: str = "/workspace",
        errors: Console | None = None,
    ) -> None:
        self.workspace = workspace
        self.console = console
        # Where what went wrong is said, and a command's own stderr goes: stderr in ``run_shell``, so
        # ``computer shell NAME -c 'cat f' > copy`` copies the file or nothing, never an error line.
        self.errors = errors or console
        self.cwd = cwd
        # The last line's exit code (``-c``'s): 0; a command's own code when it failed (``exec``, as
        # ``tool NAME exec`` exits); 1 for any other failure (an error, an unknown command).
        self.exit_code = 0
        self.interruptible = True  # whether Ctrl-C may stop the running line (not while $EDITOR runs)

    @property
    def failed(self) -> bool:
        """Whether the last line failed (an error, an exec that did not exit 0)."""
        return self.exit_code != 0

    def resolve(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, path)) if path else self.cwd

    async def run_line(self, line: str) -> bool:
        """Run one line; False when the user asked to leave."""
        line = line.strip()
        self.exit_code = 0
        if not line:
            return True
        if line.startswith("!"):
            line = "exec " + line[1:]
        command, _, rest = line.partition(" ")
        rest = rest.strip()
        try:
            if command in ("exit", "quit"):
                return False
            if command == "help":
                self.console.print(HELP, markup=False)
            elif command == "pwd":
                self.console.print(self.cwd, markup=False)
            elif command == "cd":
                await self.cd(rest or "/workspace")
            elif command == "ls":
                await self.ls(rest)
            elif command == "cat":
                await self.cat(rest)
            elif command == "edit":
                await self.edit(rest)
            elif command == "exec":
                await self.exec(rest)
            else:
                # A prompt that looks like a shell gets shell commands (`rm f`, `python3 x.py`):
                # say how to run one, rather than only that the prompt has no such command.
                self.usage(
                    f"unknown command {command!r}; to run it in the sandbox: !{line} (help lists the "
                    "prompt's own)"
                )
        except BrokenPipeError:
            raise  # stdout's reader has gone: the command ends (``_output.write_out``)
        except OSError as exc:
            self.exit_code = 1
            # The message escaped: it can carry what a program chose (a link's target, ESC [2J); one
            # line however long (soft_wrap: rich broke a 118-character path's error into three at 80 columns).
            self.errors.print(
                Text(f"{command}: ", style="red") + plain_text(describe_error(exc, command, rest)),
                highlight=False,
                soft_wrap=True,
            )
        return True

    def usage(self, message: str) -> None:
        """A line that did not do what it asked: said, and ``-c`` exits 1."""
        self.exit_code = 1
        self.errors.print(message, markup=False, highlight=False, soft_wrap=True)

    async def cd(self, path: str) -> None:
        target = self.resolve(path)
        stat = await self.workspace.fs.stat(target)
        if not stat.is_directory:
            self.usage(f"not a directory: {target}")
            return
        self.cwd = target

    async def ls(self, path: str) -> None:
        target = self.resolve(path)
        try:
            entries = await self.workspace.fs.readdir(target)
        except NotADirectoryError:  # a file: listed alone, as ls does
            stat = await self.workspace.fs.stat(target)
            self.console.print(
                Text(f"- {stat.size:>10}  ") + plain_text(path), highlight=False, soft_wrap=True
            )
            return
        for entry in entries:
            kind = "d" if entry.is_directory else "l" if entry.is_symlink else "-"
            name = entry.name + ("/" if entry.is_directory else "")
            # Escaped: a name is whatever a program or a model chose (ESC [2J cleared the terminal).
            # One line per entry however long the name (soft_wrap): rich broke a 94-character name in
            # two at 80 columns, so `shell NAME -c ls | grep` missed it.
            line = Text(f"{kind} {entry.size:>10}  ") + plain_text(name)
            self.console.print(line, highlight=False, soft_wrap=True)

    async def cat(self, path: str) -> None:
        if not path:
            self.usage("usage: cat PATH")
            return
        data = await self.workspace.fs.read_file(self.resolve(path))
        # The bytes as they are, so `computer shell NAME -c 'cat f' > f` copies a binary file.
        write_out(data, self.console.file)

    async def edit(self, path: str) -> None:
        if not path:
            self.usage("usage: edit PATH")
            return
        target = self.resolve(path)
        try:
            before = await self.workspace.fs.read_file(target)
        except FileNotFoundError:
            before = b""
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with tempfile.TemporaryDirectory(prefix="computer-edit-") as scratch:
            local = Path(scratch) / (posixpath.basename(target) or "file")
            local.write_bytes(before)
            self.interruptible = False  # the editor gets the terminal's Ctrl-C itself
            try:
                code = await asyncio.to_thread(subprocess.call, [*shlex.split(editor), str(local)])
            except FileNotFoundError:
                self.usage(f"editor not found: {editor} (set VISUAL or EDITOR); nothing saved")
                return
            finally:
                self.interruptible = True
            after = local.read_bytes()
        if code != 0:
            self.usage(f"{editor} exited with {code}; nothing saved")
        elif after == before:
            self.console.print("unchanged", markup=False)
        else:
            await self.workspace.fs.mkdir(posixpath.dirname(target), recursive=True)
            await self.workspace.fs.write_file(target, after)
            self.console.print(
                f"saved {target} ({len(after)} bytes)", markup=False, highlight=False, soft_wrap=True
            )

    async def exec(self, command: str) -> None:
        if not command:
            self.usage("usage: exec COMMAND")
            return
        if not self.workspace.runtime.backends():
            self.usage("this workspace has no exec backend")
            return
        handle = await self.workspace.runtime.exec(command, cwd=self.cwd)
        try:
            result = await handle.result()
        except asyncio.CancelledError:  # Ctrl-C: stop the command, not the session
            await asyncio.shield(handle.kill())
            raise
        if result.stdout:
            write_out(result.stdout, self.console.file)
        if result.stderr:
            self.errors.file.write(result.stderr)
            self.errors.file.flush()
        if result.truncated:  # only the tail was kept: say so, and where the whole output is
            from ..tools.exec import truncation_note

            for stream, cut in sorted(result.truncated.items()):
                self.errors.print(f"{stream}: {truncation_note(cut)}", markup=False, highlight=False)
        self.exit_code = command_exit_code(result.exit_code, result.status)
        if result.status != "completed":
            why = f": {result.error}" if result.error else ""
            # A run that never started (a cwd outside the sandbox's root) has no exit code: it said
            # "exit None".
            code = "" if result.exit_code is None else f", exit {result.exit_code}"
            self.errors.print(f"[{result.status}{code}{why}]", markup=False, highlight=False, soft_wrap=True)


SHOWN_PATH_CHARS = 400  # the longest path an error line shows whole

# What to do next, for an error with one answer (the prompt's command, errno).
_NEXT_STEPS: dict[tuple[str, int], str] = {
    ("cat", errno.EISDIR): "cat prints a file; ls lists a directory",
    ("ls", errno.ENOENT): "ls alone lists the current directory",
    ("cat", errno.ENOENT): "ls lists what is there",
    ("cd", errno.ENOENT): "ls lists what is there",
}


def describe_error(exc: OSError, command: str, argument: str) -> str:
    """One line for a failed prompt command: ``No such file or directory (ls lists what is there):
    /workspace/x``, as the tools say it. Decision: not ``FileNotFoundError: [Errno 2] ...: '/x'``, the
    exception's class and repr, which said nothing of what to do; an option the prompt's ``ls`` does not
    take (``ls -la``) names the sandbox's; a path past ``SHOWN_PATH_CHARS`` keeps its start and end."""
    reason = exc.strerror or str(exc)
    step = _NEXT_STEPS.get((command, exc.errno or 0))
    if exc.errno == errno.ENOENT and argument.startswith("-"):
        step = f"the prompt's {command} takes no options; !{command} {argument} runs it in the sandbox"
    if step is not None and ";" not in reason:  # a reason with a ";" says what to do already
        reason = f"{reason} ({step})"
    if not exc.filename:
        return reason
    path = str(exc.filename)
    if len(path) > SHOWN_PATH_CHARS:  # a 5,000-character name filled the screen
        keep = SHOWN_PATH_CHARS // 2
        path = f"{path[:keep]}…({len(path) - 2 * keep:,} characters elided)…{path[-keep:]}"
    return f"{reason}: {path}"


def reads(line: str) -> bool:
    """Whether a prompt line reads the workspace (``ls``, ``cat``, ``cd``, ``pwd``): on a workspace
    the line made, what it found (nothing) is explained by the workspace being new."""
    return line.strip().partition(" ")[0] in ("ls", "cat", "cd", "pwd")


def runs_exec(line: str) -> bool:
    """Whether a prompt line runs a command (``exec ...`` or ``!...``): only then does the workspace
    need its exec backends."""
    line = line.strip()
    return line.startswith("!") or line.partition(" ")[0] == "exec"


async def run_shell(
    options: GlobalOptions, name: str, console: Console, *, command: str | None = None
) -> int:
    """The prompt loop: one line at a time until ``exit`` or end of input; exit code 0.

    ``command``: run that one line instead, without the prompt (``computer shell NAME -c LINE``), for
    scripts; its exit code (``WorkspaceShell.exit_code``): 0, a command's own code when it failed,
    as ``tool NAME exec`` exits (124 after a timeout, 1 when it has none), 1 for any other failure. Decision: a line that runs no command opens the workspace
    without its exec backends (building them is most of a command's start-up in process), and a line
    that runs one with the shell backend alone: the prompt runs every command on the first backend,
    the shell, so the python backend's build (~0.3 s of CPU) would serve nothing.
    """
    backends: bool | tuple[str, ...] = True
    if command is not None:
        backends = ("shell",) if runs_exec(command) else False
    live = command is None  # one line: a sandbox per run (see ``_inprocess``)
    if command is None:
        new = not await asyncio.to_thread(_known, options, name)
    else:
        new = made_here(options, name)
    async with open_workspace(options, name, backends=backends, assets=True, live=live) as workspace:
        shell = WorkspaceShell(workspace, console, errors=errors())
        await workspace.fs.mkdir(shell.cwd, recursive=True)  # the user root; exec runs below it
        if command is not None:
            await shell.run_line(command)
            # As `tool` says it: `shell ntoes -c 'cat todo.md'` (a misspelt name) answered only
            # "FileNotFoundError: /workspace/todo.md", as if the file were lost, and made a workspace.
            if new and (reads(command) or (runs_exec(command) and shell.failed)):
                shell.errors.print(new_workspace_note(name), markup=False, highlight=False, soft_wrap=True)
            return shell.exit_code
        if new:  # a name mistyped would otherwise look like a workspace whose files were lost
            console.print(
                f"workspace {name} is new (empty, made now; `computer ls` lists the others, "
                f"`computer rm {shlex.quote(name)}` removes it)",
                markup=False,
                highlight=False,
            )
        console.print(f"workspace {name}: type help for commands, exit to leave", markup=False)
        code = await _prompt_loop(shell, name)
        if options.local:  # on a cluster the owner keeps the sandbox, and its processes, running
            await _say_what_ends(shell)
        return code
    return 0


def _known(options: GlobalOptions, name: str) -> bool:
    """Whether workspace ``name`` exists before this session opens it (and so makes it)."""
    from ._ls import list_workspaces

    return any(row.name == name for row in list_workspaces(options, prefix=name))


async def _say_what_ends(shell: WorkspaceShell) -> None:
    """At the end of a session in process, name the processes that end with it (``!server &``)."""
    from ._ps import ending_processes

    note = await ending_processes(shell.workspace)
    if note is not None:
        shell.console.print(note, markup=False, highlight=False)


async def _prompt_loop(shell: WorkspaceShell, name: str) -> int:
    """Read and run lines until ``exit`` or end of input. Decision: Ctrl-C behaves as in bash, never
    ending the session (the live sandbox and its background processes belong to this process): during
    a line it stops that line (an exec is killed), at the prompt it gives a new prompt (the terminal
    drops the typed line; the pending read goes on)."""
    loop = asyncio.get_running_loop()
    running: asyncio.Future[bool] | None = None
    prompt = ""

    def interrupt() -> None:
        if running is not None and not running.done():
            if shell.interruptible:
                running.cancel()
            return
        shell.console.file.write("\n" + prompt)
        shell.console.file.flush()

    try:
        loop.add_signal_handler(signal.SIGINT, interrupt)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread: Ctrl-C as before
        pass
    try:
        while True:
            prompt = f"{name}:{shell.cwd}> "
            try:
                line = await asyncio.to_thread(input, prompt)
            except EOFError:
                break
            running = asyncio.ensure_future(shell.run_line(line))
            try:
                if not await asyncio.shield(running):
                    break
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this loop itself is being cancelled
                shell.exit_code = 130
                shell.console.print("[interrupted]", markup=False, highlight=False)
            finally:
                running = None
    finally:
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGINT)
    return 0
