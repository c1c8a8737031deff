"""The python backend (CASES 37): main(input) values, the injected workspace module, workspace imports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import computer


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, backend="python", **kwargs)).result()  # type: ignore[arg-type]


async def test_main_return_value_becomes_the_result_value(ws: computer.Workspace) -> None:
    result = await run(ws, 'def main(input):\n    return input["x"] * 2\n', input={"x": 21})
    assert (result.status, result.exit_code, result.value) == ("completed", 0, 42)


async def test_source_without_main_runs_as_a_script(ws: computer.Workspace) -> None:
    result = await run(ws, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (result.stdout, result.stderr, result.value) == ("out\n", "err\n", None)


async def test_structured_values_round_trip(ws: computer.Workspace) -> None:
    result = await run(
        ws, "def main(input):\n    return {'echo': input, 'list': [1, 2.5, None, True]}", input=["a"]
    )
    assert result.value == {"echo": ["a"], "list": [1, 2.5, None, True]}


async def test_a_value_that_is_not_json_fails_the_run(ws: computer.Workspace) -> None:
    result = await run(ws, "def main(input):\n    return object()")
    assert result.status == "failed" and "JSON" in result.stderr


async def test_an_exception_fails_with_its_traceback(ws: computer.Workspace) -> None:
    result = await run(ws, "def main(input):\n    raise KeyError('missing')")
    assert (result.status, result.exit_code) == ("failed", 1)
    assert "KeyError: 'missing'" in result.stderr
    assert "raise KeyError('missing')" in result.stderr  # the traceback shows the source line


@pytest.mark.parametrize("source", ["def (", "def f():\n    raise ValueError('x')\nf()", "import nope_mod_x"])
async def test_a_failing_program_s_traceback_is_what_python_prints_for_a_script(
    ws: computer.Workspace, source: str, tmp_path: Path
) -> None:
    """The runner's own frame is left out: the same text as ``python prog.py`` (named ``<exec>``)."""
    result = await run(ws, source)
    script = tmp_path / "prog.py"
    script.write_text(source)
    host = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    assert (result.exit_code, result.stderr) == (1, host.stderr.replace(f'"{script}"', '"<exec>"'))


async def test_main_s_traceback_starts_at_main(ws: computer.Workspace) -> None:
    result = await run(ws, "def main(input):\n    return 1 / input", input=0)
    assert result.stderr.startswith('Traceback (most recent call last):\n  File "<exec>", line 2, in main\n')
    assert result.stderr.endswith("ZeroDivisionError: division by zero\n") and "guest" not in result.stderr


async def test_a_traceback_starts_at_the_programs_frame_and_ctrl_c_ends_as_python_ends(
    ws: computer.Workspace,
) -> None:
    """s53: an uncaught exception's traceback began with the guest's own frame (``guest.py``, ``_run``,
    its ``exec`` line), which a script's never shows; an uncaught KeyboardInterrupt exited 1
    ("failed"), where python ends as SIGINT would (130 in a shell: "cancelled")."""
    result = await run(ws, "def f():\n    raise ValueError('x')\nf()\n")
    assert result.stderr.splitlines()[:2] == [
        "Traceback (most recent call last):",
        '  File "<exec>", line 3, in <module>',
    ]
    assert "guest" not in result.stderr and result.stderr.endswith("ValueError: x\n")
    interrupted = await run(ws, "print('working', flush=True)\nraise KeyboardInterrupt")
    assert (interrupted.status, interrupted.exit_code, interrupted.stdout) == ("cancelled", 130, "working\n")
    assert interrupted.stderr.endswith("KeyboardInterrupt\n")


async def test_an_async_main_is_awaited(ws: computer.Workspace) -> None:
    """s53: ``async def main(input)`` failed the run ("Object of type coroutine is not JSON
    serializable", a RuntimeWarning that it was never awaited); its awaited value is the result."""
    source = "import asyncio\nasync def main(input):\n    await asyncio.sleep(0.01)\n    return input * 2\n"
    result = await run(ws, source, input=21)
    assert (result.status, result.value, result.stderr) == ("completed", 42, "")


async def test_argv_names_the_program_not_the_guest(ws: computer.Workspace) -> None:
    """s53: ``sys.argv`` was the guest's (``['/opt/computer/guest.py']``): argparse's usage and errors
    named ``guest.py``. It names the program as ``__file__`` does."""
    source = "import argparse, sys\nprint(sys.argv)\nargparse.ArgumentParser().parse_args(['--nope'])\n"
    result = await run(ws, source)
    assert (result.exit_code, result.stdout) == (2, "['<exec>']\n")
    assert result.stderr.startswith("usage: <exec> [-h]") and "guest" not in result.stderr


async def test_the_runs_pythonpath_is_on_sys_path_as_python_has_it(ws: computer.Workspace) -> None:
    """s53: ``env={"PYTHONPATH": ...}`` reached the program's children (a python it started imported
    from there) but not the program: the guest runs ``-I``, which ignores it."""
    await ws.fs.mkdir("/workspace/lib", recursive=True)
    await ws.fs.write_file("/workspace/lib/mod.py", "X = 'from lib'\n")
    result = await run(ws, "import mod, sys\nprint(mod.X, sys.path[0])", env={"PYTHONPATH": "/workspace/lib"})
    assert result.stdout == "from lib /workspace/lib\n", result.stderr


async def test_a_program_that_replaced_sys_exit_still_ends_with_its_code(ws: computer.Workspace) -> None:
    """The guest ends the interpreter with ``raise SystemExit``, not the program's ``sys.exit``."""
    result = await run(ws, "import sys\nsys.exit = None\nraise SystemExit(4)\n")
    assert (result.exit_code, result.stderr) == (4, "")


async def test_a_program_that_patches_os_getpid_keeps_its_value(ws: computer.Workspace) -> None:
    """A test the program runs may patch ``os.getpid``: the guest tells its own process by its own."""
    result = await run(ws, "import os\nos.getpid = lambda: 1\ndef main(input):\n    return 'mine'\n")
    assert (result.status, result.value) == ("completed", "mine")


async def test_sys_exit_code_is_the_exit_code(ws: computer.Workspace) -> None:
    result = await run(ws, "import sys\nsys.exit(9)")
    assert (result.status, result.exit_code) == ("failed", 9)


async def test_workspace_module_write_is_visible_right_after(ws: computer.Workspace) -> None:
    source = "import workspace\ndef main(input):\n    workspace.write_file('/workspace/out.txt', input)\n    return 'ok'"
    result = await run(ws, source, input="written by python\n")
    assert result.value == "ok"
    assert await ws.fs.read_text("/workspace/out.txt") == "written by python\n"


async def test_workspace_module_reads_the_authoritative_workspace(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/data")
    await ws.fs.write_file("/workspace/data/a.csv", "1,2\n3,4\n")
    source = (
        "import workspace\n"
        "def main(input):\n"
        "    text = workspace.read_text('data/a.csv')\n"
        "    names = [e.name for e in workspace.readdir('/workspace/data')]\n"
        "    st = workspace.stat('/workspace/data/a.csv')\n"
        "    found = [f.path for f in workspace.find('/workspace', '**/*.csv')]\n"
        "    hits = [(m.path, m.line) for m in workspace.grep('3,4', '/workspace')]\n"
        "    return [text, names, st.size, st.is_file, found, hits, workspace.exists('nope'), workspace.ls('/workspace')]"
    )
    result = await run(ws, source)
    assert result.value == [
        "1,2\n3,4\n",
        ["a.csv"],
        8,
        True,
        ["/workspace/data/a.csv"],
        [["/workspace/data/a.csv", 2]],
        False,
        ["/workspace/data/a.csv"],
    ]


async def test_workspace_errors_are_the_usual_oserror_classes(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/dir")
    source = (
        "import workspace\n"
        "def main(input):\n"
        "    out = []\n"
        "    for call in (lambda: workspace.read_text('/workspace/missing'),\n"
        "                 lambda: workspace.read_file('/workspace/dir'),\n"
        "                 lambda: workspace.mkdir('/workspace/dir')):\n"
        "        try:\n"
        "            call()\n"
        "        except OSError as e:\n"
        "            out.append([type(e).__name__, e.filename])\n"
        "    return out"
    )
    result = await run(ws, source)
    assert result.value == [
        ["FileNotFoundError", "/workspace/missing"],
        ["IsADirectoryError", "/workspace/dir"],
        ["FileExistsError", "/workspace/dir"],
    ]


async def test_workspace_rename_mkdir_rm(ws: computer.Workspace) -> None:
    source = (
        "import workspace\n"
        "workspace.mkdir('/workspace/a/b', recursive=True)\n"
        "workspace.write_file('/workspace/a/b/f.bin', b'\\x00\\x01')\n"
        "workspace.rename('/workspace/a/b/f.bin', '/workspace/g.bin')\n"
        "workspace.rm('/workspace/a', recursive=True)\n"
    )
    result = await run(ws, source)
    assert result.status == "completed"
    assert await ws.fs.read_file("/workspace/g.bin") == b"\x00\x01"
    assert not await ws.fs.exists("/workspace/a")


async def test_imports_resolve_from_cwd_through_the_workspace(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/proj/pkg", recursive=True)
    await ws.fs.write_file("/workspace/proj/helper.py", "def twice(x):\n    return 2 * x\n")
    await ws.fs.write_file("/workspace/proj/pkg/__init__.py", "from .inner import VALUE\n")
    await ws.fs.write_file("/workspace/proj/pkg/inner.py", "VALUE = 'from a package'\n")
    source = "import helper\nfrom pkg import VALUE\nimport json\ndef main(input):\n    return [helper.twice(21), VALUE]"
    result = await run(ws, source, cwd="/workspace/proj")
    assert result.value == [42, "from a package"], result.stderr
    missing = await run(ws, "import not_there")
    assert missing.status == "failed" and "ModuleNotFoundError" in missing.stderr


async def test_stdin_reaches_the_program(ws: computer.Workspace) -> None:
    result = await run(ws, "import sys\nprint(sys.stdin.read().upper())", stdin="quiet")
    assert result.stdout == "QUIET\n"


async def test_a_python_timeout_cancels_with_124(ws: computer.Workspace) -> None:
    # 3 s (was 1): the print must run before the timeout, and a loaded machine can take longer to
    # start the interpreter (the timeout is the test's own timer: it cannot wait for an event).
    result = await run(ws, "import time\nprint('go', flush=True)\ntime.sleep(30)", timeout=3)
    assert (result.status, result.exit_code, result.stdout) == ("cancelled", 124, "go\n")


async def test_python_long_output_is_tailed_and_saved(ws: computer.Workspace) -> None:
    handle = await ws.runtime.exec("for i in range(3000):\n    print(i)", backend="python")
    result = await handle.result()
    cut = result.truncated["stdout"]
    assert cut.path == f"/.computer/output/python.{handle.id}.stdout.log"
    assert await ws.fs.read_text(cut.path) == "".join(f"{i}\n" for i in range(3000))


async def test_exit_and_quit_work_as_in_a_script(ws: computer.Workspace) -> None:
    """The guest starts without ``site`` (27 ms): it puts back what scripts use from it."""
    assert (await run(ws, "print('a')\nexit(3)\nprint('b')")).exit_code == 3
    assert (await run(ws, "quit()")).exit_code == 0
    result = await run(ws, "import sys\nprint(callable(help), sys.flags.no_site)")
    assert result.stdout == "True 1\n"


async def test_a_traceback_the_program_prints_itself_shows_its_source_lines(ws: computer.Workspace) -> None:
    """``linecache`` is loaded only when something imports it, and then knows the run's source."""
    source = "import traceback\ntry:\n    1 / 0  # the line\nexcept ZeroDivisionError:\n    traceback.print_exc()\n"
    result = await run(ws, source)
    assert result.exit_code == 0 and "1 / 0  # the line" in result.stderr


async def test_the_cwd_is_the_mirrored_workspace_directory(ws: computer.Workspace) -> None:
    """Issue 16 / SPEC section 10: ``open()`` failed (the cwd was /tmp) and files written with it were
    silently lost; now the cwd is the workspace's /workspace, synced like a shell run."""
    await ws.fs.write_file("/workspace/data.csv", "a,b\n1,2\n")
    source = (
        "import csv, os, pathlib, subprocess\n"
        "rows = list(csv.reader(open('data.csv')))\n"
        "pathlib.Path('out').mkdir()\n"
        "open('out/sum.txt', 'w').write(str(sum(int(x) for x in rows[1])))\n"
        "subprocess.run(['cp', 'data.csv', 'copy.csv'], check=True)\n"
        "def main(input):\n    return [os.getcwd(), rows]"
    )
    result = await run(ws, source)
    assert result.value == ["/workspace", [["a", "b"], ["1", "2"]]], result.stderr
    assert set(result.pulled) >= {"/workspace/out/sum.txt", "/workspace/copy.csv"}
    assert await ws.fs.read_text("/workspace/out/sum.txt") == "3"
    assert await ws.fs.read_text("/workspace/copy.csv") == "a,b\n1,2\n"
    shell = await (await ws.runtime.exec("cat out/sum.txt")).result()
    assert shell.stdout == "3"  # the shell sees the same directory
    again = await run(ws, "print(open('out/sum.txt').read())")
    assert again.stdout == "3\n" and again.pushed == 0  # the run's own changes are not sent back


async def test_a_path_written_through_workspace_and_open_in_one_run_keeps_the_workspace_write(
    ws: computer.Workspace,
) -> None:
    """The decision written in the backend's docstring: the two views meet at the run's edges."""
    source = (
        "import workspace\n"
        "open('both.txt', 'w').write('through open')\n"
        "workspace.write_file('both.txt', 'through workspace')\n"
    )
    result = await run(ws, source)
    assert await ws.fs.read_text("/workspace/both.txt") == "through workspace"
    assert "/workspace/both.txt" in result.skipped and result.skipped_reasons["/workspace/both.txt"]
    after = await run(ws, "print(open('both.txt').read())")
    assert after.stdout == "through workspace\n"


async def test_a_cwd_outside_the_mount_root_runs_without_a_mirror(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/proj")
    await ws.fs.write_file("/proj/helper.py", "VALUE = 7\n")
    result = await run(
        ws, "import helper, os\ndef main(input):\n    return [helper.VALUE, os.getcwd()]", cwd="/proj"
    )
    assert result.value == [7, "/tmp"], result.stderr


async def test_values_json_takes_cross_as_json_has_them_and_others_fail_saying_why(
    ws: computer.Workspace,
) -> None:
    """``{1: 'a'}`` failed as if the program broke the channel (an int key), ``2**200`` and a lone
    surrogate with msgpack tracebacks from the guest's own code; ``sys.exit("bye")`` printed nothing."""
    keys = await run(ws, "def main(input):\n    return {1: 'a', 'n': (1, 2)}\n")
    assert (keys.status, keys.value) == ("completed", {"1": "a", "n": [1, 2]}), keys
    big = await run(ws, "def main(input):\n    return 2 ** 200\n")
    assert big.status == "failed" and "main() returned a value with an integer past 64 bits" in big.stderr, (
        big
    )
    assert "Traceback" not in big.stderr
    odd = await run(ws, "def main(input):\n    return '\\udc80'\n")
    assert odd.status == "failed" and "main() returned a value that cannot be sent" in odd.stderr, odd
    bye = await run(ws, "import sys\nsys.exit('bye')\n")
    assert (bye.exit_code, bye.stderr) == (1, "bye\n"), bye
    with pytest.raises(ValueError, match="integer past 64 bits"):
        await ws.runtime.exec("def main(input):\n    return 1\n", backend="python", input={"x": [2**70]})
    with pytest.raises(ValueError, match="not JSON-able"):
        await ws.runtime.exec("def main(input):\n    return 1\n", backend="python", input=float("nan"))
