"""No host path inside a sandbox (issue 17, item 7): ``/proc/self/mountinfo`` names, for every bind, the
source's path within its filesystem; binds come from neutral staging paths in the process's scratch
directory, so neither the package's directory, the virtualenv, ``/root``, the interpreter's prefix nor a
workspace id appears. The staged interpreter holds the standard library only.

What stays visible (``_staging``'s docstring): the staging path (owner pid, start time, sandbox uid),
device numbers, filesystem types and mount options.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import msgpack
import pytest

import computer
from computer.runtime._bwrap import Bind
from computer.runtime._pychannel import guest_tree
from computer.runtime._sandbox import Sandbox
from computer.runtime._scratch import process_scratch
from computer.runtime._staging import PYTHON_DIR, stage, stage_python

_PACKAGE = Path(computer.__file__).parent
_GUEST = _PACKAGE / "runtime" / "_pyguest.py"


def _forbidden() -> list[str]:
    """Host paths that must not appear inside: the package, the virtualenv, the interpreter's prefix."""
    paths = {str(_PACKAGE), str(_PACKAGE.parent), sys.prefix, os.path.realpath(sys.base_prefix)}
    paths |= {os.path.dirname(msgpack.__file__), "/root/", "/home/"}
    return sorted(p for p in paths if p not in ("/", "/usr"))


_PROBE = """
import json, os, sys, sysconfig
sys.path.insert(0, '/opt/computer/lib')
import msgpack
lib = os.path.join(sys.prefix, 'lib', f'python{sys.version_info.major}.{sys.version_info.minor}')
print(json.dumps({
    'mountinfo': open('/proc/self/mountinfo').read(),
    'prefix': sys.prefix, 'executable': sys.executable, 'path': sys.path,
    'config_prefix': sysconfig.get_config_var('prefix'),
    'stdlib': sorted(os.listdir(lib)), 'msgpack': msgpack.unpackb(msgpack.packb([1, 2])),
}))
"""


@pytest.mark.parametrize("unprivileged", [False, True], ids=["as-root", "unprivileged"])
async def test_the_python_sandbox_names_no_host_path_and_holds_the_standard_library_only(
    unprivileged: bool,
) -> None:
    sandbox = Sandbox(unprivileged=unprivileged)
    if not sandbox.bwrap:
        pytest.skip("bubblewrap does not work here")
    python = stage_python(owner=sandbox.host_ids)
    if not python.binds:
        pytest.skip("the interpreter lives under /usr: every sandbox has it where it is")
    guest = stage("guest", guest_tree(), sandbox.host_ids)
    binds = [*python.binds, Bind(str(guest), "/opt/computer")]
    env = {"PATH": "/usr/bin:/bin", **python.env}
    sp = await sandbox.spawn([python.executable, "-I", "-S", "-c", _PROBE], binds=binds, env=env)
    out, err = await sp.proc.communicate()
    await sp.discard()
    assert sp.proc.returncode == 0, err.decode()
    seen = json.loads(out)
    assert seen["prefix"] == seen["config_prefix"] == PYTHON_DIR
    assert seen["executable"].startswith(PYTHON_DIR) and seen["msgpack"] == [1, 2]
    assert "site-packages" not in seen["stdlib"] and "test" not in seen["stdlib"]
    assert {"json", "asyncio", "os.py", "lib-dynload"} <= set(seen["stdlib"])
    for path in _forbidden():
        assert path not in out.decode(), path


async def test_the_shell_sandbox_names_no_host_path(tmp_path: Path) -> None:
    """A mirror kept in the process's scratch directory under an opaque name, and the sandbox's /etc:
    the binds name the scratch base only (the mirror's naming is the caller's: no workspace id)."""
    sandbox = Sandbox()
    if not sandbox.bwrap:
        pytest.skip("bubblewrap does not work here")
    scratch = process_scratch(tmp_path)
    mirror = scratch / "m1"
    mirror.mkdir()
    sp = await sandbox.spawn(
        ["/bin/cat", "/proc/self/mountinfo", "/proc/1/cmdline"], binds=[Bind(str(mirror), "/workspace", True)]
    )
    out, err = await sp.proc.communicate()
    await sp.discard()
    assert sp.proc.returncode == 0, err.decode()
    text = out.decode(errors="replace")
    for path in [*_forbidden(), "computer-etc", "computer-shell"]:
        assert path not in text, path
    etc = next(line.split() for line in text.splitlines() if " /etc " in line)
    # The /etc copy is the user's shared one (``_bwrap.sandbox_etc``), named by a digest of its content.
    assert etc[3].startswith(os.path.join(tempfile.gettempdir(), f"computer-shared-{os.geteuid()}/etc-")), etc
