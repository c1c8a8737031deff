"""Atomic swaps a program makes with ``renameat2(RENAME_EXCHANGE)`` (``mv --exchange``, deploy tools,
atomic config swaps) across calls, the workspace and a reopen. inotify reports an exchange of ``a`` and
``b`` as two moves, ``a -> b`` then ``b -> a``: the last event on ``b`` is a move away although ``b``
is there. Before, the pull took such a path for gone without looking: a file or symlink swapped onto a
name new in the run (or a symlink swapped with a file) never reached the workspace, and was lost at the
next reopen; a file a background program keeps swapping in went missing from the workspace at each
sync of a live sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ._support import KINDS, PYTHON_MODES, ROOT, ok, opened, python_mode, shell

# ``python3 xch.py a b``: swap the two paths (renameat2 with RENAME_EXCHANGE), as ``mv --exchange`` does.
EXCHANGE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 2) != 0:
    code = ctypes.get_errno()
    raise OSError(code, os.strerror(code))
"""


async def _kinds(ws: object, names: list[str]) -> dict[str, object]:
    """Each name in the workspace: its content (a file), ``("link", target)`` or None (missing)."""
    fs = ws.fs  # type: ignore[attr-defined]
    seen: dict[str, object] = {}
    entries = {entry.name: entry for entry in await fs.readdir(ROOT)}
    for name in names:
        entry = entries.get(name)
        if entry is None:
            seen[name] = None
        elif entry.is_symlink:
            seen[name] = ("link", await fs.readlink(f"{ROOT}/{name}"))
        else:
            seen[name] = await fs.read_file(f"{ROOT}/{name}")
    return seen


@pytest.mark.parametrize("live", KINDS)
async def test_paths_a_run_swaps_with_rename_exchange_reach_the_workspace_and_a_reopen(
    db: Path, live: bool
) -> None:
    backend = shell(live)
    want = {
        # a symlink swapped onto a file the same run made: the file under the link's name
        "lnk": b"new\n",
        "new": ("link", "f"),
        # a symlink and a file both synced before: swapped
        "abs": b"F\n",
        "f": ("link", f"{ROOT}/f"),
        # two files synced before: swapped
        "a": b"bee\n",
        "b": b"ay\n",
    }
    async with opened(db, shell=backend, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/xch.py", EXCHANGE)
        await ws.fs.write_file(f"{ROOT}/f", "F\n")
        await ws.fs.write_file(f"{ROOT}/a", "ay\n")
        await ws.fs.write_file(f"{ROOT}/b", "bee\n")
        await ok(ws, "ln -s f lnk && ln -s /workspace/f abs")
        await ok(ws, "echo new > new && python3 xch.py lnk new")
        await ok(ws, "python3 xch.py abs f && python3 xch.py a b")
        assert await _kinds(ws, list(want)) == want
        seen = await ok(ws, "cat lnk abs a b && readlink new f")
        assert seen.stdout == f"new\nF\nbee\nay\nf\n{ROOT}/f\n"
    async with opened(db, python=False) as ws:
        assert await _kinds(ws, list(want)) == want
        seen = await ok(ws, "cat lnk abs a b && readlink new f")
        assert seen.stdout == f"new\nF\nbee\nay\nf\n{ROOT}/f\n"


# A program left running that saves its state by swapping a new version in (write ``cur.new``, exchange
# it with ``cur``, remove the old one), as an atomic config save that keeps the old file until the swap.
SWAPPER = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
print("ready", flush=True)
for i in range(150):
    with open("cur.new", "w") as f:
        f.write(f"v{i}\\n")
    assert libc.renameat2(-100, b"cur.new", -100, b"cur", 2) == 0, ctypes.get_errno()
    os.unlink("cur.new")
    time.sleep(0.004)
print("done", flush=True)
"""


async def test_a_file_a_background_program_keeps_swapping_in_is_never_missing_from_the_workspace(
    db: Path,
) -> None:
    backend = shell(True)
    async with opened(db, shell=backend, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/swap.py", SWAPPER)
        await ws.fs.write_file(f"{ROOT}/cur", "start\n")
        await ok(ws, "python3 swap.py > swap.log 2>&1 &")
        missing = 0
        for _ in range(400):  # bounded: the program ends after 150 swaps (~1 s)
            missing += not await ws.fs.exists(f"{ROOT}/cur")
            if (await ws.fs.exists(f"{ROOT}/swap.log")) and b"done" in await ws.fs.read_file(
                f"{ROOT}/swap.log"
            ):
                break
            await asyncio.sleep(0.02)
        ended = "for i in $(seq 600); do grep -q done swap.log && break; sleep 0.05; done; cat swap.log cur"
        assert (await ok(ws, ended)).stdout == "ready\ndone\nv149\n"
        assert missing == 0
        assert await ws.fs.read_file(f"{ROOT}/cur") == b"v149\n"
    async with opened(db, python=False) as ws:
        assert await ws.fs.read_file(f"{ROOT}/cur") == b"v149\n"
        assert (await ok(ws, "cat cur && ls")).stdout == "v149\ncur\nswap.log\nswap.py\n"


# The same swap from a program of the python backend (its sandbox's files go through a mirror too).
PYTHON_SWAP = """
import ctypes, os
open("/workspace/n", "w").write("new\\n")
os.symlink("f", "/workspace/l")
assert ctypes.CDLL(None).renameat2(-100, b"/workspace/l", -100, b"/workspace/n", 2) == 0
"""


@pytest.mark.parametrize("live", PYTHON_MODES)
async def test_a_python_program_s_swap_onto_a_new_name_reaches_the_workspace(db: Path, live: bool) -> None:
    async with python_mode(db, live) as ws:
        await ws.fs.write_file(f"{ROOT}/f", "F\n")
        await ok(ws, PYTHON_SWAP, backend="python")
        assert await _kinds(ws, ["l", "n"]) == {"l": b"new\n", "n": ("link", "f")}
    async with opened(db, python=False) as ws:
        assert await _kinds(ws, ["l", "n"]) == {"l": b"new\n", "n": ("link", "f")}
