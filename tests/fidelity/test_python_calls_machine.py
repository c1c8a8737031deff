"""Stateful property of the python backend's calls in a live sandbox (s53): each step is one python
call that writes or removes a file in one of the ways programs do (``open`` with ``with``, a file
never closed, a thread not joined, an ``atexit`` function, ``workspace`` calls from threads or forked
pool workers, a module written and imported at once) or a ``ws.fs`` change between calls, and the
workspace is closed and opened again (warm or fresh backends). Invariant after every step: a python
call's ``open()`` view and the workspace's equal the model."""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

import computer
from computer.runtime import PythonBackend

from ._support import MARGIN, WorkspaceMachine, machine_runner, ok

pytestmark = pytest.mark.skipif(not PythonBackend().live, reason="no live sandboxes here (cgroup freezer)")

HOME = "/workspace/m"  # the calls' cwd
PATHS = st.sampled_from(["a.txt", "f.txt", "d/b.txt", "d/e/c.txt"])
CONTENTS = st.text(alphabet="abcxyz\n", min_size=0, max_size=40)
WAYS = st.sampled_from(["with", "unclosed", "thread", "atexit", "workspace", "threads", "fork"])

# Each writes ``C`` (the content) to ``P`` (the path) one way; every way makes the parents first, as it
# writes: with ``os.makedirs``, or through ``workspace`` for the ways that write through it (the
# workspace sees the sandbox's own ``mkdir`` only at the next sync: python.py's decision).
WRITES = {
    "with": "with open(P, 'w') as f:\n    f.write(C)\n",
    "unclosed": "f = open(P, 'w')\nf.write(C)\n",
    "thread": (
        "import threading, time\n"
        "def late():\n    time.sleep(0.02)\n    open(P, 'w').write(C)\n"
        "threading.Thread(target=late).start()\n"
    ),
    "atexit": "import atexit\natexit.register(lambda: open(P, 'w').write(C))\n",
    "workspace": "import workspace\nworkspace.write_file(P, C)\n",
    # The write among 7 other threads' workspace calls at once.
    "threads": (
        "import workspace\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "def call(i):\n"
        "    if i == 0:\n        workspace.write_file(P, C)\n"
        "    else:\n        workspace.exists(P)\n        workspace.ls('.')\n"
        "with ThreadPoolExecutor(8) as pool:\n    list(pool.map(call, range(8)))\n"
    ),
    # The write by one of 3 forked pool workers, the others calling workspace at once.
    "fork": (
        "import multiprocessing, workspace\n"
        "def call(i):\n"
        "    if i == 0:\n        workspace.write_file(P, C)\n"
        "    else:\n        workspace.exists(P)\n        workspace.ls('.')\n"
        "with multiprocessing.get_context('fork').Pool(3) as pool:\n    pool.map(call, range(6))\n"
    ),
}

THROUGH_WORKSPACE = frozenset(("workspace", "threads", "fork"))

VIEW = """
import hashlib, os
def main(input):
    seen = {}
    for top, dirs, files in os.walk("."):
        for name in files:
            path = os.path.normpath(os.path.join(top, name))
            seen[path] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return seen
"""

stats = {"writes": 0, "removals": 0, "imports": 0, "ws": 0, "reopens": 0}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class PythonCallsMachine(WorkspaceMachine):
    prefix = "fid-py-"
    bound = 2 * MARGIN

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, str] = {}
        self.backend = PythonBackend()
        self.ws = self.call(self._open())

    async def _open(self) -> computer.Workspace:
        ws = computer.Workspace(self.db, backends=[self.backend])
        await ws.fs.mkdir(HOME, recursive=True)
        return ws

    async def _py(self, source: str) -> Any:
        return (await ok(self.ws, source, backend="python", cwd=HOME, timeout=30.0)).value

    @rule(way=WAYS, path=PATHS, content=CONTENTS)
    def python_writes(self, way: str, path: str, content: str) -> None:
        parent = posixpath.dirname(path)
        through_workspace = way in THROUGH_WORKSPACE
        head = f"import os\nP, C = {path!r}, {content!r}\n" + (
            ""
            if not parent
            else f"import workspace\nworkspace.mkdir({parent!r}, recursive=True)\n"
            if through_workspace
            else f"os.makedirs({parent!r}, exist_ok=True)\n"
        )
        self.call(self._py(head + WRITES[way]))
        self.model[path] = content
        stats["writes"] += 1

    @rule(path=PATHS, through_workspace=st.booleans())
    def python_removes(self, path: str, through_workspace: bool) -> None:
        if through_workspace:
            source = f"import workspace\nworkspace.rm({path!r}, force=True)\n"
        else:
            source = f"import os\nif os.path.exists({path!r}):\n    os.remove({path!r})\n"
        self.call(self._py(source))
        self.model.pop(path, None)
        stats["removals"] += 1

    @rule(name=st.sampled_from(["gen", "tool"]), value=st.integers(0, 99))
    def python_writes_a_module_and_imports_it(self, name: str, value: int) -> None:
        source = f"V = {value}\n"
        program = f"open('{name}.py', 'w').write({source!r})\nimport {name}\ndef main(input):\n    return {name}.V\n"
        assert self.call(self._py(program)) == value
        self.model[f"{name}.py"] = source
        stats["imports"] += 1

    @rule(path=PATHS, content=st.none() | CONTENTS)
    def workspace_changes(self, path: str, content: str | None) -> None:
        async def change() -> None:
            if content is None:
                await self.ws.fs.rm(f"{HOME}/{path}", force=True)
            else:
                await self.ws.fs.mkdir(posixpath.dirname(f"{HOME}/{path}"), recursive=True)
                await self.ws.fs.write_file(f"{HOME}/{path}", content)

        self.call(change())
        if content is None:
            self.model.pop(path, None)
        else:
            self.model[path] = content
        stats["ws"] += 1

    @rule(fresh=st.booleans())
    def close_and_reopen(self, fresh: bool) -> None:
        self.call(self.ws.close())
        if fresh:
            self.backend = PythonBackend()
        self.ws = self.call(self._open())
        stats["reopens"] += 1

    @invariant()
    def every_view_equals_the_model(self) -> None:
        expected = {path: digest(content) for path, content in self.model.items()}
        assert self.call(self._py(VIEW)) == expected, "a python call's open() view differs from the model"

        async def workspace() -> dict[str, str]:
            paths = await self.ws.fs.ls(HOME)
            return {
                p[len(HOME) + 1 :]: hashlib.sha256(await self.ws.fs.read_file(p)).hexdigest() for p in paths
            }

        assert self.call(workspace()) == expected, "the workspace differs from the model"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_python_calls_state_machine(record_property: Any) -> None:
    for key in stats:
        stats[key] = 0
    runner = machine_runner(PythonCallsMachine, 10, 15)
    runner.TestCase().runTest()
    for key, value in stats.items():
        record_property(f"python_calls_{key}", value)
    print("python_calls:", stats)
    assert all(stats.values()), stats


def test_a_workspace_write_into_a_directory_the_call_makes() -> None:
    """Found randomized (COMPUTER_HYPOTHESIS_SEED=2465518219, 2375311430): the machine made ``d`` with
    ``os.makedirs`` and wrote ``d/b.txt`` through ``workspace`` at once, which the workspace refuses
    (FileNotFoundError) until a sync brings ``d`` (python.py: the two views meet at the syncs); the
    derandomized examples never wrote into a new directory that way first."""
    machine = PythonCallsMachine()
    try:
        machine.every_view_equals_the_model()
        for way in sorted(THROUGH_WORKSPACE):
            machine.python_writes(way=way, path="d/b.txt", content="")
            machine.every_view_equals_the_model()
            machine.python_removes(path="d/b.txt", through_workspace=False)
            machine.call(machine.ws.fs.rm(f"{HOME}/d", recursive=True, force=True))
    finally:
        machine.teardown()
