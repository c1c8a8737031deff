"""An ``ExecHandle`` awaited in another event loop than the one that started its run.

A synchronous script writes ``handle = asyncio.run(ws.runtime.exec(cmd))`` and then
``asyncio.run(handle.result())``: the second call raised "RuntimeError: Task ... got Future attached
to a different loop", and the run, cancelled when the first loop ended, stayed "running" for ever
(never settled: no journal record, ``get_exec`` kept answering a handle that never finished). The run
is now settled when its loop ends (``cancelled``, with an error saying why and what to write instead),
its handle answers that from any loop, and a handle of a run in a loop still running in another
thread waits for it there.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from computer import Workspace
from computer.runtime import ShellBackend


def test_a_run_whose_loop_ended_is_settled_and_says_how_to_wait_for_it(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        handle = asyncio.run(ws.runtime.exec("sleep 30; echo never > out.txt"))
        result = asyncio.run(handle.result())
        assert result.status == "cancelled", result
        assert result.error is not None and "await its result in one event loop" in result.error
        again = asyncio.run(ws.runtime.get_exec(handle.id))  # settled: the journal has it
        assert asyncio.run(again.result()).status == "cancelled"
        assert not asyncio.run(ws.fs.exists("/workspace/out.txt"))

        async def in_one_loop() -> str:
            return (await (await ws.runtime.exec("echo fine")).result()).stdout

        assert asyncio.run(in_one_loop()) == "fine\n"
    finally:
        asyncio.run(ws.close())


def test_a_handle_of_a_loop_running_in_another_thread_waits_there(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(ws.fs.mkdir("/workspace", recursive=True), loop).result(30)
        handle = asyncio.run_coroutine_threadsafe(ws.runtime.exec("sleep 0.3; echo there"), loop).result(30)
        result = asyncio.run(asyncio.wait_for(handle.result(), 60))
        assert (result.status, result.stdout) == ("completed", "there\n"), result
    finally:
        asyncio.run_coroutine_threadsafe(ws.close(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_processes_and_kill_from_another_loop_than_the_sandbox_s(tmp_path: Path) -> None:
    """``processes()`` / ``kill_process()`` from another loop than the live sandbox's raised "Future
    attached to a different loop". A sandbox of a loop running in another thread answers from there; one
    of an ended loop says why nothing can reach it and what to do."""
    from computer.runtime._live import LiveSandboxError

    ws = Workspace(str(tmp_path / "w.db"), backends=[ShellBackend()])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def there(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    async def run(source: str) -> Any:
        return await (await ws.runtime.exec(source, timeout=60)).result()

    try:
        there(ws.fs.mkdir("/workspace", recursive=True))
        assert there(run("sleep 300 & echo started")).stdout == "started\n"
        for _ in range(200):  # the background subshell execs sleep a moment after the run ends
            listed = asyncio.run(ws.runtime.processes())  # from this thread's own loop
            if any(p.command == "sleep 300" for p in listed):
                break
            time.sleep(0.05)
        sleeper = next(p.pid for p in listed if p.command == "sleep 300")
        asyncio.run(ws.runtime.kill_process(sleeper))
        for _ in range(200):  # the kill is signalled; the init reaps it a moment later
            if all(p.pid != sleeper for p in asyncio.run(ws.runtime.processes())):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"process {sleeper} still listed after its kill")
    finally:
        there(ws.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()

    ws = Workspace(str(tmp_path / "w2.db"), backends=[ShellBackend()])
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        assert asyncio.run(run_in(ws, "sleep 300 & echo started")).stdout == "started\n"
        for call in (ws.runtime.processes, lambda: ws.runtime.kill_process(2)):
            with pytest.raises(LiveSandboxError, match="started in an event loop that has ended"):
                asyncio.run(call())
        assert asyncio.run(ws.runtime.end_sandbox())
        assert asyncio.run(ws.runtime.processes()) == []
    finally:
        asyncio.run(ws.close())


async def run_in(ws: Workspace, source: str) -> Any:
    return await (await ws.runtime.exec(source, timeout=60)).result()
