"""No user namespaces inside a sandbox: a program's own (``unshare -Ur``) gave it a uid 0 with every
capability over new namespaces, the kernel surface behind most local privilege escalations. bubblewrap
0.8+ refuses them (``--disable-userns``, probed); ``BackendInfo.isolation`` says which holds."""

from __future__ import annotations

import shutil

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._bwrap import NO_USERNS, bwrap_works
from computer.runtime._sandbox import Sandbox

pytestmark = pytest.mark.skipif(
    not bwrap_works() or not bwrap_works((), (NO_USERNS,)) or shutil.which("unshare") is None,
    reason="bubblewrap (0.8+ for --disable-userns) and util-linux's unshare are needed",
)

_NEST = "unshare -Ur id -u; echo rc=$?"
_PY_NEST = "import subprocess\nprint(subprocess.run(['unshare', '-Ur', 'true']).returncode)"


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_a_shell_run_cannot_make_a_user_namespace(live: bool) -> None:
    shell = ShellBackend(live=live, warm_sandboxes=0)
    async with computer.Workspace(backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(_NEST)).result()
        [info] = ws.runtime.backends()
    assert "rc=1" in result.stdout and "uid" not in result.stdout, result
    assert "0\n" not in result.stdout, result  # no uid 0 of its own
    assert "no user namespaces inside" in info.isolation


async def test_a_python_run_cannot_make_one_either() -> None:
    async with computer.Workspace(backends=[PythonBackend()]) as ws:
        result = await (await ws.runtime.exec(_PY_NEST, backend="python")).result()
    assert result.stdout.strip() == "1", result


def test_each_sandbox_says_so() -> None:
    assert "no user namespaces inside" in Sandbox().isolation
