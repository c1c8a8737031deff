"""The python backend's live sandbox through a Ray pool, driven as an agent drives a Python tool: a
server started with ``subprocess.Popen`` and reached by the next call with ``urllib``, its log read
through ``ws.fs``; a database left open at the end of a call; ``workspace`` calls from threads; a spawn
pool; everything read again after the workspace is closed and opened again (s53)."""

from __future__ import annotations

import asyncio
import time

from fidelity.test_python_live_programs import FETCH  # the same fetch of the site the server serves

import computer
from computer.config import Settings

SERVE = """
import os, subprocess, sys
os.makedirs("site", exist_ok=True)
open("site/index.html", "w").write("hello from the site\\n")
log = open("server.log", "w")
server = subprocess.Popen(
    [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", "site"],
    stdout=log, stderr=subprocess.STDOUT)
def main(input):
    return server.pid
"""

# A database in WAL mode whose connection the program never closes, a file never closed, and
# ``workspace`` calls from 4 threads at once.
WORK = """
import sqlite3, workspace
from concurrent.futures import ThreadPoolExecutor
db = sqlite3.connect("app.db")
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS t (v TEXT)")
with db:
    db.executemany("INSERT INTO t VALUES (?)", [(str(i),) for i in range(300)])
notes = open("notes.txt", "w")
notes.write("never closed\\n")
def put(i):
    workspace.write_file(f"threads/{i}.txt", str(i) * 50)
    return workspace.read_text(f"threads/{i}.txt") == str(i) * 50
workspace.mkdir("threads")
with ThreadPoolExecutor(4) as pool:
    done = all(pool.map(put, range(16)))
def main(input):
    return done
"""

SPAWN = """
import multiprocessing
def square(i):
    open(f"spawned-{i}.txt", "w").write(str(i * i))
    return i * i
if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        print(sum(pool.map(square, range(4))))
"""

CHECK = """
import os, sqlite3
def main(input):
    db = sqlite3.connect("app.db")
    return [db.execute("PRAGMA integrity_check").fetchone()[0], db.execute("SELECT count(*) FROM t").fetchone()[0],
            open("notes.txt").read(), len(os.listdir("threads")), [open(f"spawned-{i}.txt").read() for i in range(4)]]
"""
CHECKED = ["ok", 300, "never closed\n", 16, ["0", "1", "4", "9"]]


async def run(ws: computer.Workspace, source: str) -> computer.ExecResult:
    result = await asyncio.wait_for(
        (await ws.runtime.exec(source, backend="python", timeout=30)).result(), 90
    )
    assert result.status == "completed", (source, result.stdout, result.stderr, result.error)
    return result


async def test_an_agents_python_steps_through_a_pool_and_after_a_reopen(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        pid = (await run(ws, SERVE)).value
        assert (await run(ws, FETCH)).value == "hello from the site\n"
        deadline = time.monotonic() + 15
        while '"GET /index.html HTTP/1.1" 200' not in await ws.fs.read_text("/workspace/server.log"):
            assert time.monotonic() < deadline, "the server's log line never reached the workspace"
            await asyncio.sleep(0.1)
        assert [p.pid for p in await ws.runtime.processes(backend="python")] == [pid]
        assert (await run(ws, WORK)).value is True
        assert (await run(ws, SPAWN)).stdout == "14\n"
        assert (await run(ws, CHECK)).value == CHECKED
        assert await ws.fs.read_text("/workspace/notes.txt") == "never closed\n"
    async with computer.get_workspace(name) as ws:
        assert (await run(ws, CHECK)).value == CHECKED
        assert len(await ws.fs.ls("/workspace/threads")) == 16
