"""The end of a sandbox per call (``ShellBackend(live=False)``): what its command left running.

A run of a sandbox per call ends with its command: bubblewrap's pid namespace dies with its first
process, and every process started in the background (``python3 -m http.server &``, ``sleep 100 &``)
with it. Before, nothing said so: the run's result read like that of a server started, and the next
command found nothing listening. In a live sandbox (the default where it can run) such a process
keeps running; a sandbox per call is what a command that runs one exec and ends uses (``computer tool
NAME exec``), and what every run gets on a machine without the cgroup v1 freezer.

:func:`epilogue` is what the standby's shell (``_standby``: the stub bash that waits in the sandbox
for its command line) runs after the command: with it, the stub runs the command as its child
instead of ``exec``-ing it, then, before the namespace ends, lists the processes still there (from
``/proc``, builtins only: no process started for it) and writes one line about them on the run's
stderr, after everything the command wrote:

    computer: this command left 2 processes running in the background, ended with it (...): sleep 100
    (pid 4), python3 -m http.server 8123 (pid 5)

It changes nothing else the command sees: the same argv, exactly the same environment (through
``env -i``: bash adds ``_`` and moves ``SHLVL`` for a program it starts), stdio and exit code (a
death by a signal is 128 + the signal, as the host reported it); the stub's own messages (bash's
"Segmentation fault" for its child) go nowhere. The command's parent is the stub (``$PPID`` 2, was
1); it traps the signals a command sends around (``kill $PPID``, ``pkill bash``) with a handler,
never ignores them (its children get the default), so such a signal leaves the run going as it did
when the parent was the namespace's init, which the kernel shields. Only under bubblewrap: without a
pid namespace ``/proc`` would list the host's processes.

Cost: a subshell of the stub (a fork; it ``exec``s the command as the stub did) and the scan, ~1 ms a
run (``true`` per call, medians of 25 alternated with the commit before: 5.5-5.8 → 6.6-6.7 ms). A
first version ran a wrapper bash of its own from a file of the run's bridge directory, the command
through ``env -i``: 8.3-8.6 ms.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Sequence
from typing import Any

from ._cgroups import cgroup_writable
from ._live_launch import INIT_PYTHON

__all__ = ["ENDED_NOTE", "could_live", "ended_why", "epilogue", "guest_report"]

# The start of the line said on stderr when processes were left running.
ENDED_NOTE = "computer: this command left"

# ``why`` they ended (a phrase), ``advice`` appended (may be empty), ``self`` the command's argv joined
# (a process showing it is a subshell of the command), ``rc`` the command's status. Processes
# found are looked at again after 50 ms (a ``sleep``, only then): a job forked a moment before the
# command exited still showed the command's own cmdline instead of the program it was about to exec,
# or none at all while it was inside ``execve`` (the new image's arguments not set up yet: the scan
# right after a fork saw that 2 times in 3). A process without a cmdline counts, named by its
# ``[comm]`` (it used to be skipped: a server started just before the command exited went unsaid).
# While a process found still reads so (``unsure``: no cmdline, or the command's own), it is looked
# at again every 50 ms, :data:`LOOKS` times at most (~0.5 s, only for a run that left such a process:
# a subshell of its own is told from one about to exec by nothing but time). One look more was not
# enough under load: `python3 -m http.server … & echo started` was named "a subshell of the command"
# or "[python3]" in 4 runs of 100 with the host at load 16.
LOOKS = 10
_SCAN = r"""scan() {
  n=0 out= unsure=0
  for p in /proc/[1-9]*; do
    pid=${p#/proc/}
    [[ $pid == 1 || $pid == $$ ]] && continue
    read -r st < "$p/stat" || continue
    s=${st##*) }
    [[ ${s%% *} == Z ]] && continue
    mapfile -d '' -t a < "$p/cmdline" || continue
    c="${a[*]}"
    if ((!${#a[@]})); then c=${st#*(}; c="[${c%) *}]" unsure=1; fi
    [[ $c == "$self" ]] && c="a subshell of the command" unsure=1
    ((${#c} > 120)) && c="${c:0:117}..."
    ((++n <= 8)) && out+="${out:+, }$c (pid $pid)"
  done
  ((n > 8)) && out+=", and $((n - 8)) more"
}
scan
if ((n)); then
  for ((look = 0; look < looks; look++)); do
    sleep 0.05
    scan
    ((unsure)) || break
  done
fi
if ((n)); then
  what="$n processes"
  ((n == 1)) && what="1 process"
  printf '%s %s running in the background, ended with it (%s): %s%s\n' \
    "$note" "$what" "$why" "$out" "${advice:+; $advice}" >&3
fi
"""


def epilogue(command: Sequence[str], *, why: str, advice: str = "") -> str:
    """The lines the standby's shell runs once ``command`` (an argv) ended (``Standby.start``'s
    ``after``): they say on the run's stderr (fd 3 there) which processes the command left running,
    ``why`` they end with it and ``advice`` (how to keep one)."""
    told = " ".join(
        f"{k}={shlex.quote(v)}" for k, v in (("note", ENDED_NOTE), ("why", why), ("advice", advice))
    )
    return f"{told} looks={LOOKS} self={shlex.quote(' '.join(command))}\n{_SCAN}"


@functools.cache
def could_live() -> bool:
    """Whether live sandboxes can run here (a writable cgroup v1 freezer, the init's python): the one
    check of both backends' ``live``."""
    return cgroup_writable("freezer") and os.access(INIT_PYTHON, os.X_OK)


def ended_why(subject: str, backend: str) -> str:
    """Why a run's background processes ended with it, as its report says: ``subject`` "each command
    runs in" (the shell's) or "each run has"; where live sandboxes could run, the setting that chose
    a sandbox per run (``backend(live=False)``)."""
    return f"{subject} a sandbox of its own here" + (
        f", {backend}(live=False)" if could_live() else ": live sandboxes need a writable cgroup v1 freezer"
    )


def guest_report(backend: Any) -> dict[str, str] | None:
    """What the python backend's guest says as a run of a sandbox per call ends (the setup's
    ``leftovers``: ``_pyguest_leftovers``, the shell's line in Python), or None: a live sandbox keeps
    the processes, and without bubblewrap's pid namespace ``/proc`` lists the host's."""
    if backend.live or not backend.sandbox.bwrap:
        return None
    why = ended_why("each run has", "PythonBackend")
    return {"note": ENDED_NOTE, "why": why, "advice": backend.background_advice if could_live() else ""}
