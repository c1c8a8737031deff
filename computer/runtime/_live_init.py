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
``{"op": "ps", "ref", "after"}``                         ``{"op": "ps", "ref", "processes": [...], "more"}``
  (``after``: only pids above it: the next page)
``{"op": "drop"}`` + fds: pipes whose output is dropped    (no reply: read here until their writers go)
                                                         ``{"op": "error", "ref", "error"}`` a request failed

A reply is one packet, so it stays under ``_live_ps.MAX_REPLY`` (the socket's send buffer is ~208 KB
by default: a larger packet is refused): the ``ps`` listing cuts long command lines, and past that
counts the processes it leaves out in ``"more"`` (see ``_live_ps.listing``), which the host asks for
next (``after`` the last pid it got).

A job is the command's process group (``setsid``): killing a job is what Ctrl-C does in a terminal;
a process that left it (``setsid server &``) keeps running. The init is a child subreaper, so every
process of the sandbox is its descendant, and it reaps them all. The host ends the sandbox by closing
the socket (or killing the tree).
"""

import ctypes
import errno
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

if __package__:  # imported as part of the package (the host's tests)
    from ._live_ps import is_ours, listing, processes
else:  # the sandbox's init, run as a script: the listing was copied beside it (``_live_launch``)
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from _live_ps import is_ours, listing, processes  # type: ignore[no-redef]

    sys.path.pop()  # nothing else is looked up there

Send = Callable[[dict[str, Any]], None]

# Jobs whose ``oom_score_adj`` is still to be raised (pid -> when to stop trying): tried again at each
# turn of the loop, every RETRY_ADJ seconds while any is left (see :func:`raise_oom_score`).
PENDING_ADJ: dict[int, float] = {}
RETRY_ADJ = 0.0002
ADJ_GIVE_UP = 0.05

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
MAX_PACKET = 1 << 16
MAX_FDS = 8  # the three streams, a few more for the command, the spec pipe
MAX_DROPPED = 1024  # pipes the host let go (``drop``) read here at most; the oldest closed past it
DROPPED: dict[int, None] = {}  # those pipes, oldest first
LEADERS: dict[int, str] = {}  # the jobs started (pid: its session's id -> job id), the last MAX_LEADERS
MAX_LEADERS = 4096
# What a command starts with at its default action: every signal but those no process can catch (the
# init ignores SIGINT, SIGHUP, SIGPIPE; Python SIGXFSZ; the host's launcher may have ignored SIGQUIT).
DEFAULTED = tuple(s for s in range(1, 32) if s not in (signal.SIGKILL, signal.SIGSTOP))


def main() -> None:
    seal()
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel.connect(sys.argv[1])
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Not dumpable: this process's ``/proc/<pid>`` entries become root's, so a process of the
        # sandbox (same uid: a background process an earlier run left) can neither open
        # ``/proc/<pid>/fd/<channel>`` to take the host's messages (a later run's descriptors) or
        # forge the init's (a later run's exit code) nor ptrace it. An ``execve`` resets it: the
        # jobs are ordinary processes.
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
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
        for pid, until in list(PENDING_ADJ.items()):
            if raise_oom_score(pid) or time.monotonic() > until:
                del PENDING_ADJ[pid]
        for key, _ in selector.select(RETRY_ADJ if PENDING_ADJ else None):
            if key.data == "drop":
                drop(selector, key.fd)
                continue
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
            message: Any = None
            try:
                message = json.loads(data)
                if isinstance(message, dict) and message.get("op") == "drop":  # pipes the host lets go
                    take_dropped(selector, fds)
                    continue
                handle(message, fds, jobs, send)
            except (ValueError, KeyError, TypeError) as exc:  # a malformed message: say so, go on
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                ref = message.get("ref") if isinstance(message, dict) else None
                send({"op": "error", "ref": ref, "error": str(exc)})
            except OSError as exc:  # a request's reply that could not be sent (the init goes on)
                if not isinstance(message, dict) or message.get("op") == "run":
                    raise
                send({"op": "error", "ref": message.get("ref"), "error": f"{exc.strerror or exc}"})


def take_dropped(selector: selectors.BaseSelector, fds: list[int], limit: int = MAX_DROPPED) -> None:
    """Read the pipes ``fds`` from now on, dropping what comes (no job gets them). At most ``limit``
    are held, the oldest closed past it (their writers get EPIPE): a process holding every run's
    output pipe made the host hand each one here, and once the init's descriptors ran out no run
    could be given its three streams."""
    for fd in fds:
        os.set_inheritable(fd, False)
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ, "drop")
        DROPPED[fd] = None
    while len(DROPPED) > limit:
        close_dropped(selector, next(iter(DROPPED)))


def drop(selector: selectors.BaseSelector, fd: int) -> None:
    """Read what the pipe ``fd`` holds and drop it; at its end (every writer gone), close it."""
    try:
        if os.read(fd, MAX_PACKET):
            return
    except BlockingIOError:
        return
    except OSError:
        pass
    close_dropped(selector, fd)


def close_dropped(selector: selectors.BaseSelector, fd: int) -> None:
    DROPPED.pop(fd, None)
    selector.unregister(fd)
    os.close(fd)


def reap(jobs: dict[int, str], send: Send) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        PENDING_ADJ.pop(pid, None)  # its pid may be another process's next
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
                kill_group(pid, int(message["sig"]), lambda: reap(jobs, send))
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
        rows, more = listing(processes(int(message.get("after") or 0), LEADERS))
        send({"op": "ps", "ref": message.get("ref"), "processes": rows, "more": more})


def kill_group(pgid: int, sig: int, reap_children: Callable[[], None]) -> None:
    """Signal the process group ``pgid``; SIGKILL a few more rounds (a fork bomb forks while it is
    being killed; under the pids limit its newborns are few). Stops once the group is gone.

    What died is reaped between rounds (``reap_children``; every process of the sandbox is the init's
    child by then, the subreaper's): a group of zombies still takes a signal, so a killed job held the
    init here for all 20 rounds (40 ms) with every run waiting to start, a run that did not fit the
    shell started ahead (whose discarding kills it) ~50 ms instead of ~7."""
    for attempt in range(20 if sig == signal.SIGKILL else 1):
        try:
            os.killpg(pgid, sig)
        except OSError:
            return
        if sig != signal.SIGKILL:
            return
        time.sleep(0.0005 if attempt < 4 else 0.002)
        reap_children()


def above(fd: int, targets: int) -> int:
    """A close-on-exec copy of ``fd`` above 255, or, where the descriptor limit the host handed down is
    256 or less (``ulimit -n 200`` before the host started: the copy failed with EINVAL, ending the
    init at every run's start), above the ``targets`` descriptors the spawn moves the copies to."""
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 256)
    except OSError:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, targets)


def start(message: dict[str, Any], fds: list[int], jobs: dict[int, str], send: Send) -> None:
    """Start a job with ``posix_spawn`` (a vfork: ~1.3 ms for ``bash -c true`` where a fork of this
    interpreter then an exec took ~5 ms, the largest part of a warm run's cost).

    What the old forked child did in Python is done around the spawn instead: the init moves into
    ``cwd`` for the spawn (it is single-threaded; it goes back to ``/``), the streams reach 0, 1, 2…
    through copies above 255 (so no move overwrites a descriptor a later one still needs; above the
    targets under a descriptor limit of 256 or less, see :func:`above`), every
    other descriptor of the init is close-on-exec (see :func:`seal`), every signal is reset to its default
    action, and the job's ``oom_score_adj`` is raised to 500 right after the spawn (the vfork parent
    resumes once the child has exec'd; the job then runs its first instructions at the init's score,
    a window of microseconds). The program is looked up in the job's own ``PATH`` (``posix_spawnp``
    would use the init's)."""
    argv, env, cwd = message["argv"], message["env"], message["cwd"]
    job = message["id"]
    high = [above(fd, len(fds)) for fd in fds]
    for fd in fds:
        os.close(fd)
    try:
        if len(high) != 3 + int(message.get("fds", 0)):
            send({"op": "exit", "id": job, "code": 125, "error": "a run needs its three standard streams"})
            return
        try:
            os.chdir(cwd)
        except OSError as exc:
            say(high[2], f"cd: {cwd}: {exc.strerror}\n")
            send({"op": "exit", "id": job, "code": 125})
            return
        try:
            pid = os.posix_spawn(
                program(argv[0], env),
                argv,
                env,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, number) for number, fd in enumerate(high)],
                setsid=True,
                setsigdef=DEFAULTED,
            )
        except (ValueError, TypeError) as exc:  # a bad environment (the host checks it first)
            say(high[2], f"cannot start the command: {exc}\n")
            send({"op": "exit", "id": job, "code": 125})  # this command's failure, not the sandbox's
            return
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ENOMEM):  # at the process limit or out of memory
                error = f"cannot start the command: {exc.strerror}"
                send({"op": "exit", "id": job, "code": 126, "error": error})
            else:  # the program could not be executed: what a shell says, and its code
                say(high[2], f"{argv[0] if argv else '?'}: {exc}\n")
                send({"op": "exit", "id": job, "code": 127})
            return
        finally:
            os.chdir("/")
    finally:
        for fd in high:
            os.close(fd)
    jobs[pid] = LEADERS[pid] = job
    while len(LEADERS) > MAX_LEADERS:
        del LEADERS[next(iter(LEADERS))]
    send({"op": "started", "id": job, "pid": pid})
    if not raise_oom_score(pid):
        PENDING_ADJ[pid] = time.monotonic() + ADJ_GIVE_UP


def say(fd: int, text: str) -> None:
    """Tell a job's stderr why it could not start: the host may have closed its end already (the run
    was cancelled meanwhile), which is no reason for the init to end."""
    try:
        os.write(fd, text.encode())
    except OSError:
        pass


def raise_oom_score(pid: int) -> bool:
    """Under memory pressure the kernel kills a command, not the init: the job's ``oom_score_adj``
    goes to 500. True when that is done (or can never be: the job ended, its ``/proc`` is gone),
    False to try again. The vfork parent resumes while the child's new memory still carries the
    init's non-dumpable flag (the kernel resets it a few microseconds later in the exec): its
    ``/proc`` files are root's for that moment. Tried again by the init's loop, never in a sleep: the
    child runs on the init's CPU, and a sleep of 50 µs took 0.8-1.7 ms to come back while it did
    (the init's ``started`` and, for a command as short as ``echo``, its ``exit`` waited for it). A
    job that already ended (``true``) is a zombie whose files stay root's: done."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as adj:
            adj.write("500")
        return True
    except PermissionError:
        return ended(pid)
    except OSError:
        return True


def ended(pid: int) -> bool:
    """Whether the child ``pid`` has exited (left to reap: ``WNOWAIT``)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def program(name: str, env: dict[str, str]) -> str:
    """Where ``name`` is, looked up in ``env``'s ``PATH`` as ``execvpe`` does (``name`` itself when it
    holds a slash or is found nowhere: the spawn then fails with ENOENT)."""
    if "/" in name:
        return name
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return name


def seal() -> None:
    """Make every descriptor the init holds close-on-exec (those it started with, e.g. from its
    launcher), so a job gets only its own: descriptors Python opens later are so by default, and
    those a message brings are copied close-on-exec and closed (see :func:`start`)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = [str(fd) for fd in range(3, 1024)]
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


if __name__ == "__main__":
    main()
