"""Where real users break the exec layer (session 64, fid6): each a regression test of a defect found by
running what users run, per call and live, across calls and reopens.

- A backend's ``mount_root`` where the sandbox mounts something of its own (``/usr/src/app``, the usual
  container WORKDIR; ``/run/computer``; ``/opt/python`` for python) or inside the workspace's own
  ``/.computer``: every run failed at run time with bubblewrap's or a bare ``BrokenPipeError``, or
  completed over the other mount's directory with nothing kept and nothing said, or let a program
  rewrite the execution journal. Refused when the backend is built now (``runtime/_mount_root.py``).
"""

from __future__ import annotations

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend

from ._support import ok

REFUSED = [
    ("shell", "/usr/src/app", "inside /usr"),
    ("shell", "/etc/app", "inside /etc"),
    ("shell", "/lib/x", "inside /lib"),
    ("shell", "/proc/x", "inside /proc"),
    ("shell", "/dev/shm", "inside /dev"),
    ("shell", "/run/computer", "overlaps /run/computer"),
    ("shell", "/run", "overlaps /run/computer"),
    ("shell", "/.computer", "inside /.computer"),
    ("shell", "/.computer/exec", "inside /.computer"),
    ("python", "/opt", "overlaps /opt/python"),
    ("python", "/opt/python", "overlaps /opt/python"),
    ("python", "/opt/computer/app", "overlaps /opt/computer"),
    ("python", "/usr/src/app", "inside /usr"),
]


@pytest.mark.parametrize(("backend", "root", "why"), REFUSED, ids=[f"{b}:{r}" for b, r, _ in REFUSED])
def test_a_mount_root_the_sandbox_cannot_hold_is_refused_when_the_backend_is_built(
    backend: str, root: str, why: str
) -> None:
    made = ShellBackend if backend == "shell" else PythonBackend
    with pytest.raises(ValueError, match=f"mount_root {root} .*{why}"):
        made(mount_root=root, live=False)


@pytest.mark.parametrize("backend", ["shell", "python"])
async def test_a_mount_root_beside_the_sandboxs_own_mounts_runs_and_keeps_what_it_wrote(backend: str) -> None:
    """``/opt/app`` (beside the python backend's ``/opt/python``) and ``/tmp/app`` (over the sandbox's
    own ``/tmp``) are mirrored as any root."""
    for root in ("/opt/app", "/tmp/app"):
        made = (
            ShellBackend(mount_root=root, live=False)
            if backend == "shell"
            else PythonBackend(mount_root=root, live=False)
        )
        async with computer.Workspace(None, backends=[made]) as ws:
            await ws.fs.mkdir(root, recursive=True)
            await ws.fs.write_file(f"{root}/in", "from the workspace")
            source = (
                "cat in; echo made > out"
                if backend == "shell"
                else "print(open('in').read()); open('out', 'w').write('made\\n')"
            )
            assert (await ok(ws, source)).stdout.startswith("from the workspace")
            assert await ws.fs.read_text(f"{root}/out") == "made\n"
