"""Times a program gives its files that the store cannot hold as they are: tmpfs takes any 64-bit
second (`os.utime(f, (0, 2**62))`), whose milliseconds overflow SQLite's INTEGER. Such a pull failed
with an ``OverflowError``: every change of the run lost, and in a live sandbox every later run failed
the same (the file stays in the mirror). Now the time is stored as the bound of ``datetime``'s years
(``MIN_MS``/``MAX_MS``), and everything else of the run is pulled."""

from __future__ import annotations

from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend
from computer.runtime._backend import MAX_MS, MIN_MS

SET_TIMES = (
    'echo kept > ok; touch far past; mkdir fard; ln -s ok farl; python3 -c "import os\n'
    "os.utime('far', (0, 2**62)); os.utime('past', (0, -2**62)); os.utime('fard', (0, 2**62))\n"
    "os.utime('farl', (0, 2**62), follow_symlinks=False)\"; echo also > other"
)


async def _times(ws: computer.Workspace) -> dict[str, int]:
    return {n: (await ws.fs.stat(f"/workspace/{n}")).mtime for n in ("far", "past", "fard")}


@pytest.mark.parametrize("live", [True, False])
async def test_a_file_with_a_time_past_the_store_is_pulled_with_the_bound(tmp_path: Path, live: bool) -> None:
    if live and not ShellBackend(live=True).live:
        pytest.skip("no cgroup freezer here")
    path = str(tmp_path / "w.db")
    async with computer.Workspace(path, backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(SET_TIMES)).result()
        assert (result.status, result.error) == ("completed", None)
        assert await ws.fs.read_text("/workspace/other") == "also\n"
        expected = {"far": MAX_MS, "past": MIN_MS, "fard": MAX_MS}
        assert await _times(ws) == expected
        again = await (await ws.runtime.exec("echo next > next; cat ok")).result()
        assert (again.status, again.stdout) == ("completed", "kept\n")
        await ws.fs.write_file("/workspace/far", b"written")  # a later time than the bound's
        assert (await ws.fs.stat("/workspace/far")).mtime == MAX_MS + 1
    async with computer.Workspace(path, backends=[ShellBackend(live=live)]) as ws:
        assert await ws.fs.read_text("/workspace/next") == "next\n"
        seen = await (await ws.runtime.exec("cat far; stat -c %Y past fard farl")).result()
        bounds = f"{MIN_MS // 1000}\n{MAX_MS // 1000}\n{MAX_MS // 1000}\n"  # the link's own time too
        assert (seen.status, seen.stdout) == ("completed", f"written{bounds}")
