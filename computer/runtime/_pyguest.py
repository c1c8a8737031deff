"""The program the python backend runs inside its sandbox (``python3 -I -S``); stdlib + msgpack only.

It receives the source, ``input`` and the workspace cwd over the channel (a socket on the fd named by
``COMPUTER_CHANNEL_FD``), installs the ``workspace`` module and an import finder reading ``.py`` files
from the workspace, runs the source as ``__main__``, calls ``main(input)`` when defined and sends back
its JSON-able return value. Not imported by the host package.
"""

from __future__ import annotations

# Imports are what a guest's start costs (every python run that found no guest started ahead): no
# ``site`` (-S: 27 ms, the base interpreter's .pth files), no ``importlib.abc`` (20 ms: it pulls in
# importlib.resources, pathlib, re, tempfile; the finder and loader below are duck-typed), ``_socket``
# rather than ``socket`` (enum), ``json`` only to check a value, ``linecache`` and ``traceback`` (7 ms:
# tokenize, re) only when something imports them (see ``_AfterImport``).
import _sitebuiltins
import builtins
import errno
import gc
import importlib.machinery
import os
import posixpath
import sys
import types

sys.path.insert(0, posixpath.join(posixpath.dirname(__file__), "lib"))  # msgpack, staged with us
import msgpack

MYPY = False
if MYPY:  # for the type checker only (typing costs 2 ms to import; annotations are not evaluated)
    from importlib.abc import Loader as _LoaderBase
    from typing import Any
else:
    _LoaderBase = object

# What ``site`` would have added: exit() and quit() (scripts call them), help().
builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
builtins.help = _sitebuiltins._Helper()


def _not_dumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``: this process's ``/proc/<pid>`` entries become root's, so no other
    process of the sandbox (same uid: a background process an earlier run left, or a child of this
    one) can open ``/proc/<pid>/fd/<channel>`` to read the host's frames or forge this run's (its
    result, its calls), nor ptrace it. Code in this interpreter still can: it can call ``workspace``
    anyway (see ``_codec``). An ``execve`` resets it, so the program's own children are ordinary.
    ``_ctypes`` directly: ``ctypes`` costs ~6 ms of a guest's start."""
    import _ctypes as _untyped

    c: Any = _untyped

    class _Int(c._SimpleCData):  # type: ignore[misc]
        _type_ = "i"

    class _Prctl(c.CFuncPtr):  # type: ignore[misc]
        _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
        _restype_ = _Int

    class _Libc:
        _handle = c.dlopen(None)

    if _Prctl(("prctl", _Libc()))(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(errno.EPERM, "the guest could not make itself non-dumpable")


_not_dumpable()
# The run's own process (a process the program forked that ends the program too sends nothing); the
# guest's own getpid, whatever a program's test patches into ``os``.
_getpid = os.getpid
_PID = _getpid()
import _guest_channel as _channel  # noqa: E402  (staged from _pyguest_channel.py; opens the channel)

_exchange = _channel.exchange
_sock = _channel._sock  # the channel's socket, as code in this interpreter can reach it anyway


def _call(op: str, **args: Any) -> Any:
    return _exchange(op, args)


def _abs(path: str) -> str:
    return posixpath.normpath(posixpath.join(_CWD, path)) if not path.startswith("/") else path


def _ns(value: Any) -> Any:
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_ns(v) for v in value]
    return value


def _build_module() -> types.ModuleType:
    ws = types.ModuleType("workspace", "The authoritative workspace filesystem (relative paths: from cwd).")

    def read_file(path: str, offset: int = 0, length: int | None = None) -> bytes:
        return bytes(_call("read_file", path=_abs(path), offset=offset, length=length))

    def read_text(path: str) -> str:
        return str(_call("read_text", path=_abs(path)))

    def write_file(path: str, data: bytes | str, mode: int | None = None) -> None:
        path = _abs(path)
        if isinstance(data, str):
            body = data.encode("utf-8")
        elif isinstance(data, bytes | bytearray | memoryview):
            body = bytes(data)
        else:
            raise TypeError(f"write_file() data must be bytes or str, not {type(data).__name__}")
        limit = _setup["limits"]["write_bytes"]
        if len(body) > limit:
            raise OSError(errno.EFBIG, f"one write_file carries at most {limit} bytes", path)
        _exchange("write_file", {"path": path, "mode": mode}, body)

    def mkdir(path: str, recursive: bool = False, mode: int = 0o755) -> None:
        _call("mkdir", path=_abs(path), recursive=recursive, mode=mode)

    def rm(path: str, recursive: bool = False, force: bool = False) -> None:
        _call("rm", path=_abs(path), recursive=recursive, force=force)

    def readdir(path: str, limit: int | None = None, offset: int = 0) -> list[Any]:
        return list(_ns(_call("readdir", path=_abs(path), limit=limit, offset=offset)))

    def stat(path: str) -> Any:
        return _ns(_call("stat", path=_abs(path)))

    def exists(path: str) -> bool:
        return bool(_call("exists", path=_abs(path)))

    def find(
        directory: str,
        pattern: str | None = None,
        exclude: Any = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Any]:
        args = {"directory": _abs(directory), "pattern": pattern, "exclude": list(exclude)}
        return list(_ns(_call("find", **args, limit=limit, offset=offset)))

    def grep(pattern: str, path: str, **options: Any) -> list[Any]:
        return list(_ns(_call("grep", pattern=pattern, path=_abs(path), **options)))

    def ls(prefix: str) -> list[str]:
        return list(_call("ls", prefix=_abs(prefix)))

    def rename(src: str, dst: str, overwrite: bool = False) -> None:
        _call("rename", src=_abs(src), dst=_abs(dst), overwrite=overwrite)

    def copy(src: str, dst: str, overwrite: bool = False) -> None:
        _call("copy", src=_abs(src), dst=_abs(dst), overwrite=overwrite)

    def call(op: str, **args: Any) -> Any:
        """One operation of the host by name, arguments as given (no cwd applied): for what the
        functions above do not cover, e.g. the agent's ``agent_tool``. The host refuses the rest."""
        return _call(op, **args)

    named = (read_file, read_text, write_file, mkdir, rm, readdir, stat, exists, find, grep, ls, rename)
    for fn in (*named, copy, call):
        setattr(ws, fn.__name__, fn)
    ws.cwd = _CWD  # type: ignore[attr-defined]
    return ws


class _WorkspaceLoader(_LoaderBase):
    def __init__(self, path: str) -> None:
        self.path = path

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        source = _call("read_text", path=self.path)
        _remember_source(self.path, source)
        exec(compile(source, self.path, "exec"), module.__dict__)


class _WorkspaceFinder:
    """Finds modules and packages as ``.py`` files in the workspace, from cwd (after the stdlib)."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is None:
            bases = [_CWD]
        else:
            bases = [
                p[len("workspace:") :] for p in path if isinstance(p, str) and p.startswith("workspace:")
            ]
        name = fullname.rpartition(".")[2]
        for base in bases:
            package_init = posixpath.join(base, name, "__init__.py")
            if _call("exists", path=package_init):
                spec = importlib.machinery.ModuleSpec(
                    fullname, _WorkspaceLoader(package_init), is_package=True
                )
                spec.origin = package_init
                spec.submodule_search_locations = ["workspace:" + posixpath.join(base, name)]
                spec.has_location = True
                return spec
            module_file = posixpath.join(base, name + ".py")
            if _call("exists", path=module_file):
                spec = importlib.machinery.ModuleSpec(
                    fullname, _WorkspaceLoader(module_file), origin=module_file
                )
                spec.has_location = True
                return spec
        return None


_SOURCES: dict[str, str] = {}


def _remember_source(filename: str, source: str) -> None:
    """Let tracebacks show the lines of code that never existed as files in this sandbox."""
    _SOURCES[filename] = source
    if "linecache" in sys.modules:
        _fill_linecache(sys.modules["linecache"])


def _fill_linecache(linecache: types.ModuleType) -> None:
    for name, source in _SOURCES.items():
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)


def _teach_spawn(spawn: Any) -> None:
    """multiprocessing's ``spawn``/``forkserver`` children run the main module again from its file, as
    ``__mp_main__``, and ``<exec>`` is none (every worker of a spawn pool died at start, and the run
    hung): they get the source as a file and a ``workspace`` module that says it is not theirs, in a
    directory multiprocessing removes once its children are done (``util.get_temp_dir``)."""
    prepare = spawn.get_preparation_data

    def get_preparation_data(name: str) -> Any:
        data = prepare(name)
        if getattr(sys.modules.get("__main__"), "__file__", None) == "<exec>":
            lib = _spawn_lib()
            data["init_main_from_path"] = posixpath.join(lib, "exec.py")
            data["sys_path"] = [*data["sys_path"], lib]  # the cwd's mirror is on it already
        return data

    spawn.get_preparation_data = get_preparation_data
    # Its children (spawn, forkserver, the resource tracker) start with the interpreter's flags, and the
    # guest's ``sys.dont_write_bytecode`` is none: they wrote ``__pycache__`` into the workspace's
    # mirror as they imported its modules, pulled into the workspace. ``-B`` for them too.
    util = sys.modules["multiprocessing.util"]
    flags = getattr(util, "_args_from_interpreter_flags")  # noqa: B009  (private: mypy knows it not)

    def args_from_interpreter_flags() -> list[str]:
        args: list[str] = flags()
        return [*args, "-B"] if sys.dont_write_bytecode and "-B" not in args else args

    setattr(util, "_args_from_interpreter_flags", args_from_interpreter_flags)  # noqa: B010


_SPAWN_LIB: list[str] = []
_NOT_HERE = """def _not_here(*args, **kwargs):
    raise RuntimeError("the workspace module works in the run's own process (and the processes it "
        "forks), not in one multiprocessing spawned: read and write the workspace's files with open()")
"""


def _spawn_lib() -> str:
    if not _SPAWN_LIB:
        from multiprocessing import util

        lib = util.get_temp_dir()
        with open(posixpath.join(lib, "exec.py"), "w", encoding="utf-8") as f:
            f.write(_setup["source"])
        names = [n for n in dir(sys.modules["workspace"]) if callable(getattr(sys.modules["workspace"], n))]
        with open(posixpath.join(lib, "workspace.py"), "w", encoding="utf-8") as f:
            f.write(_NOT_HERE + "".join(f"{n} = _not_here\n" for n in names) + f"cwd = {_CWD!r}\n")
        _SPAWN_LIB.append(lib)
    return _SPAWN_LIB[0]


# The stdlib modules loaded as usual, then given to a function, the first time something imports them.
_AFTER_IMPORT = {"linecache": _fill_linecache, "multiprocessing.spawn": _teach_spawn}


class _AfterImport:
    """First on ``sys.meta_path`` until every module of ``_AFTER_IMPORT`` is imported (``linecache``
    by ``traceback``, ``warnings``, the program…; ``multiprocessing.spawn`` by ``multiprocessing``'s
    contexts): each is the stdlib module, handed to its function once loaded."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        then = _AFTER_IMPORT.pop(fullname, None)
        if then is None:
            return None
        if not _AFTER_IMPORT:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, then)
        return spec


class _ThenLoader(_LoaderBase):
    def __init__(self, loader: Any, then: Any) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename…
        return getattr(self.loader, name)


sys.meta_path.insert(0, _AfterImport())


def _value_problem(value: Any) -> str | None:
    """Why the host would refuse ``value`` (its limits, see ``_codec.ChannelLimits``), or None."""
    limits = _setup["limits"]
    try:
        size = len(msgpack.packb({"op": "__result__", "args": {"value": value}}, use_bin_type=True))
    except OverflowError:
        return "with an integer past 64 bits (return it as a string)"
    except (ValueError, TypeError) as exc:  # a str that is not UTF-8 (a lone surrogate)
        return f"that cannot be sent: {exc}"
    if size > limits["result_bytes"]:
        return f"of {size} bytes; the limit is {limits['result_bytes']}"
    items, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, list | tuple | dict):
            if level >= limits["depth"]:
                return f"nested deeper than {limits['depth']} levels"
            items += len(item) + 1
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    if items > limits["items"]:
        return f"of {items} list and map elements; the limit is {limits['items']}"
    return None


def _apply_env() -> str | None:
    """What python takes from a run's ``PYTHONWARNINGS`` and ``PYTHONIOENCODING`` as it starts, which
    ``-I`` had the guest ignore: the warnings filters (``env={"PYTHONWARNINGS": "error"}`` made no
    warning an error), the streams' encoding and errors (stderr's stay ``backslashreplace``, as
    python has them). ``PYTHONUNBUFFERED``: the guest's streams are unbuffered anyway (``-u``);
    ``PYTHONUTF8`` and ``PYTHONHASHSEED`` are the host's, at the interpreter's start (``python.py``).
    What makes python refuse to start, as a message."""
    options = [o.strip() for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o.strip()]
    if options:
        import warnings

        sys.warnoptions[0:0] = options  # the -W options, later, win; a child python is told them again
        warnings._processoptions(options)  # type: ignore[attr-defined]
    encoding, _, errors = os.environ.get("PYTHONIOENCODING", "").partition(":")
    if encoding or errors:
        for stream in (sys.stdin, sys.stdout, sys.stderr):
            if stream is not None and hasattr(stream, "reconfigure"):
                keep = stream is sys.stderr or not errors
                try:
                    stream.reconfigure(
                        encoding=encoding or stream.encoding, errors=stream.errors if keep else errors
                    )
                except LookupError as exc:  # python does not start either
                    return f"PYTHONIOENCODING: {exc}"
    return None


def _run() -> int:
    sys.modules["workspace"] = _build_module()
    # The run's PYTHONPATH, first, as python takes it (``-I`` had the guest ignore it, while a python
    # the program started honoured it); read now, after the guest's own imports.
    sys.path[0:0] = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    problem = _apply_env()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    if _setup.get("mirrored"):
        # The cwd's modules as the program's ``open()`` sees them, the mirror's (after the standard
        # library, as before): the workspace's copy lags a sync behind, so a module the program
        # had just written was not found, or imported as it was before (s53). No ``__pycache__``.
        sys.path.append(_CWD)
        sys.dont_write_bytecode = True
    sys.meta_path.append(_WorkspaceFinder())  # the rest, through the workspace (not mirrored here)
    main_module = types.ModuleType("__main__")
    main_module.__file__ = "<exec>"
    sys.argv = ["<exec>"]  # the program's name, as for a script (argparse's usage said guest.py)
    sys.modules["__main__"] = main_module
    try:
        _remember_source("<exec>", _setup["source"])
        exec(compile(_setup["source"], "<exec>", "exec"), main_module.__dict__)
        value = None
        entry = main_module.__dict__.get("main")
        if callable(entry):
            value = entry(_setup.get("input"))
            if isinstance(value, types.CoroutineType):  # ``async def main``: its value, awaited
                import asyncio

                value = asyncio.run(value)
        if value is not None:
            import json  # only for a value: json pulls in re (3 ms)

            try:
                # As JSON has it: keys strings ({1: 'a'} crossed as an int key the host refused, and
                # the run failed as if the program broke the channel), tuples lists.
                value = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                print(f"main() returned a value that is not JSON-able: {exc}", file=sys.stderr)
                return 1
            problem = _value_problem(value)
            if problem is not None:
                print(f"main() returned a value {problem}", file=sys.stderr)
                return 1
    except SystemExit as exc:
        code = exc.code
        if code is not None and not isinstance(code, int):  # ``sys.exit("message")``: as python does
            print(code, file=sys.stderr)
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:
        import traceback

        # From the program's first frame on, as python prints it for a script (not this file's _run),
        # its last ``sys.tracebacklimit`` entries (1000 unless set; 0: none) as python's printer takes
        # them: all of a RecursionError's million frames (``sys.setrecursionlimit(10**6)``) took the
        # guest 15-20 s of CPU to print (python: 2 s in all), the run timed out instead of failing.
        tb = exc.__traceback__
        limit = getattr(sys, "tracebacklimit", 1000)
        last = -limit if isinstance(limit, int) and limit > 0 else 0 if isinstance(limit, int) else -1000
        traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None, limit=last)
        # Python ends a script an uncaught KeyboardInterrupt stopped as SIGINT would: 130 in a shell.
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    if _getpid() != _PID:  # a child the program forked (``os.fork()``) that went on to its end
        return 0
    try:
        _exchange("__result__", {"value": value})
    except OSError as exc:  # the host closed the channel (after a frame it refused)
        print(f"the result could not be sent: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Everything above ran before the run arrived (for a guest started ahead, before it was needed).
    # The guest's own objects are left out of every collection from here on: the program's, and the
    # last one at its end (that end took 3.5 ms after the result, 2.0 with this; ``os._exit``: 0.8).
    gc.freeze()
    _setup = _channel.recv_setup()
    _channel.limits.update(_setup["limits"])
    os.environ.update(_setup.get("environ") or {})  # what the interpreter must not read as it starts
    _CWD: str = _setup["cwd"]
    if _setup.get("exec_id"):  # started ahead in a live sandbox: the run it serves, for its children
        os.environ["COMPUTER_EXEC_ID"] = _setup["exec_id"]
    if _setup.get("chdir"):  # the mirrored workspace directory: open() and os see workspace files
        try:
            os.chdir(_setup["chdir"])
        except OSError:  # a cwd the workspace does not have (yet): its calls still resolve from it
            pass
    # A crash in C (a segfault through ctypes, an extension's abort) says where the program was, on
    # stderr, as ``python -X faulthandler`` does: without it such a run ended with 139 and nothing else.
    import faulthandler

    faulthandler.enable()
    if _setup.get("leftovers"):  # a sandbox of its own: its end names what the program left running
        import _guest_leftovers

        _guest_leftovers.report_at_exit(_setup["leftovers"], _PID)
    status = _run()
    # Python's own end of a script, not ``os._exit``: it waits for the program's non-daemon threads,
    # runs its ``atexit`` functions (multiprocessing's ends the pool workers it left), flushes the
    # files it left open (``f = open(...); f.write(...)``) and stdout, whatever the program made of
    # it (closed, None). ``os._exit`` here lost all of that.
    raise SystemExit(status)  # not sys.exit: the program may have replaced it
