"""The global options (``--data-dir``, ``--address``) and the two ways a command reaches workspaces.

With no cluster named (no ``--address``, no ``RAY_ADDRESS``) commands never import Ray: ``tool``,
``shell``, ``mcp``, ``ls`` and ``rm`` work on the data directory in this process (``_inprocess``).
With a cluster named they join it through :func:`ray_session`. Only ``demo`` starts a Ray of its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Settings

__all__ = [
    "ANSWER_TIMEOUT",
    "GLOBAL_OPTIONS",
    "JOIN_TIMEOUT",
    "CliError",
    "GlobalOptions",
    "check_listen",
    "check_reachable",
    "check_redis",
    "command_exit_code",
    "data_dir_error",
    "global_option_misplaced",
    "join_bounded",
    "local_settings",
    "prepare_data_dir",
    "ray_session",
    "settings_error",
    "watch_cluster",
]


class CliError(Exception):
    """A failure the user can act on: printed as one message, exit code ``code`` (no traceback)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class GlobalOptions:
    data_dir: Path | None = None
    address: str | None = None

    @property
    def local(self) -> bool:
        """Whether no cluster is named: commands then work in this process, without Ray."""
        return self.address is None and not os.environ.get("RAY_ADDRESS")


GLOBAL_OPTIONS = ("--data-dir", "--address")


def global_option_misplaced(option: str, command: str, program: str = "computer") -> str:
    """What to say of a global option given after the command (``computer ls --data-dir D``): it
    was 'No such option' (or, for ``tool``, an argument the tool does not know)."""
    return f"{option} is a global option: put it before the command ({program} {option} VALUE {command} ...)"


def command_exit_code(code: int | None, status: str) -> int:
    """The exit code of a command line that ran one command (``tool NAME exec``, ``shell NAME -c
    '!cmd'``): the command's own code when it failed (1 to 255: 124 after a timeout, as timeout(1)
    answers), 1 when it failed without one (killed, the sandbox failed), 0 when it completed.
    Decision: both commands exit alike, as ``ssh`` and ``docker exec`` do, so ``&&`` in a script
    and ``$?`` behave as for the command itself."""
    if isinstance(code, int) and 0 < code < 256:
        return code
    return 0 if status == "completed" else 1


def check_reachable(
    address: str | None,
    timeout: float = 3.0,
    *,
    alone: str = "commands then work in this process, without Ray",
) -> None:
    """Fail fast on a ``host:port`` nobody listens on (Ray itself retries for about a minute).

    The message says what to do: start a cluster there, or name none (``alone``: what the command
    does then). Decision: it named only the refusal, and a user who had set ``RAY_ADDRESS`` long ago
    (or copied ``--address`` from the README) was not told that no cluster is needed at all."""
    import socket

    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"--address must look like HOST:PORT or auto, not {address!r}", code=2)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        named = "unset RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") == address else "leave out --address"
        raise CliError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one there "
            f"(`ray start --head --port={port}`), or {named}: {alone}"
        ) from None


JOIN_TIMEOUT = 20.0  # seconds a command waits to join a cluster (``join_bounded``)


def join_bounded(address: str | None, connect: Callable[[], None], timeout: float = JOIN_TIMEOUT) -> None:
    """Run ``connect`` (a ``ray.init``) in this thread, bounded: when it has not returned after
    ``timeout`` seconds, print one line naming the address tried and what to do, and end the process
    with exit code 1 (``os._exit``: Ray's join cannot be cancelled, and nothing is open yet).

    Decision: Ray bounds no join. An address that accepts TCP but does not answer as a GCS (a stale
    ``ray_current_cluster`` file of ``auto``, another service, a head whose node IP is not reachable
    from here) was retried for ~10 minutes, Ray's C++ client printing a warning every few seconds; Ray
    offers no timeout for ``ray.init`` and its C++ settings (``RAY_gcs_rpc_server_reconnect_timeout_s``
    and the like) bound reconnections, not the first join. Ray's output to stderr (fd 2, its C++ part
    included) is held back while joining: shown after a join that succeeded, dropped after one that
    failed, whose reason is the one line. A ``connect`` that raises: ``CliError`` with its message."""
    import sys
    import tempfile
    import threading

    tried = _resolved(address)
    advice = "pass --address HOST:PORT of a running cluster (`ray status` on its head shows it)"
    sys.stderr.flush()
    held = tempfile.TemporaryFile()  # unlinked: nothing is left behind by os._exit
    real_stderr = os.dup(2)
    os.dup2(held.fileno(), 2)
    finished = threading.Lock()

    def give_up() -> None:
        if not finished.acquire(blocking=False):
            return  # the join returned meanwhile
        os.dup2(real_stderr, 2)
        from ._output import report

        with contextlib.suppress(Exception):
            sys.stdout.flush()
        report(CliError(f"no Ray cluster answered at {tried} within {timeout:g} s; {advice}"))
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(1)

    watchdog = threading.Timer(timeout, give_up)
    watchdog.daemon = True
    watchdog.start()
    failure: BaseException | None = None
    try:
        _dial_loopback_as_named()
        connect()
    except Exception as exc:  # Ray raises bare Exceptions, ConnectionError, RuntimeError
        failure = exc
    finally:
        if not finished.acquire(blocking=False):
            threading.Event().wait()  # the watchdog is ending the process
        watchdog.cancel()
        sys.stderr.flush()
        os.dup2(real_stderr, 2)
        os.close(real_stderr)
    if failure is not None:
        held.close()
        raise CliError(f"cannot join the Ray cluster at {tried}: {failure}; {advice}") from None
    held.seek(0)
    output = held.read()
    held.close()
    if output:
        sys.stderr.buffer.write(output)
        sys.stderr.flush()


ANSWER_TIMEOUT = JOIN_TIMEOUT  # seconds a probe of a joined cluster may wait (``watch_cluster``)
_PROBE_EVERY = 2.0  # seconds between two probes that were answered


@contextlib.contextmanager
def watch_cluster(
    address: str | None, timeout: float = ANSWER_TIMEOUT, *, name_silence: bool = False
) -> Iterator[None]:
    """While the body runs, a joined cluster must keep answering: a thread reads a key of the GCS's
    key-value store every ``_PROBE_EVERY`` seconds, and when one read has had no answer for ``timeout``
    seconds the process prints one line naming the cluster and ends with exit code 1 (``os._exit``, as
    ``join_bounded``: the calls waiting on the GCS cannot be cancelled). Leaving the body waits for a
    read under way (the GCS is then checked once more before ``ray.shutdown``).

    Decision: after a join, Ray bounds nothing a command does next: ``ray.nodes()`` waited forever on a
    cluster whose GCS stopped answering (measured: > 100 s, no end; ``list_named_actors`` and
    ``get_actor`` give up after 60 s each, and ``status`` makes several), so `status` and every command
    through ``ray_session`` hung. Bounding each call instead would bound an exec (up to an hour) too:
    the probe bounds only the cluster's silence, whatever the command waits on. With ``name_silence``
    (``status``, whose GCS calls wait less than ``timeout``), a ``ClusterSilentError`` leaving the body
    ends the process the same way at once, with that error's message: it names the call that went
    unanswered. Other commands keep the probe's message: their library calls wait as long as the probe
    (``NODES_TIMEOUT``), and either could come first."""
    import sys
    import threading
    import time

    from ..actors import ClusterSilentError
    from ..actors.raycompat import kv_get

    tried = _resolved(address)
    state = threading.Condition()
    started: list[float] = []  # when the read under way began; empty between reads
    stop = threading.Event()
    ended = threading.Lock()

    def probe() -> None:
        try:
            kv_get(b"computer:cli-probe")
        except ClusterSilentError:
            return  # no answer (the store's own bound, ``NODES_TIMEOUT``): the watcher's wait decides
        except Exception:
            pass  # an answer, even an error, is an answer
        with state:
            started.clear()
            state.notify_all()

    def give_up(message: str | None = None) -> None:
        if not ended.acquire(blocking=False):
            return
        from ._output import report

        with contextlib.suppress(Exception):
            sys.stdout.flush()
        report(
            CliError(
                message
                or f"the Ray cluster at {tried} stopped answering: its GCS gave no answer for {timeout:g} s "
                "(`ray status` on its head tells more)"
            )
        )
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(1)

    def watch() -> None:
        while True:
            with state:
                if stop.is_set():
                    return
                started.append(time.monotonic())
            threading.Thread(target=probe, name="computer-cluster-probe", daemon=True).start()
            with state:
                if not state.wait_for(lambda: not started, timeout):
                    give_up()
            stop.wait(_PROBE_EVERY)

    watcher = threading.Thread(target=watch, name="computer-cluster-watch", daemon=True)
    watcher.start()
    try:
        yield
    except ClusterSilentError as silent:
        if name_silence:
            # A bounded GCS call of the body went unanswered (``gcs_answer``): that call is named, and
            # the process ends as for the probe (the calls still waiting on the GCS cannot be cancelled).
            give_up(str(silent))
        raise  # with name_silence: the watcher is ending the process already
    finally:
        with state:
            stop.set()
            if started and not state.wait_for(lambda: not started, timeout):
                give_up()
            ended.acquire(blocking=False)  # from here on the watcher ends nothing
        watcher.join(timeout)


def _dial_loopback_as_named() -> None:
    """Make Ray dial a loopback address (``127.0.0.1:P``, ``localhost:P``, ``[::1]:P``, or what ``auto``
    finds) as it is named.

    Decision: Ray rewrites a loopback GCS address to this machine's outward IP before dialling it
    (``services.resolve_ip_for_localhost``, the address it would route to the internet from), so
    ``--address 127.0.0.1:6379`` connected through eth0's address, not loopback: a connection a
    firewall or a GCS bound to loopback refuses, and traffic a user asked to keep on loopback. Ray's
    own switch for it is ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (``ray_constants.ENABLE_RAY_CLUSTER``);
    it only changes how an address that says loopback is dialled (the node the command then uses is
    the local raylet Ray finds, with the address that raylet registered). Set for this process unless
    the variable was given."""
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is not None:
        return
    import ray._private.ray_constants as constants  # private to Ray: read when an address is resolved

    constants.ENABLE_RAY_CLUSTER = False


def _resolved(address: str | None) -> str:
    """``address`` as said to the user: ``auto`` with the address it stands for when one is recorded."""
    if address and address != "auto":
        return address
    try:
        from ray._private.services import get_ray_address_from_environment

        found = get_ray_address_from_environment("auto", None)
    except Exception:  # private to Ray: only the message depends on it
        found = None
    return f"auto ({found})" if found else "auto"


def check_listen(host: str, port: int) -> None:
    """``CliError`` (exit 1) when ``host:port`` cannot be listened on (taken, a host that does not
    resolve or is not this machine's). Decision: ``serve`` and ``dashboard`` check before they say
    they serve; uvicorn found out only after that line and exited 3, a code the CLI does not use.
    Bound as uvicorn binds (``SO_REUSEADDR``), then released for it."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def data_dir_error(data_dir: Path, exc: BaseException) -> CliError:
    """The one line for a data directory that cannot be used (a file, ``/proc``, no permission), from
    the error opening it raised (an ``OSError`` or SQLite's "unable to open database file")."""
    if data_dir.exists() and not data_dir.is_dir():
        return CliError(f"the data directory {data_dir} is not a directory", code=2)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return CliError(f"cannot use the data directory {data_dir}: {reason}")


def prepare_data_dir(data_dir: Path) -> None:
    """Make ``data_dir`` (and its workspaces directory) if missing; ``CliError`` when it cannot be."""
    try:
        (data_dir / "workspaces").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise data_dir_error(data_dir, exc) from None


def settings_error(exc: BaseException) -> CliError | None:
    """The one line (exit 2, a bad option value) for settings that did not validate, naming the
    ``COMPUTER_*`` variable that set the value when one did; ``None`` for any other exception.
    Decision: converted where a command's failure is reported (``_app._run``, ``_fast``), since
    settings are built in several places (``local_settings``, ``computer.init``, the demo)."""
    import sys

    pydantic_core = sys.modules.get("pydantic_core")  # a ValidationError means it is loaded
    if pydantic_core is None or not isinstance(exc, pydantic_core.ValidationError) or exc.title != "Settings":
        return None
    environment = {key.upper() for key in os.environ}
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "settings"
        variable = f"COMPUTER_{field.upper()}"
        where = variable if variable in environment else field
        problems.append(f"{where}: {error['msg']} (got {error['input']!r})")
    return CliError("; ".join(problems), code=2)


def local_settings(options: GlobalOptions) -> Settings:
    """The settings for commands that read the data directory without Ray; a directory in Redis
    (``COMPUTER_REDIS_URL``) is probed first (:func:`check_redis`)."""
    from ..config import configure

    config = configure(data_dir=options.data_dir)
    if config.redis_url:
        check_redis(config.redis_url)
    return config


_REDIS_ANSWERED: set[str] = set()  # the URLs probed in this process that answered


def check_redis(url: str, timeout: float = 3.0) -> None:
    """Fail fast, in one line, on a ``COMPUTER_REDIS_URL`` that is malformed or that nobody answers.

    Decision: a command with the directory in an unreachable Redis retried for about 30 s, silent,
    then ended with a traceback (``WorkspaceUnavailableError``, three chained exceptions); a URL
    without a scheme (``localhost:6379``) ended with redis-py's ``ValueError`` traceback. A TCP
    connect (a unix socket's, for ``unix://``) says it at once, with what to do. Probed once per URL
    and process (the dashboard lists workspaces per request)."""
    import socket
    from urllib.parse import urlsplit

    if url in _REDIS_ANSWERED:
        return
    fix = "start it, or unset COMPUTER_REDIS_URL to keep both in the data directory (SQLite)"
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise CliError(
            f"COMPUTER_REDIS_URL must start with redis://, rediss:// or unix://, not {url!r} "
            "(e.g. redis://127.0.0.1:6379/0)",
            code=2,
        )
    try:
        if parts.scheme == "unix":
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(parts.path)
        else:
            with socket.create_connection(
                (parts.hostname or "localhost", parts.port or 6379), timeout=timeout
            ):
                pass
    except ValueError as exc:  # a port that is not a number
        raise CliError(f"COMPUTER_REDIS_URL is not a valid URL ({exc}): {url!r}", code=2) from None
    except OSError as exc:
        raise CliError(
            f"Redis at {url} (COMPUTER_REDIS_URL: the workspace directory and share links) does not "
            f"answer ({exc.strerror or exc}); {fix}"
        ) from None
    _REDIS_ANSWERED.add(url)


@asynccontextmanager
async def ray_session(options: GlobalOptions) -> AsyncIterator[Settings]:
    """Join the cluster at ``--address`` (or ``RAY_ADDRESS``) for one command; disconnect at the end.

    Decision: the command takes the settings the cluster's last ``computer.init`` published (pools,
    owners, leases), with this command's ``--data-dir`` when given, and never publishes them: through
    ``computer.init``, ``computer ps`` replaced a cluster's pool sizes, lease and hibernation times with
    this shell's defaults for every client (and started a python pool). On a cluster where nothing was
    published, this machine's settings (``COMPUTER_*``)."""
    from ..actors import adopt, ensure_ray, published_settings

    address = options.address or os.environ.get("RAY_ADDRESS")
    check_reachable(address)
    import ray

    published = None

    def join() -> None:
        nonlocal published
        # In the main thread: Ray installs its signal handlers there (the event loop has nothing to run yet).
        ensure_ray(options.address)
        published = published_settings()

    try:
        join_bounded(address, join)
    except CliError:
        ray.shutdown()
        raise
    try:
        with watch_cluster(address):  # a cluster that stops answering ends the command (exit 1)
            given = {} if published is None else published.model_dump()
            yield adopt(**{**given, "data_dir": options.data_dir or given.get("data_dir")})
    finally:
        ray.shutdown()
