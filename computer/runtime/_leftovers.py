"""The end of a sandbox per call (``ShellBackend(live=False)``): what its command left running.

A run of a sandbox per call ends with its command: bubblewrap's pid namespace dies with its first
process, and every process started in the background (``python3 -m http.server &``, ``sleep 100 &``)
with it. Before, nothing said so: the run's result read like that of a server started, and the next
command found nothing listening. In a live sandbox (the default where it can run) such a process
keeps running; a sandbox per call is what a command that runs one exec and ends uses (``computer tool
NAME exec``), and what every run gets on a machine without the cgroup v1 freezer.

:func:`reporting` wraps the run's command in a small bash that runs it as its child, then, before the
namespace ends, lists the processes still there (from ``/proc``, builtins only: no process started
for it) and writes one line about them on the run's stderr, after everything the command wrote:

    computer: this command left 2 processes running in the background, ended with it (...): sleep 100
    (pid 4), python3 -m http.server 8123 (pid 5)

It changes nothing else the command sees: the same argv, exactly the same environment (the wrapper's
own as it was given, read back from ``/proc``, through ``env -i``: bash adds ``_`` and moves
``SHLVL`` for a program it starts), stdio and exit code (a death by a signal is 128 + the signal, as the host reported it); the wrapper's own
messages (bash's "Segmentation fault" for its child) go nowhere. The command's parent is the wrapper
(``$PPID`` 2, was 1) and ``ps`` shows it; it traps the signals a command sends around (``kill
$PPID``, ``pkill bash``) with a handler, never ignores them (its children get the default), so such a
signal leaves the run going as it did when the parent was the namespace's init, which the kernel
shields. Only under bubblewrap: without a pid namespace ``/proc``
would list the host's processes.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ENDED_NOTE", "SCRIPT_NAME", "reporting"]

# The wrapper's file in the run's bridge directory (read-only in the sandbox): its text as an argument
# made ``ps`` in the sandbox show all of it.
SCRIPT_NAME = "ended.sh"

# The start of the line said on stderr when processes were left running.
ENDED_NOTE = "computer: this command left"

# ``why`` they ended (a phrase), ``advice`` appended (may be empty); the arguments: the command. Processes
# found are looked at again after 50 ms (one ``sleep``, only then): a job forked a moment before the
# command exited still showed the command's own cmdline instead of the program it was about to exec.
_SCRIPT = r"""exec 3>&2 2>/dev/null
trap : HUP INT QUIT TERM USR1 USR2
mapfile -d '' -t given < /proc/$$/environ
/usr/bin/env -i "${given[@]}" "$@" 2>&3 3>&-
rc=$?
self="$*"
scan() {
  n=0 out=
  for p in /proc/[1-9]*; do
    pid=${p#/proc/}
    [[ $pid == 1 || $pid == $$ ]] && continue
    read -r st < "$p/stat" || continue
    st=${st##*) }
    [[ ${st%% *} == Z ]] && continue
    mapfile -d '' -t a < "$p/cmdline" || continue
    ((${#a[@]})) || continue
    c="${a[*]}"
    [[ $c == "$self" ]] && c="a subshell of the command"
    ((${#c} > 120)) && c="${c:0:117}..."
    ((++n <= 8)) && out+="${out:+, }$c (pid $pid)"
  done
  ((n > 8)) && out+=", and $((n - 8)) more"
}
scan
if ((n)); then
  sleep 0.05
  scan
fi
if ((n)); then
  what="$n processes"
  ((n == 1)) && what="1 process"
  printf '%s %s running in the background, ended with it (%s): %s%s\n' \
    "$note" "$what" "$why" "$out" "${advice:+; $advice}" >&3
fi
exit $rc
"""


def reporting(
    command: Sequence[str], host_dir: Path, inside_dir: str, *, why: str, advice: str = ""
) -> list[str]:
    """``command`` (an argv) run by the wrapper above, written to ``host_dir`` (the run's bridge
    directory, ``inside_dir`` in the sandbox): it says on stderr which processes the command left
    running when it ended, ``why`` they end with it and ``advice`` (how to keep one)."""
    text = f"note={shlex.quote(ENDED_NOTE)} why={shlex.quote(why)} advice={shlex.quote(advice)}\n{_SCRIPT}"
    (host_dir / SCRIPT_NAME).write_text(text, encoding="utf-8", errors="surrogateescape")
    return ["/bin/bash", "--noprofile", "--norc", f"{inside_dir}/{SCRIPT_NAME}", *command]
