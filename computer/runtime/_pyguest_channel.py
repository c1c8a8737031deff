"""The python guest's end of its ``workspace`` channel, run *inside* the sandbox (staged beside
``guest.py`` as ``lib/_guest_channel.py``; never imported by the host): frames out and in, and one
call at a time from any thread, forked process or signal handler of the program.

One call at a time on the channel (its request, then its reply): two at once interleaved their frames
(threads of a ``ThreadPoolExecutor`` hung the run; a fork pool's workers broke the protocol). A caller
holds this process's turn (a reentrant lock), then a record lock (``lockf``) on a file its forks share
(an ``exec`` never inherits it): the kernel drops that one when its holder dies (a pool worker
terminated in a call), and a turn copied held into a child forked while a thread held it is made anew
there. Each request carries an id its reply echoes.

A signal handler may call ``workspace`` while the main thread is inside a call (``setitimer`` and a
handler that reads a file): the turn is reentrant, and a reply read by a call that is not its caller's
is kept for that caller (``_STASH``; every call waits a tick at a time, so it finds it there) when the
caller is still waiting further up the stack, dropped when it is gone (an exception a handler raised ended it). Before, the turn was
not reentrant: such a handler hung the run. Handlers never run in the middle of a frame: signals are
blocked while one is sent or read, and while the turn is taken or given back (the process's lock and
its record lock change together), so a handler runs only while a call waits for its reply, and only
while the outermost call does: a handler's own call waits with signals blocked, so the next signal's
handler runs once it is answered (decision, as the kernel holds a signal while its own handler runs; a
handler's call is not interruptible, SIGINT included). Before (s60), while the host was slow to
answer (its loop busy), each tick of a timer ran its handler again inside the wait of the one before,
one level deeper per tick, until a RecursionError. A handler's call that stashed replies wakes the call
it interrupted (``_WAKE``, polled with the socket): that one waited out its tick on the socket before.

A frame goes out whole or not at all, from the host's view: a process killed while sending (a pool
worker terminated) leaves no partial frame, which would have broken the channel for every other
caller. The kernel queues one unix stream ``send`` of at most ``_ATOMIC`` bytes as one buffer, or
nothing; a ``write_file`` whose frame would be larger goes as its head (``parts``: how many pieces)
and then that many ``__part__`` frames, which the host joins; it makes the write only once the last
piece is in, and drops a write whose pieces stop (another caller's frame came: the sender died).
"""

from __future__ import annotations

import _signal
import _socket
import _thread
import errno
import itertools
import os
import select
import struct

import msgpack

MYPY = False
if MYPY:  # for the type checker only
    from typing import Any

_HEADER = struct.Struct(">I")  # the host's frames: length, msgpack
_REQUEST = struct.Struct(">II")  # ours: head length, body length; msgpack head, raw body (see _codec)
# What one send queues whole (a unix stream socket's skb: 32 KiB of pages and a head, while the
# socket's send buffer holds twice that): a larger frame is sent in pieces of this size at most.
_ATOMIC = 32 * 1024
PART_OP = "__part__"
_ALL_SIGNALS = _signal.valid_signals()

limits: dict[str, int] = {}  # the host's ``ChannelLimits``, from the setup frame
_sock = _socket.socket(fileno=int(os.environ.pop("COMPUTER_CHANNEL_FD")))
os.set_inheritable(_sock.fileno(), False)  # a program's own children (os.system, a fork) never hold it
# Once the run is in, every wait on the channel is a tick at most (the socket is non-blocking, in every
# process the guest forks alike; Python polls it): see ``_wait``.
_TICK = 0.005  # a wait on the channel, then its caller looks again (the stash, a handler's reads)


def _block() -> Any:
    return _signal.pthread_sigmask(_signal.SIG_BLOCK, _ALL_SIGNALS)


def _unblock(mask: Any) -> None:
    """Back to ``mask``; None: it was lost to an exception a handler raised as the signals were blocked
    (every signal unblocked: the program's own mask, if it had one, is not known)."""
    if mask is None:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _ALL_SIGNALS)
    else:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)


def _frames(op: str, args: Any, body: bytes, call: int | None) -> list[list[Any]]:
    """A request's frames, each as the buffers one ``sendmsg`` sends (no copy joins a piece)."""
    head = msgpack.packb({"op": op, "args": args, "id": call}, use_bin_type=True)
    limit = limits["request_bytes"]
    if len(head) > limit and op != "__result__":
        raise OSError(errno.E2BIG, f"the arguments of one {op} call are over {limit} bytes")
    if not body or _REQUEST.size + len(head) + len(body) <= _ATOMIC:  # a large head goes as it is
        return [[_REQUEST.pack(len(head), len(body)) + head, body]]
    part = msgpack.packb({"op": PART_OP, "args": {}, "id": call}, use_bin_type=True)
    size = _ATOMIC - _REQUEST.size - len(part)
    view = memoryview(body)
    pieces = [view[at : at + size] for at in range(0, len(body), size)]
    head = msgpack.packb({"op": op, "args": {**args, "parts": len(pieces)}, "id": call}, use_bin_type=True)
    frames = [[_REQUEST.pack(len(head), 0) + head]]
    frames += [[_REQUEST.pack(len(part), len(piece)) + part, piece] for piece in pieces]
    return frames


def _send(frames: list[list[Any]]) -> None:
    """A request's frames, sent whole (the caller blocked every signal: no handler runs between them)."""
    for buffers in frames:
        while True:
            try:
                sent = _sock.sendmsg(buffers)
                break
            except TimeoutError:  # the host reads slowly: go on (the socket's timeout is a tick)
                pass
        if sent == sum(map(len, buffers)):
            continue
        rest = memoryview(b"".join(buffers))[sent:]  # a frame over one buffer of the kernel's
        while rest:
            try:
                rest = rest[_sock.send(rest) :]
            except TimeoutError:
                pass


def _recv_exact(n: int) -> bytearray:
    """A frame of ``n`` bytes, its room taken before its first byte is: a ``MemoryError`` (a program's
    ``RLIMIT_AS``) leaves the frame whole on the channel, never half read (before, s60: each read
    took a buffer of what was left, and one refused in the middle of a large reply left the rest,
    which the next call read as a frame's length: it waited for it until the run's timeout)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            size = _sock.recv_into(view[got:])
        except TimeoutError:
            continue
        if not size:
            raise ConnectionError("the host closed the workspace channel")
        got += size
    return buf


_READS = [0]  # frames this process read: a handler's call ran when it changed


def _ready(timeout: float | None) -> bool:
    """Whether a frame's bytes wait on the channel, waited for ``timeout`` seconds at most (None: for
    good); False at once when a handler's call stashed a reply meanwhile (``_WAKE``). A signal
    interrupts the poll, its handler runs, and python polls again for the rest of the time: the
    call the handler interrupted is woken only by what comes, which its reply, read by the
    handler's call, no longer does."""
    wake = _WAKE[0]
    poll = select.poll()  # one of its own: a handler's call polls while this one is interrupted
    poll.register(_sock.fileno(), select.POLLIN)
    poll.register(wake, select.POLLIN)
    events = poll.poll(None if timeout is None else max(1, int(timeout * 1000)))
    if any(fd == wake for fd, _ in events):
        try:
            os.eventfd_read(wake)
        except OSError:  # drained already (BlockingIOError)
            pass
        return False
    return bool(events)


def recv(forever: bool = False) -> Any:
    """One frame, its length peeked first (a caller killed between the two reads takes nothing), then
    read whole with every signal blocked; None when none came within a tick (``forever``: waited for
    as long as it takes), when a signal handler's call stashed a reply meanwhile, or when one read
    frames between the peek and the read (the length peeked was of one of them)."""
    reads = _READS[0]
    if not _ready(None if forever else _TICK):
        return None
    mask = None
    try:
        # A handler tripped before runs as this returns, never after: from here no handler's call
        # reads, so what ``_ready`` saw is still there. Before (s62), the peek came first, with
        # signals open: a handler run between the poll and the peek read this call's reply (stashed
        # it) and the peek then waited on an empty socket for its timeout (a tick; for good with a
        # longer one), deaf to the wake its handler wrote.
        mask = _block()
        if _READS[0] != reads:
            return None
        try:
            header = _sock.recv(_HEADER.size, _socket.MSG_PEEK | _socket.MSG_WAITALL)
        except TimeoutError:
            return None
        if not header:
            raise ConnectionError("the host closed the workspace channel")
        if len(header) < _HEADER.size:  # the frame's first bytes only, within the socket's timeout
            return None
        data = _recv_exact(_HEADER.size + _HEADER.unpack(header)[0])
        _READS[0] += 1
    finally:
        _unblock(mask)
    return msgpack.unpackb(memoryview(data)[_HEADER.size :], raw=False)


def recv_setup() -> Any:
    """The setup frame, waited for as long as it takes (a guest started ahead waits for its run, the
    socket blocking: it never wakes meanwhile)."""
    while True:
        setup = recv(forever=True)
        if setup is not None:
            _sock.settimeout(_TICK)
            return setup


_TURN_THREADS = [_thread.RLock()]
_TURN_FILE = os.memfd_create("computer-turn")  # close-on-exec
_DEPTH = [0]  # calls of this process inside its turn (more than one: a signal handler's)
_COUNTER = itertools.count(1)  # a call's number (``next``: no handler runs inside it)
_PENDING: set[int] = set()  # this process's calls waiting for their replies
_STASH: dict[int, Any] = {}  # replies read by a nested call for a call further up
# Written when a handler's call ends with replies stashed for the calls further up: the one it
# interrupted, back in its poll, wakes at once (before, it waited out its tick for a reply already read).
_WAKE = [os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)]


def _forked() -> None:
    _TURN_THREADS[0] = _thread.RLock()
    _DEPTH[0] = 0
    _PENDING.clear()
    _STASH.clear()
    try:
        os.close(_WAKE[0])  # the parent's: its waits are its own
    except OSError:  # the program closed it
        pass
    _WAKE[0] = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    _own("wake", _WAKE[0])


os.register_at_fork(after_in_child=_forked)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# The channel's own descriptors as they were made: a program that closed one (``os.closerange``) or
# put another file on its number (``os.dup2(pipe, 3)``) gets an error naming it at its next call
# (before: a pipe on the socket's number was polled for a reply for good, the run hung to its timeout;
# a closed eventfd was reported ready at every look, a call spun on a core).
_IDS: dict[str, tuple[int, tuple[int, int]]] = {}


def _own(name: str, fd: int) -> None:
    _IDS[name] = (fd, _identity(fd))


def _check_descriptors() -> None:
    for name, (fd, identity) in _IDS.items():
        try:
            same = _identity(fd) == identity
        except OSError:
            same = False
        if not same:
            raise OSError(
                errno.EBADF,
                f"the workspace channel's descriptor {fd} ({name}) was closed or replaced by the "
                "program (os.close, os.closerange, os.dup2): workspace calls cannot be made",
            )


_own("socket", _sock.fileno())
_own("turn", _TURN_FILE)
_own("wake", _WAKE[0])


def _wait(call: int) -> Any:
    """The reply to ``call``: from the stash, or read (another's kept or dropped on the way). A call
    waits a tick at a time: one a signal handler's call interrupted finds its reply in the stash (a
    blocking read, retried after the handler, waited for it on the channel for good)."""
    while True:
        if call in _STASH:
            return _STASH.pop(call)
        reply = recv()
        if reply is None:
            continue
        owner = reply.get("id")
        if owner == call:
            return reply
        if owner in _PENDING:  # a call this one interrupted: kept for it
            _STASH[owner] = reply


def exchange(op: str, args: Any, body: bytes = b"") -> Any:
    """Send one request and return its reply's value, in this caller's turn. Signals are blocked from
    the turn's taking to the request's last byte and from the call's end to the turn's giving back:
    a handler (its own calls, its exception) runs only while the call waits for its reply, and only
    while the outermost call does (see the module's docstring)."""
    _check_descriptors()
    call = (os.getpid() << 32) | (next(_COUNTER) & 0xFFFFFFFF)
    frames = _frames(op, args, body, call)
    with _TURN_THREADS[0]:
        mask = None
        taken = waiting = False
        try:
            mask = _block()
            if _DEPTH[0] == 0:
                os.lockf(_TURN_FILE, os.F_LOCK, 0)
            _DEPTH[0] += 1
            taken = True
            _PENDING.add(call)
            _send(frames)
            # Only the outermost call waits with signals open: a handler's own call waits with them
            # blocked, so the next signal's handler runs once that call is answered, not inside it
            # (as the kernel holds a signal while its own handler runs).
            waiting = _DEPTH[0] == 1
            if waiting:
                _unblock(mask)
            return value(_wait(call))
        finally:
            try:
                if waiting:
                    mask = None
                    mask = _block()
            finally:
                if taken:
                    _PENDING.discard(call)
                    _STASH.pop(call, None)  # its reply, when it came before an exception ended the call
                    _DEPTH[0] -= 1
                    if _DEPTH[0] == 0:
                        os.lockf(_TURN_FILE, os.F_ULOCK, 0)
                    elif _STASH:  # for a call further up, which a handler's call interrupted
                        os.eventfd_write(_WAKE[0], 1)
                _unblock(mask)


def value(reply: Any) -> Any:
    if "err" in reply:
        code, message, filename = reply["err"]
        raise OSError(code, message, filename)  # OSError picks the subclass (FileNotFoundError…)
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply.get("ok")
