"""What a python run in a sandbox of its own left running, said as it ends (staged beside the guest as
``lib/_guest_leftovers.py``; stdlib only; never imported by the host package).

The python backend's counterpart of the shell's ``_leftovers`` epilogue: with ``live=False`` the run's
pid namespace ends with the guest, and every process the program started (``subprocess.Popen``,
``os.fork``) with it. The guest imports this only when its setup asks (a sandbox per call, under
bubblewrap: without a pid namespace ``/proc`` lists the host's processes), and :func:`report_at_exit`
registers the scan before the program runs: ``atexit`` runs it last, after the program's own handlers
(multiprocessing's ends its pool workers) and after python waited for the program's threads, just
before the interpreter and then the namespace end. One line on stderr, the shell's words:

    computer: this command left 1 process running in the background, ended with it (...): sleep 100
    (pid 3)

A process the program forked that runs on to its end (a child of ``os.fork()`` returning from the
program) runs the handler too: only the guest's own process reports. Left out of the list: pid 1
(bubblewrap's init), the guest, zombies, and multiprocessing's resource tracker and forkserver (they
are the interpreter's helpers and end with it by design). A process without a cmdline (one inside
``execve``, its new arguments not set up yet) is named by its ``[comm]``; while one such, or a fork
that is the guest's own, is found, the scan looks again (``LOOKS`` times at most, 50 ms apart). ``os._exit`` and a death by a signal skip
``atexit``, and with it the report.
"""

from __future__ import annotations

import atexit
import os
import time

MYPY = False
if MYPY:
    from typing import Any

_HELPERS = (
    "from multiprocessing.resource_tracker import main",
    "from multiprocessing.forkserver import main",
)


# Looks again, 50 ms apart, while a process found may not have exec-ed its program yet (as the
# shell's scan: ``_leftovers.LOOKS``, which this module cannot import inside the sandbox).
LOOKS = 10


def _scan(own: int) -> tuple[int, list[str], bool]:
    """The processes here but the guest (their count, how they are named) and whether one of them may
    be about to exec its program: no cmdline yet (inside ``execve``) or the guest's own (a fork)."""
    found: list[str] = []
    unsure = False
    with open("/proc/self/cmdline", "rb") as f:
        guest = b" ".join(w for w in f.read().split(b"\0") if w).decode("utf-8", "replace")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or entry == "1" or int(entry) == own:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        command = b" ".join(w for w in words if w).decode("utf-8", "replace")
        if stat.rpartition(b") ")[2][:1] == b"Z":
            continue
        if not command:  # inside execve: the new image's arguments are not set up yet; its [comm]
            command = "[" + stat.partition(b"(")[2].rpartition(b") ")[0].decode("utf-8", "replace") + "]"
            unsure = True
        if any(helper in command for helper in _HELPERS):
            continue
        if command == guest:
            command = "a process the program forked"
            unsure = True
        if len(command) > 120:
            command = command[:117] + "..."
        found.append(f"{command} (pid {entry})")
    return len(found), found, unsure


def report(told: dict[str, Any], own: int) -> None:
    """Write the line about the processes still here (none: nothing) on fd 2."""
    if os.getpid() != own:
        return
    count, found, unsure = _scan(own)
    # A child forked a moment ago may not have exec-ed its program yet: look again, and again while
    # one may still be about to (at most LOOKS times: a fork that stays one is told by nothing else).
    for _ in range(LOOKS if count else 0):
        time.sleep(0.05)
        count, found, unsure = _scan(own)
        if not unsure:
            break
    if not count:
        return
    shown = ", ".join(found[:8]) + (f", and {count - 8} more" if count > 8 else "")
    what = "1 process" if count == 1 else f"{count} processes"
    advice = told.get("advice") or ""
    line = (
        f"{told['note']} {what} running in the background, ended with it ({told['why']}): {shown}"
        f"{'; ' + advice if advice else ''}\n"
    )
    try:
        os.write(2, line.encode("utf-8", "replace"))
    except OSError:
        pass


def report_at_exit(told: dict[str, Any], own: int) -> None:
    atexit.register(report, told, own)
