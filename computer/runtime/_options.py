"""Output limits, where saved logs go and how many stay, and a run's environment checked: the
runtime's options."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..storage.paths import canonical
from ._held_links import is_utf8
from ._output_dir import DIRECTORY, fs_caller, planted

__all__ = [
    "BACKGROUND_SUFFIX",
    "DEFAULT_OUTPUT",
    "ENV_MAX_BYTES",
    "ENV_MAX_STRING",
    "ENV_MAX_VARIABLES",
    "OutputOptions",
    "check_env",
    "check_input",
    "check_source",
    "prune_logs",
]

# The largest environment a run takes (``check_env``). Decision: bash, which runs every shell command,
# makes the environment of the first program it starts in time that grows with the square of the
# variables (its ``vlist_add`` looks for each name in the list made so far): ~1.3 s of CPU at 20,000,
# 5.6 s at 40,000, again in every bash a command starts that starts a program. Past the count the run
# is refused with the reason rather than left to take that unsaid. The bytes are the kernel's: an
# ``execve`` takes at most ~2 MiB of arguments and environment together (a quarter of an 8 MiB stack),
# and one ``NAME=value`` string of at most 128 KiB with its NUL (``MAX_ARG_STRLEN``); past them the
# program never started ("Argument list too long", 126 or 127, said twice per call).
ENV_MAX_VARIABLES = 20_000
ENV_MAX_BYTES = 1024 * 1024  # every ``NAME=value`` with its NUL, in UTF-8 (leaves room for the command)
ENV_MAX_STRING = 128 * 1024  # one ``NAME=value`` with its NUL

# How a live sandbox's background log is named (``<exec id>.background.log``, ``_live_jobs``).
BACKGROUND_SUFFIX = ".background.log"


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Per-stream output limits (SPEC section 6).

    Each stream keeps its last ``max_lines`` lines or ``max_bytes`` bytes, whichever is hit first;
    a stream that goes over is saved whole under ``dir`` and the newest ``keep`` logs are kept.
    ``enabled=False`` (``output=False``) keeps everything in memory and saves nothing.
    """

    max_lines: int = 2000
    max_bytes: int = 64 * 1024
    dir: str = "/.computer/output"
    keep: int = 50
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.max_lines < 1 or self.max_bytes < 1:
            raise ValueError("output max_lines and max_bytes must be at least 1")
        if self.keep < 0:
            raise ValueError("output keep must be >= 0")
        object.__setattr__(self, "dir", canonical(self.dir))

    @classmethod
    def resolve(cls, value: Any, base: OutputOptions | None = None) -> OutputOptions:
        """Build options from ``None`` (the base), ``False``, a dict of overrides or an instance."""
        base = base or DEFAULT_OUTPUT
        if value is None or value is True:
            return base
        if value is False:
            return dataclasses.replace(base, enabled=False)
        if isinstance(value, OutputOptions):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {"max_lines", "max_bytes", "dir", "keep", "enabled"}
            if unknown:
                raise ValueError(f"unknown output options: {', '.join(sorted(unknown))}")
            return dataclasses.replace(base, **value)
        raise ValueError(f"output must be None, False, a dict or OutputOptions, not {type(value).__name__}")


DEFAULT_OUTPUT = OutputOptions()


async def prune_logs(fs: Any, options: OutputOptions, held: Callable[[], Awaitable[set[str] | None]]) -> None:
    """Keep only the newest ``options.keep`` logs (``*.log``) in ``options.dir``. A background log that
    ``held`` names (a running process of the workspace's live sandbox still prints into it:
    ``ProcessInfo.log``) is neither removed nor counted; ``held`` is asked only when a background log
    would go, and when it cannot tell (None) no background log goes. A server's log was removed after
    50 runs whose output was saved, while ``processes()`` still named it. Nothing is listed or removed
    unless ``options.dir`` is a directory of its own, looked at again after ``held`` (the store's
    calls run without a pause between that look and the removals): a link a program put there led
    the removals to the user's own ``*.log`` files where it pointed."""
    call = fs_caller(fs)
    if await planted(call, options.dir) != DIRECTORY:  # the next saved log moves it aside
        return
    entries = await fs.readdir(options.dir)
    logs = sorted(
        (e for e in entries if e.is_file and e.name.endswith(".log")), key=lambda e: (e.mtime, e.name)
    )
    root = options.dir.rstrip("/")
    if any(e.name.endswith(BACKGROUND_SUFFIX) for e in logs[: max(0, len(logs) - options.keep)]):
        names = await held()
        if await planted(call, options.dir) != DIRECTORY:  # replaced meanwhile
            return
        logs = [
            e
            for e in logs
            if not e.name.endswith(BACKGROUND_SUFFIX)
            or (names is not None and f"{root}/{e.name}" not in names)
        ]
    for entry in logs[: max(0, len(logs) - options.keep)]:
        with contextlib.suppress(FileNotFoundError):
            await fs.rm(f"{root}/{entry.name}")


def check_env(env: Any) -> None:
    """Refuse an environment no process can have, before anything starts: names non-empty strings
    without ``=`` or NUL, values strings without NUL (``ValueError``; ``TypeError`` for another type),
    within :data:`ENV_MAX_VARIABLES`, :data:`ENV_MAX_STRING` and :data:`ENV_MAX_BYTES`.
    Such an ``env`` reached a live sandbox's init, which could not spawn the command and said nothing:
    the run never returned, and with a timeout the sandbox was ended with its background processes."""
    if env is None:
        return
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of str to str, not {type(env).__name__}")
    if len(env) > ENV_MAX_VARIABLES:
        raise ValueError(
            f"env has {len(env):,} variables: at most {ENV_MAX_VARIABLES:,} are taken (bash takes time "
            "growing with the square of the count to start a program: ~1.3 s of CPU at 20,000, 5.6 s at "
            "40,000); nothing ran"
        )
    total = 0
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"env must map str to str: {name!r}: {value!r}")
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"invalid environment variable name {name!r}: empty, or with '=' or NUL")
        if "\0" in value:
            raise ValueError(f"invalid value of environment variable {name!r}: it holds a NUL")
        if not is_utf8(name) or not is_utf8(value):
            # A lone surrogate (a model's text cut inside a pair) failed the run at its start with a bare
            # "UnicodeEncodeError: ... in position 289" of the backend's own encoding.
            what = "environment variable name" if not is_utf8(name) else "value of environment variable"
            raise ValueError(f"invalid {what} {name!r}: not UTF-8 text (it holds a lone surrogate)")
        size = _utf8_len(name) + _utf8_len(value) + 2  # "=" and the NUL
        if size > ENV_MAX_STRING:
            raise ValueError(
                f"environment variable {name!r} is {size:,} bytes as NAME=value: the kernel takes at most "
                f"{ENV_MAX_STRING:,} in one (MAX_ARG_STRLEN, with its NUL); nothing ran"
            )
        total += size
    if total > ENV_MAX_BYTES:
        raise ValueError(
            f"env is {total:,} bytes (each NAME=value with its NUL): at most {ENV_MAX_BYTES:,} are taken "
            "(the kernel takes ~2 MiB of a program's arguments and environment together); nothing ran"
        )


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def check_source(source: str, protocol: str, cwd: str | None = None) -> None:
    """Refuse a program no backend runs as sent (``ValueError``): a command or ``cwd`` that is not UTF-8
    (a lone surrogate failed the run with a bare ``UnicodeEncodeError``), and a NUL in a shell command, which
    bash drops: ``echo a<NUL>b`` ran as ``echo ab`` and answered "completed". A module backend's
    own compiler names a NUL in its source (Python: ``SyntaxError``), so only ``command`` backends
    are checked for it."""
    if not is_utf8(source):
        raise ValueError("the command is not UTF-8 text: it holds a lone surrogate")
    if cwd is not None and not is_utf8(cwd):
        raise ValueError(f"cwd {cwd!r} is not UTF-8 text: it holds a lone surrogate")
    if protocol == "command" and "\0" in source:
        raise ValueError(
            f"the command holds a NUL byte (at character {source.index(chr(0))}), which a shell drops: "
            "nothing ran; remove it"
        )


def check_input(value: Any) -> None:
    """Refuse an ``input`` a callable backend cannot hand to ``main`` (``ValueError``): not JSON-able
    (NaN too), or not sendable (an integer past 64 bits failed the run with a bare ``OverflowError``)."""
    if value is None:
        return
    import json

    import msgpack

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"input is not JSON-able: {exc}") from None
    try:
        msgpack.packb(value, use_bin_type=True)
    except OverflowError:
        raise ValueError("input holds an integer past 64 bits: send it as a string") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"input cannot be sent: {exc}") from None
