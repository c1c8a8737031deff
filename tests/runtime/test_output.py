"""Long output through a real run (CASES 34): tails, saved logs byte for byte, per-run options, keep."""

from __future__ import annotations

import computer


async def test_ten_lines_are_whole_and_nothing_is_saved(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("seq 1 10")).result()
    assert result.stdout == "".join(f"{i}\n" for i in range(1, 11))
    assert result.truncated == {}
    assert await ws.fs.ls("/.computer/output") == []


async def test_five_thousand_lines_keep_the_last_two_thousand_and_save_the_log(
    ws: computer.Workspace,
) -> None:
    handle = await ws.runtime.exec("seq 1 5000")
    result = await handle.result()
    assert result.stdout.splitlines()[0] == "3001"
    assert result.stdout.endswith("5000\n")
    assert len(result.stdout.splitlines()) == 2000
    cut = result.truncated["stdout"]
    assert (cut.status, cut.reason, cut.first_line, cut.total_lines) == ("saved", "lines", 3001, 5000)
    assert cut.path == f"/.computer/output/shell.{handle.id}.stdout.log"
    assert await ws.fs.read_file(cut.path) == "".join(f"{i}\n" for i in range(1, 5001)).encode()
    assert "stderr" not in result.truncated


async def test_binary_output_is_saved_exactly(ws: computer.Workspace) -> None:
    payload = bytes(range(256)) * 800  # 200 KiB, not UTF-8
    await ws.fs.write_file("/workspace/blob.bin", payload)
    result = await (await ws.runtime.exec("cat blob.bin")).result()
    cut = result.truncated["stdout"]
    assert cut.status == "saved" and cut.total_bytes == len(payload)
    assert cut.path is not None
    assert await ws.fs.read_file(cut.path) == payload
    assert "\ufffd" in result.stdout  # invalid bytes are replaced in the str tail


async def test_per_run_max_lines_shows_the_last_lines(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("seq 1 20", output={"max_lines": 5})).result()
    assert result.stdout == "16\n17\n18\n19\n20\n"
    assert result.truncated["stdout"].first_line == 16


async def test_output_false_keeps_everything_in_memory(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("seq 1 5000", output=False)).result()
    assert result.stdout == "".join(f"{i}\n" for i in range(1, 5001))
    assert result.truncated == {}
    assert await ws.fs.ls("/.computer/output") == []


async def test_keep_two_after_three_runs_keeps_the_last_two_logs(ws: computer.Workspace) -> None:
    paths = []
    for _ in range(3):
        result = await (await ws.runtime.exec("seq 1 10", output={"max_lines": 2, "keep": 2})).result()
        assert result.truncated["stdout"].path is not None
        paths.append(result.truncated["stdout"].path)
    assert sorted(await ws.fs.ls("/.computer/output")) == sorted(paths[1:])


async def test_stderr_is_cut_and_saved_on_its_own(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("seq 1 30 >&2; echo out", output={"max_lines": 3})).result()
    assert result.stdout == "out\n"
    assert result.stderr == "28\n29\n30\n"
    cut = result.truncated["stderr"]
    assert cut.path is not None and cut.path.endswith(".stderr.log")
    assert await ws.fs.read_text(cut.path) == "".join(f"{i}\n" for i in range(1, 31))
    assert "stdout" not in result.truncated


async def test_a_long_line_shows_its_end_as_a_partial_line(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("printf 'x\\nabcdefghij'", output={"max_bytes": 4})).result()
    assert result.stdout == "ghij"
    cut = result.truncated["stdout"]
    assert cut.partial_line and cut.reason == "bytes" and cut.total_bytes == 12


async def test_runtime_level_output_default_applies_to_every_run(shell_backend: object) -> None:
    async with computer.Workspace(backends=[shell_backend], output={"max_lines": 2}) as ws:  # type: ignore[list-item]
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec("seq 1 5")).result()
        assert result.stdout == "4\n5\n"
