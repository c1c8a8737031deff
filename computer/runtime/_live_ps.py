"""The live sandbox init's process listing (``ps``), run inside the sandbox beside ``_live_init.py``.

Never imported by the host (its tests aside); standard library only. The init imports it from the
copy ``_live_launch`` puts beside its own.
"""

import json
import os
import re
import time
from typing import Any

MAX_REPLY = 96 * 1024  # bytes of one reply (JSON): well under the default send buffer (212,992)
MAX_COMMAND = 4096  # characters of a command line a ``ps`` listing keeps (fewer when many share it)
MIN_COMMAND = 256
# Bytes of a process's ``/proc`` command line and environment a listing reads at most. A command line
# is the process's own to make up to 6 MiB (``ulimit -s unlimited``), and forked children share its
# pages: 200 processes of one 5.8 MB command line (~6 MB of the sandbox's memory) made each ``ps``
# read 1.2 GB, 8-10 s of the init (its replies bound by ``REQUEST_TIMEOUT``, 10 s) and 723 MB of its
# memory. A listing shows :data:`MAX_COMMAND` characters (of at most 4 bytes each) of a command line:
# one more character (cut, ``…``) is all it needs. The environment is read for its run's name only.
CMDLINE_BYTES = 4 * (MAX_COMMAND + 1)
ENVIRON_BYTES = 256 * 1024
# A run's name as a listing gives it (``COMPUTER_EXEC_ID`` in a process's environment, which the
# process chose): the runtime's exec id form, anything else left out (see :func:`processes`).
RUN_NAME = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def listing(found: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """``found`` within one reply: each command line cut to :data:`MAX_COMMAND` characters (``…``
    last), halved while the listing is over :data:`MAX_REPLY` bytes, down to :data:`MIN_COMMAND`;
    then the processes of the highest pids are left out, and counted (a listing of 600 KB, one
    process's command line, ended the init: its packet was refused, EMSGSIZE)."""
    cap, kept = MAX_COMMAND, found
    while True:
        rows = [
            {**p, "command": p["command"][: cap - 1] + "\u2026"} if len(p["command"]) > cap else p
            for p in kept
        ]
        size = len(json.dumps(rows)) + 100  # with the reply's other fields
        if size <= MAX_REPLY:
            return rows, len(found) - len(kept)
        if cap > MIN_COMMAND:
            cap = max(MIN_COMMAND, cap // 2)
        else:
            kept = kept[: max(0, len(kept) * MAX_REPLY // size - 1)]


def is_ours(pid: int) -> bool:
    """Whether ``pid`` descends from this init (always so in the sandbox's pid namespace)."""
    me = os.getpid()  # 1: the namespace's first process (see ``bwrap_argv``'s ``as_pid_1``)
    seen = 0
    while pid > 0 and seen < 4096:
        if pid == me:
            return True
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return False
        pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        seen += 1
    return False


def processes(after: int = 0, leaders: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The sandbox's processes of pids above ``after`` (the init and zombies left out), each with its
    run (:func:`run_of`; ``leaders``: :data:`LEADERS`)."""
    me = os.getpid()
    ticks = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    # The boot time to 1/100 s: the clock now less the uptime (``btime`` in ``/proc/stat`` is whole
    # seconds: every start time was early by its fraction, up to a second).
    try:
        with open("/proc/uptime") as f:
            boot = time.time() - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        boot = 0.0
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid <= max(1, after) or pid == me or not is_ours(pid):
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read(CMDLINE_BYTES)
        except OSError:
            continue
        comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace")
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        words = [w.decode(errors="replace") for w in cmdline.split(b"\0") if w]
        run = run_of(pid, leaders or {}, cmdline)
        found.append(
            {
                "pid": pid,
                "ppid": int(fields[1]),
                "command": " ".join(words) if words else f"[{comm}]",
                "started": boot + int(fields[19]) / ticks,
                "cpu_seconds": (int(fields[11]) + int(fields[12])) / ticks,
                "rss_bytes": int(fields[21]) * page,
                "exec_id": run,
            }
        )
    return sorted(found, key=lambda p: p["pid"])


def run_of(pid: int, leaders: dict[int, str], cmdline: bytes | None = None) -> str | None:
    """The run of process ``pid`` (``cmdline``: its own, if read): ``COMPUTER_EXEC_ID`` in its
    environment (the process's to set: of the exec id form, else none). When that cannot tell, the
    job whose session it is in (``leaders``), else its parent's run: its environment unreadable
    (memory not dumpable: a job's for the moment of its start here, a program's ``PR_SET_DUMPABLE``),
    empty with its command line empty too, or empty in the middle of an ``exec`` (:func:`_in_exec`:
    ``[bash]`` was listed with no run, between a run's shell and its command; a writer's child so was
    missed by a kill of the run's processes). An environment empty once the exec is done is the
    process's own (``env -i``): no run."""
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read(ENVIRON_BYTES)
            if len(environ) == ENVIRON_BYTES:  # (cut: its last entry may be cut too)
                environ = environ[: environ.rfind(b"\0") + 1]
            if not environ and cmdline is None:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read(CMDLINE_BYTES)
        except OSError:
            environ = cmdline = b""
        stat = b"" if environ else _stat(pid)
        if environ or (cmdline and not _in_exec(stat)):  # it tells (an empty environment: no run)
            run = None
            for item in environ.split(b"\0"):
                if item.startswith(b"COMPUTER_EXEC_ID="):
                    run = item[17:].decode() if RUN_NAME.fullmatch(item[17:]) else None
            return run
        try:
            fields = stat[stat.rindex(b")") + 2 :].split()
            pid, session, cmdline = int(fields[1]), int(fields[3]), None
        except (ValueError, IndexError):
            return None
        if session in leaders:
            return leaders[session]
        if pid <= 1 or pid == os.getpid():
            return None
    return None


def _stat(pid: int) -> bytes:
    """``/proc/PID/stat``, empty when it cannot be read (the process gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _in_exec(stat: bytes) -> bool:
    """``stat`` (of a process whose environment reads empty) is of one in the middle of an ``exec``:
    the kernel sets the new command line's bounds before the environment's (``create_elf_tables``),
    so for that instant its ``env_end`` (field 51) is still 0, where an empty environment of its own
    (``env -i``) has both its bounds set (equal, not 0). Unreadable: as an exec's instant (cannot tell)."""
    fields = stat[stat.rfind(b")") + 2 :].split()
    return len(fields) <= 48 or fields[48] == b"0"
