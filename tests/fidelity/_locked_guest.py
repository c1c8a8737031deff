"""The scenario of ``test_locked_modes`` run by a process that cannot override file modes (no
``CAP_DAC_OVERRIDE``: a non-root host, as a root test runs it under ``setpriv``): programs lock their
owner out, the workspace writes below what they locked, and a reopen reads it all back. Prints one
JSON object of what it saw.

Usage: python -m tests.fidelity._locked_guest DB live|call
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import computer
from computer.runtime import ShellBackend
from computer.runtime._limits import overrides_modes

ROOT = "/workspace"
BIG = bytes(range(256)) * (12 * 1024)  # 3 MiB: pushed as chunks, filled after it is made read-only


async def _run(ws: computer.Workspace, source: str) -> dict[str, Any]:
    result = await asyncio.wait_for((await ws.runtime.exec(source, timeout=60)).result(), 180)
    return {
        "status": result.status,
        "stdout": result.stdout,
        "stderr": result.stderr[-500:],
        "pulled": result.pulled,
        "skipped": result.skipped_reasons,
        "error": result.error,
    }


async def _view(ws: computer.Workspace, paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        try:
            st = await ws.fs.stat(path)
        except OSError as exc:
            out[path] = f"error: {exc}"
            continue
        data = (
            (await ws.fs.read_file(path)).decode(errors="replace") if st.is_file and st.size < 4096 else None
        )
        out[path] = {"mode": st.mode & 0o7777, "data": data, "size": st.size}
    return out


async def _race(ws: computer.Workspace, live: bool) -> dict[str, Any]:
    """The workspace writes into a directory a running program keeps read-only (``chmod 500``). Live,
    the write reaches the sandbox while the program waits for it (the tick's push lifts the directory
    and puts its bits back); per call, both made the directory: the pull takes the program's file
    beside the workspace's (the directory keeps the workspace's mode) and the next run has both."""
    wait = "for i in $(seq 400); do [ -e r/new ] && break; sleep 0.05; done; " if live else "sleep 1; "
    handle = await ws.runtime.exec(
        f"mkdir r && echo 1 > r/own && chmod 500 r && echo ready && {wait}stat -c %a r; cat r/new r/own",
        timeout=60,
    )
    async for snapshot in handle:
        if "ready" in snapshot.stdout or snapshot.done:
            break
    for _ in range(400):  # live: until a tick pulled the program's directory (bounded)
        if not live or await ws.fs.exists(f"{ROOT}/r/own"):
            break
        await asyncio.sleep(0.05)
    await ws.fs.mkdir(f"{ROOT}/r", recursive=True)
    await ws.fs.write_file(f"{ROOT}/r/new", b"from the workspace")
    result = await asyncio.wait_for(handle.result(), 180)
    return {
        "status": result.status,
        "stdout": result.stdout,
        "pulled": result.pulled,
        "skipped": result.skipped_reasons,
    }


def _shell(live: bool) -> ShellBackend:
    return ShellBackend(live=live, unprivileged=False)  # the sandbox's files are this process's own


async def main(db: str, live: bool) -> dict[str, Any]:
    seen: dict[str, Any] = {"overrides": overrides_modes()}
    async with computer.Workspace(db, backends=[_shell(live)]) as ws:
        await ws.fs.mkdir(ROOT, recursive=True)
        seen["lock"] = await _run(
            ws,
            "mkdir d e && echo hi > d/f && echo deep > e/g && echo top > t && chmod 000 d t && chmod 500 e",
        )
        seen["after_lock"] = await _view(
            ws, [f"{ROOT}/d", f"{ROOT}/d/f", f"{ROOT}/t", f"{ROOT}/e", f"{ROOT}/e/g"]
        )
        seen["modes_inside"] = await _run(ws, "stat -c '%n %a' d t e")
        await ws.fs.write_file(f"{ROOT}/d/new", b"from the workspace")
        await ws.fs.write_file(f"{ROOT}/t", b"the workspace's t")
        await ws.fs.write_file(f"{ROOT}/e/h", b"into a read-only directory")
        await ws.fs.write_file(f"{ROOT}/big", BIG, mode=0o444)
        seen["read_back"] = await _run(
            ws,
            "stat -c '%n %a' d t e big; chmod 700 d; chmod 600 t; cat d/new; echo; cat t; echo; cat e/h; echo; "
            "md5sum < big; chmod 000 d t",
        )
        # A directory moved breaks the watch: the next pull walks the tree, through a locked directory.
        seen["moved"] = await _run(ws, "mv d d2 && echo walked")
        seen["after_move"] = await _view(ws, [f"{ROOT}/d", f"{ROOT}/d2", f"{ROOT}/d2/f", f"{ROOT}/d2/new"])
        seen["top"] = await _run(ws, "chmod 000 . && echo locked")
        seen["top_after"] = await _run(ws, "stat -c %a . && chmod 755 . && ls")
        # A top the program keeps read-only: its mode is the workspace's, and a push writes into it.
        seen["top_read_only"] = await _run(ws, "chmod 500 . && echo read-only")
        seen["top_mode"] = (await ws.fs.stat(ROOT)).mode & 0o7777
        await ws.fs.write_file(f"{ROOT}/into-top", b"pushed")
        seen["top_read_only_after"] = await _run(ws, "stat -c %a . && cat into-top && chmod 755 .")
        seen["race"] = await _race(ws, live)
        seen["after_race"] = await _run(ws, "chmod 700 r; cat r/new; echo; stat -c %a r")
    async with computer.Workspace(db, backends=[_shell(live)]) as ws:
        seen["reopened"] = await _view(
            ws,
            [
                f"{ROOT}/d2",
                f"{ROOT}/d2/f",
                f"{ROOT}/d2/new",
                f"{ROOT}/t",
                f"{ROOT}/e/g",
                f"{ROOT}/e/h",
                f"{ROOT}/big",
                f"{ROOT}/r/new",
            ],
        )
        seen["reopened_run"] = await _run(ws, "chmod 700 d2 && cat d2/f d2/new && md5sum < big")
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2] == "live"))))
