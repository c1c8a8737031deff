"""``computer shell``'s commands over an in-process workspace: ls, cat, cd, edit via $EDITOR, exec."""

from __future__ import annotations

import io
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rich.console import Console

from computer import Workspace
from computer.cli._shell import WorkspaceShell
from computer.runtime import ShellBackend


@pytest.fixture
async def workspace() -> AsyncIterator[Workspace]:
    async with Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace/src", recursive=True)
        await ws.fs.write_file("/workspace/src/main.py", "print('hi')\n")
        yield ws


def _shell(workspace: Workspace) -> tuple[WorkspaceShell, io.StringIO]:
    out = io.StringIO()
    return WorkspaceShell(workspace, Console(file=out, width=200, color_system=None)), out


async def test_ls_cat_and_cd_work_relative_to_the_current_directory(workspace: Workspace) -> None:
    shell, out = _shell(workspace)
    assert await shell.run_line("ls")
    assert "src/" in out.getvalue()
    await shell.run_line("cd src")
    assert shell.cwd == "/workspace/src"
    await shell.run_line("cat main.py")
    assert "print('hi')" in out.getvalue()
    await shell.run_line("cd ..")
    assert shell.cwd == "/workspace"


async def test_missing_paths_print_the_error_and_keep_the_prompt(workspace: Workspace) -> None:
    shell, out = _shell(workspace)
    assert await shell.run_line("cat nope.txt")
    assert "cat: No such file or directory (ls lists what is there): /workspace/nope.txt" in out.getvalue()
    assert await shell.run_line("frobnicate")
    assert "unknown command 'frobnicate'" in out.getvalue()


async def test_exit_ends_the_prompt(workspace: Workspace) -> None:
    shell, _ = _shell(workspace)
    assert await shell.run_line("exit") is False


async def test_edit_saves_what_the_editor_wrote(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'a').write('print(\"edited\")\\n')\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    monkeypatch.delenv("VISUAL", raising=False)
    shell, out = _shell(workspace)
    await shell.run_line("edit src/main.py")
    assert await workspace.fs.read_text("/workspace/src/main.py") == "print('hi')\nprint(\"edited\")\n"
    await shell.run_line("edit notes/new.txt")  # a new file in a new directory
    assert await workspace.fs.read_text("/workspace/notes/new.txt") == 'print("edited")\n'
    assert "saved /workspace/notes/new.txt" in out.getvalue()


async def test_an_editor_that_changes_nothing_saves_nothing(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDITOR", "true")
    monkeypatch.delenv("VISUAL", raising=False)
    shell, out = _shell(workspace)
    before = await workspace.fs.stat("/workspace/src/main.py")
    await shell.run_line("edit src/main.py")
    assert "unchanged" in out.getvalue()
    assert (await workspace.fs.stat("/workspace/src/main.py")).mtime == before.mtime


async def test_exec_runs_in_the_current_directory_and_shows_failures(workspace: Workspace) -> None:
    shell, out = _shell(workspace)
    await shell.run_line("cd src")
    await shell.run_line("!python3 main.py && pwd")
    assert "hi\n/workspace/src" in out.getvalue()
    await shell.run_line("exec echo oops >&2; exit 3")
    assert "oops" in out.getvalue() and "[failed, exit 3]" in out.getvalue()


@pytest.mark.parametrize(
    ("line", "editor", "says"),
    [
        (
            "edit src/main.py",
            "/nonexistent/editor",
            "editor not found: /nonexistent/editor (set VISUAL or EDITOR)",
        ),
        ("edit src/main.py", "false", "false exited with 1; nothing saved"),
        ("cd src/main.py", "true", "not a directory: /workspace/src/main.py"),
        ("cat", "true", "usage: cat PATH"),
        ("exec", "true", "usage: exec COMMAND"),
    ],
)
async def test_a_line_that_does_not_do_what_it_asks_says_so_and_counts_as_failed(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, line: str, editor: str, says: str
) -> None:
    """``-c`` exits 1 for these (``failed``), as for an error (a failed command: its own code)."""
    monkeypatch.setenv("EDITOR", editor)
    monkeypatch.delenv("VISUAL", raising=False)
    shell, out = _shell(workspace)
    assert await shell.run_line(line)
    assert says in out.getvalue() and "Traceback" not in out.getvalue()
    assert shell.failed
    assert await workspace.fs.read_text("/workspace/src/main.py") == "print('hi')\n"
    await shell.run_line("ls")
    assert not shell.failed


async def test_a_run_that_failed_outside_the_program_says_why(workspace: Workspace) -> None:
    """A run the backend refused (no exit code) printed ``[failed, exit None]`` and nothing of why;
    then ``[failed, exit None: why]``: a run that never started has no exit code to print."""
    shell, out = _shell(workspace)
    await shell.run_line("cd /")
    await shell.run_line("!ls")
    assert "[failed: cwd / is outside the mount root /workspace]" in out.getvalue()
    assert "exit None" not in out.getvalue()
    assert shell.exit_code == 1


async def test_ls_shows_a_name_with_terminal_codes_escaped(workspace: Workspace) -> None:
    """A program or a model named a file with ``ESC [2J`` (clear screen) or a newline (a fake row):
    the shell's ``ls`` printed it as is; it escapes it now, as ``computer ls`` does a workspace's."""
    await workspace.fs.write_file("/workspace/a\x1b[2J\nd 0  fake", b"x")
    shell, out = _shell(workspace)
    assert await shell.run_line("ls")
    assert await shell.run_line("ls 'a\x1b[2J\nd 0  fake'")
    text = out.getvalue()
    assert "\x1b" not in text and "\nd 0  fake" not in text
    assert text.count("a\\x1b[2J\\nd 0  fake") == 2
