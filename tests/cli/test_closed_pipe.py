"""Output into a pipe whose reader closes early (`computer shell NAME -c 'cat big' | head -1`) ends
the command as coreutils' ``cat`` ends: no traceback, exit 141 (128 + SIGPIPE, what a shell reports).
Before, ``cat`` exited 0 with its output silently cut (``BufferedWriter.write`` returned a short
count, ignored), and a listing exited 1 (rich's own broken-pipe handling)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import COMPUTER, REPO, cli_env, run_cli

LINES = 200_000  # ~1.3 MB: far more than a pipe's buffer (64 KiB)
FILES = 6_000  # `ls` of them: ~130 KB


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace ``w`` with a big file and a big directory, made by exec calls, checked by others."""
    data = tmp_path_factory.mktemp("pipe")
    env = cli_env(data)
    made = run_cli(
        ["shell", "w", "-c", f"!seq 1 {LINES} > big && mkdir many && cd many && seq 1 {FILES} | xargs touch"],
        env=env,
    )
    assert made.returncode == 0, made.stderr
    copied = run_cli(["shell", "w", "-c", "cat big"], env=env)
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout.splitlines() == [str(i) for i in range(1, LINES + 1)]
    return data


def _read_one_line_and_close(args: list[str], data: Path, stdin: str | None = None) -> tuple[str, int, str]:
    """``computer ARGS | head -1``: the first line, the exit code, stderr."""
    process = subprocess.Popen(
        [*COMPUTER, *args], env=cli_env(data), cwd=REPO, text=True,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        if stdin is not None:
            assert process.stdin is not None
            process.stdin.write(stdin)
            process.stdin.close()
        first = process.stdout.readline()
        process.stdout.close()  # as head does after its line
        err = process.stderr.read()
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return first, process.returncode, err


@pytest.mark.parametrize(
    ("args", "stdin", "first"),
    [
        (["shell", "w", "-c", "cat big"], None, "1\n"),
        (["shell", "w", "-c", "ls many"], None, None),
        (["shell", "w", "-c", "cat /workspace/big"], None, "1\n"),
        (["shell", "w"], "cat big\nls many\nexit\n", None),  # the prompt, its input a script
    ],
    ids=["cat", "ls", "cat absolute", "prompt"],
)
def test_a_reader_that_closes_early_ends_the_command_as_cat(
    data: Path, args: list[str], stdin: str | None, first: str | None
) -> None:
    line, code, err = _read_one_line_and_close(args, data, stdin)
    if first is not None:
        assert line == first
    assert code == 141, err
    assert "Traceback" not in err and "Error" not in err, err


def test_a_reader_that_reads_all_sees_all_and_exit_0(data: Path) -> None:
    listed = run_cli(["shell", "w", "-c", "ls many"], env=cli_env(data))
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == FILES


def test_write_out_writes_everything_a_short_writing_stream_takes() -> None:
    """The loop itself (an exec's output and ``tool``'s JSON go through it too): a binary layer that
    takes at most 7 bytes a call gets all of them, in order; one that takes none raises."""
    import io

    from computer.cli._output import write_out

    class Short(io.RawIOBase):
        def __init__(self, limit: int) -> None:
            self.got = bytearray()
            self.limit = limit

        def writable(self) -> bool:
            return True

        def write(self, data: bytes) -> int:  # type: ignore[override]
            taken = bytes(data[: self.limit])
            self.got += taken
            return len(taken)

    short = Short(7)
    text = io.TextIOWrapper(short, encoding="utf-8", write_through=True)  # type: ignore[arg-type]
    write_out("héllo wörld " * 50, text)
    write_out(b"\xff\x00end", text)
    assert bytes(short.got) == ("héllo wörld " * 50).encode() + b"\xff\x00end"
    with pytest.raises(BrokenPipeError):
        write_out(b"x", io.TextIOWrapper(Short(0), encoding="utf-8"))  # type: ignore[arg-type]


def test_an_exec_whose_output_was_cut_says_where_the_whole_output_is(data: Path) -> None:
    """`shell NAME -c '!cat big'` printed only the output's tail (the exec keeps its last lines) and
    said nothing: it read as the whole file. `tool NAME exec` says so in its JSON (``truncated``)."""
    env = cli_env(data)
    ran = run_cli(["shell", "w", "-c", "!cat big"], env=env)
    assert ran.returncode == 0, ran.stderr
    shown = ran.stdout.splitlines()
    assert 0 < len(shown) < LINES and shown[-1] == str(LINES)
    notes = [line for line in ran.stderr.splitlines() if line.startswith("stdout: [Showing lines ")]
    assert len(notes) == 1, ran.stderr
    assert f"of {LINES}. Full output: /.computer/output/" in notes[0]
    saved = notes[0].rsplit("Full output: ", 1)[1].removesuffix("]")
    whole = run_cli(["shell", "w", "-c", f"cat {saved}"], env=env)  # a later call reads it
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.splitlines() == [str(i) for i in range(1, LINES + 1)]


def _into_a_closed_pipe(args: list[str], data: Path) -> tuple[int, str]:
    """``computer ARGS | head -0``: stdout a pipe whose reader has closed before anything was
    written (help fits a pipe's buffer, so a reader that reads one line first may close after it)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [*COMPUTER, *args], env=cli_env(data), cwd=REPO, stdin=subprocess.DEVNULL,
            stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(writer)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "args",
    [["--help"], ["shell", "--help"], ["tool", "--help"], ["tool", "w", "read", "--help"], ["--version"],
     ["tools"]],
    ids=["--help", "shell --help", "tool --help", "tool TOOL --help", "--version", "tools"],
)  # fmt: skip
def test_help_into_a_closed_pipe_exits_as_every_command(tmp_path: Path, args: list[str]) -> None:
    """typer's help (and what the app prints outside a command's body) into a closed pipe exited 1:
    rich's handler raised ``SystemExit(1)``, typer turned an ``EPIPE`` into exit 1."""
    code, err = _into_a_closed_pipe(args, tmp_path)
    assert code == 141, err
    assert err == "", err
