"""The first program of a live sandbox (run *inside* it by ``/usr/bin/python3 -I -S``; never imported
by the host). Standard library only.

It starts the commands the host sends and reports when they end, over the ``SOCK_SEQPACKET`` socket
the host listens on at path ``argv[1]``. One JSON message per packet:

host → init                                              init → host
``{"op": "run", "id", "argv", "cwd", "env"}`` + 3 fds    ``{"op": "started", "id", "pid"}`` or
  (stdin, stdout, stderr; ``"fds": n`` more, kept as       ``{"op": "exit", "id", "code", "error"}``
  the command's 3..3+n-1: the python guest's channel;    ``{"op": "exit", "id", "code"}`` when it ends
  with ``"spec": true`` a last fd instead of the inline
  fields when the spec is large: read it whole)
``{"op": "signal", "id", "sig"}``  the job's process group
``{"op": "kill", "pid", "sig", "ref"}``                  ``{"op": "killed", "ref", "error"}``
``{"op": "ps", "ref"}``                                  ``{"op": "ps", "ref", "processes": [...]}``

A job is the command's process group (``setsid``): killing a job is what Ctrl-C does in a terminal;
a process that left it (``setsid server &``) keeps running. The init is a child subreaper, so every
process of the sandbox is its descendant, and it reaps them all. The host ends the sandbox by closing
the socket (or killing the tree).
"""

import ctypes
import fcntl
import json
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

Send = Callable[[dict[str, Any]], None]

PR_SET_CHILD_SUBREAPER = 36
MAX_PACKET = 1 << 16
MAX_FDS = 8  # the three streams, a few more for the command, the spec pipe


def main() -> None:
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel.connect(sys.argv[1])
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    jobs: dict[int, str] = {}  # pid -> job id
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ, "channel")
    selector.register(wake_r, selectors.EVENT_READ, "child")

    def send(message: dict[str, Any]) -> None:
        channel.send(json.dumps(message).encode())

    while True:
        for key, _ in selector.select():
            if key.data == "child":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap(jobs, send)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(channel, MAX_PACKET, MAX_FDS)
            except ConnectionError:
                data = b""
            if not data:
                return  # the host closed the channel: the sandbox ends
            try:
                handle(json.loads(data), fds, jobs, send)
            except (ValueError, KeyError, TypeError) as exc:  # a malformed message: say so, go on
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                send({"op": "error", "error": str(exc)})


def reap(jobs: dict[int, str], send: Send) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        job = jobs.pop(pid, None)
        if job is not None:
            send({"op": "exit", "id": job, "code": os.waitstatus_to_exitcode(status)})


def handle(message: dict[str, Any], fds: list[int], jobs: dict[int, str], send: Send) -> None:
    op = message["op"]
    if op == "run":
        if message.get("spec") and fds:  # the spec came through a pipe (too large for a packet)
            with os.fdopen(fds.pop(), "rb") as spec:
                message.update(json.loads(spec.read()))
        start(message, fds, jobs, send)
    elif op == "signal":
        for pid, job in list(jobs.items()):
            if job == message["id"]:
                kill_group(pid, int(message["sig"]))
    elif op == "kill":
        pid = int(message["pid"])
        error = None
        if pid <= 1 or pid == os.getpid() or not is_ours(pid):
            error = f"no process {pid} in this sandbox"
        else:
            try:
                os.kill(pid, int(message.get("sig", signal.SIGKILL)))
            except ProcessLookupError:
                error = f"no process {pid} in this sandbox"
            except OSError as exc:
                error = f"process {pid}: {exc.strerror}"
        send({"op": "killed", "ref": message.get("ref"), "error": error})
    elif op == "ps":
        send({"op": "ps", "ref": message.get("ref"), "processes": processes()})


def kill_group(pgid: int, sig: int) -> None:
    """Signal the process group ``pgid``; SIGKILL a few more rounds (a fork bomb forks while it is
    being killed; under the pids limit its newborns are few). Stops once the group is gone."""
    for _ in range(20 if sig == signal.SIGKILL else 1):
        try:
            os.killpg(pgid, sig)
        except OSError:
            return
        time.sleep(0.002)


def start(message: dict[str, Any], fds: list[int], jobs: dict[int, str], send: Send) -> None:
    argv, env, cwd = message["argv"], message["env"], message["cwd"]
    job = message["id"]
    if len(fds) != 3 + int(message.get("fds", 0)):
        for fd in fds:
            os.close(fd)
        send({"op": "exit", "id": job, "code": 125, "error": "a run needs its three standard streams"})
        return
    try:
        pid = os.fork()
    except OSError as exc:  # at the process limit (EAGAIN) or out of memory (ENOMEM): the init lives on
        for fd in fds:
            os.close(fd)
        send({"op": "exit", "id": job, "code": 126, "error": f"cannot start the command: {exc.strerror}"})
        return
    if pid == 0:  # the job: its own session and process group, the host's pipes as its streams
        try:
            try:  # under memory pressure the kernel kills a command, not the init
                with open("/proc/self/oom_score_adj", "w") as adj:
                    adj.write("500")
            except OSError:
                pass
            os.setsid()
            # Out of the way of the numbers they take (0, 1, 2, then the command's own), then there.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 256) for fd in fds]
            for number, fd in enumerate(high):
                os.dup2(fd, number)
            for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.closerange(len(fds), 1 << 16)
            try:
                os.chdir(cwd)
            except OSError as exc:
                os.write(2, f"cd: {cwd}: {exc.strerror}\n".encode())
                os._exit(125)
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:
            try:
                os.write(2, f"{argv[0] if argv else '?'}: {exc}\n".encode())
            finally:
                os._exit(127)
    for fd in fds:
        os.close(fd)
    jobs[pid] = job
    send({"op": "started", "id": job, "pid": pid})


def is_ours(pid: int) -> bool:
    """Whether ``pid`` descends from this init (always so in the sandbox's pid namespace)."""
    me = os.getpid()
    seen = 0
    while pid > 1 and seen < 4096:
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


def processes() -> list[dict[str, Any]]:
    me = os.getpid()
    ticks = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    boot = 0.0
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    boot = float(line.split()[1])
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid <= 1 or pid == me or not is_ours(pid):
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace")
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        words = [w.decode(errors="replace") for w in cmdline.split(b"\0") if w]
        run = None
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"COMPUTER_EXEC_ID="):
                        run = item[17:].decode(errors="replace")
        except OSError:
            pass
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


if __name__ == "__main__":
    main()
