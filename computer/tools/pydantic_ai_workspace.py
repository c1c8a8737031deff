"""pydantic-ai workspace backend: a computer workspace as ``pydantic_ai.workspaces.WorkspaceBackend``.

::

    backend = ComputerWorkspaceBackend(workspace)  # a computer.Workspace or a get_workspace client
    agent = Agent(model, capabilities=[ComputerWorkspace(workspace)])  # or run(..., workspace=backend)

Tools and hooks then reach the workspace as pydantic-ai's ``ctx.workspace``. Paths: pydantic-ai resolves a
relative path against ``working_dir()``, which is ``/workspace`` (the shell backend's mount root), and
hands the backend absolute paths; those are the workspace's own absolute paths, unchanged, so
``notes.md`` is ``/workspace/notes.md`` for file operations and for commands alike. Paths outside the
mount root are still the workspace's files, but commands do not see them (the sandbox has its own).

Commands run through ``workspace.runtime.exec`` on the first command-protocol backend (bash in the
sandbox): an argv is joined with shell quoting. A run's file changes reach the workspace when it ends,
and nothing it starts outlives it. A stream longer than the runtime's in-memory tail is read back whole
from its saved log, up to ``max_output_bytes`` per stream, beyond which ``WorkspaceOutputLimitError``.
File operations bypass POSIX permission bits (the workspace store has no users). ``/.computer`` is
read-only, as for the tools: ``write_bytes``, ``make_dir`` and ``remove`` refuse a change at or under
it (or of ``/``) with ``PermissionError``, checked where the path really leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import posixpath
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import Authority
from pydantic_ai.tools import RunContext
from pydantic_ai.workspaces import (
    AuthorityWorkspace,
    CommandResult,
    FileEntry,
    ReadOnlyWorkspace,
    SupportsCommands,
    SupportsFilesystem,
    SupportsRealpath,
    Workspace,
    WorkspaceBackend,
    WorkspaceCommand,
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceRef,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)

from ..runtime import SYSTEM_DIR, TIMEOUT_EXIT_CODE, refuse_protected_change
from ..runtime.types import ExecResult
from ..storage.paths import MAX_SYMLINKS, canonical, is_within, join, split
from ..surface import ExecHandleSurface, FileSystemSurface, RuntimeSurface, WorkspaceSurface
from .workspace_store import system_refused

__all__ = ["PROVIDER", "ComputerWorkspace", "ComputerWorkspaceBackend"]

PROVIDER = "computer"
"""``WorkspaceRef.provider`` of every ref this backend records; ``WorkspaceRef.id`` is the workspace's id."""

DEFAULT_WORKING_DIR = "/workspace"
DEFAULT_MAX_OUTPUT_BYTES = 10 * 1024 * 1024
# Read-only here as for the tools (``WorkspaceFileStore``): pydantic-ai's file tools rewrote a run's
# journal record (which ``get_exec`` trusts after a restart) and removed ``/.computer`` whole.
_SYSTEM = {SYSTEM_DIR: system_refused}
_KILL_WAIT = 10.0


class ComputerWorkspaceBackend(WorkspaceBackend, SupportsFilesystem, SupportsCommands, SupportsRealpath):
    """pydantic-ai's backend protocols over any computer workspace surface.

    Built without I/O. The first operation creates ``working_dir`` when missing and records the ref
    ``WorkspaceRef(provider="computer", id=workspace.id)``; a ``ref`` naming another workspace is refused.
    ``backend`` picks the exec backend for commands (default: the first with the command protocol);
    ``env`` is layered under each command's own.
    """

    def __init__(
        self,
        workspace: WorkspaceSurface,
        *,
        ref: WorkspaceRef | None = None,
        working_dir: str = DEFAULT_WORKING_DIR,
        backend: str | None = None,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        if not posixpath.isabs(working_dir):
            raise ValueError(f"working_dir must be absolute, got {working_dir!r}")
        if max_output_bytes < 1:
            raise ValueError("max_output_bytes must be at least 1")
        if ref is not None and ref != ref_of(workspace):
            raise ValueError(f"{ref!r} names another environment than workspace {workspace.id!r}")
        self.workspace = workspace
        self._fs: FileSystemSurface = workspace.fs
        self._runtime: RuntimeSurface = workspace.runtime
        self._ref = ref
        self._working_dir = posixpath.normpath(working_dir)
        self._backend_id = backend
        self._env = dict(env or {})
        self._max_output_bytes = max_output_bytes
        self._ready = False
        self._lock = asyncio.Lock()
        self._kills: set[asyncio.Future[None]] = set()  # kills still running after their caller left

    @property
    def ref(self) -> WorkspaceRef | None:
        return self._ref

    async def working_dir(self) -> str:
        return await self._ensure()

    async def _ensure(self) -> str:
        """Attach on first use (once, even when first operations race); raise if the workspace is gone."""
        self._raise_if_closed()
        if self._ready:
            return self._working_dir
        async with self._lock:
            if not self._ready:
                # Recorded before the setup below, which can fail; the workspace already exists.
                self._ref = self._ref or ref_of(self.workspace)
                try:
                    await self._fs.mkdir(self._working_dir, recursive=True)
                except Exception as exc:
                    self._raise_if_closed(exc)
                    raise
                self._ready = True
        return self._working_dir

    def _raise_if_closed(self, cause: BaseException | None = None) -> None:
        # Both the owner and a client mark themselves closed; a closed one never comes back.
        if getattr(self.workspace, "_closed", False):
            raise WorkspaceUnavailableError(f"workspace {self.workspace.id!r} is closed") from cause

    # -- filesystem ------------------------------------------------------------------------------

    async def read_bytes(self, path: str) -> bytes:
        await self._ensure()
        return await self._fs.read_file(path)

    async def write_bytes(self, path: str, data: bytes) -> None:
        await self._ensure()
        fs = self._fs
        await refuse_protected_change(fs, "write_file", {"path": path}, _SYSTEM)
        try:
            await fs.write_file(path, data)
        except FileNotFoundError:
            # Parents are created only after a miss, so a failed write leaves no new directories behind.
            await fs.mkdir(posixpath.dirname(posixpath.normpath(path)), recursive=True)
            await fs.write_file(path, data)

    async def stat(self, path: str) -> FileEntry:
        await self._ensure()
        st = await self._fs.stat(path)
        name = posixpath.basename(posixpath.normpath(path))
        return FileEntry(name=name, path=path, is_dir=st.is_directory, size=st.size if st.is_file else None)

    async def list_dir(self, path: str) -> Sequence[FileEntry]:
        await self._ensure()
        fs = self._fs
        entries: list[FileEntry] = []
        for entry in await fs.readdir(path):
            child = posixpath.join(path, entry.name)
            is_dir, size = entry.is_directory, entry.size if entry.is_file else None
            if entry.is_symlink:
                # FileEntry follows a link to its target; a dangling or looping link is not a directory.
                try:
                    target = await fs.stat(child)
                except OSError:
                    is_dir, size = False, None
                else:
                    is_dir, size = target.is_directory, target.size if target.is_file else None
            entries.append(FileEntry(name=entry.name, path=child, is_dir=is_dir, size=size))
        return entries

    async def make_dir(self, path: str) -> None:
        await self._ensure()
        await refuse_protected_change(self._fs, "mkdir", {"path": path}, _SYSTEM)
        await self._fs.mkdir(path, recursive=True)

    async def remove(self, path: str) -> None:
        working_dir = await self._ensure()
        # Compared as the filesystem will see it: canonical (`//workspace` is `/workspace`), every parent
        # link resolved; the last segment is not followed, as rm removes a link, not its target.
        spelled = canonical(path if posixpath.isabs(path) else posixpath.join(working_dir, path))
        parent, name = split(spelled)
        target = join(await self.realpath(parent), name) if name else "/"
        for protected in {working_dir, await self.realpath(working_dir)}:
            if is_within(protected, target):
                raise ValueError(
                    f"refusing to remove {path!r}: it is the working directory or one of its ancestors"
                )
        await refuse_protected_change(self._fs, "rm", {"path": path}, _SYSTEM)
        await self._fs.rm(path, recursive=True)

    async def exists(self, path: str) -> bool:
        await self._ensure()
        return await self._fs.exists(path)

    async def realpath(self, path: str) -> str:
        """Resolve every symlink like ``os.path.realpath(path, strict=False)``, one ``readlink`` per segment."""
        await self._ensure()
        if not posixpath.isabs(path):
            path = posixpath.join(self._working_dir, path)
        fs = self._fs
        resolved = "/"
        pending = list(reversed(path.split("/")))  # a stack: the next segment is last
        followed = 0
        missing = False
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                resolved = posixpath.dirname(resolved)
                continue
            candidate = posixpath.join(resolved, name)
            if missing:
                resolved = candidate  # below a missing segment nothing can be a link
                continue
            try:
                target = await fs.readlink(candidate)
            except FileNotFoundError:
                missing = True
                resolved = candidate
                continue
            except (ValueError, NotADirectoryError):  # EINVAL: a real file or directory
                resolved = candidate
                continue
            followed += 1
            if followed > MAX_SYMLINKS:  # a link loop ends in ELOOP, not a hang
                raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
            if target.startswith("/"):
                resolved = "/"
            # `..` in the target climbs from the link's directory, which `resolved` still is.
            pending.extend(reversed(target.split("/")))
        return resolved

    # -- commands --------------------------------------------------------------------------------

    async def run(
        self,
        command: WorkspaceCommand,
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's deadline, as the protocol names it
    ) -> CommandResult:
        if isinstance(command, str) != shell:
            raise TypeError("a string command requires shell=True, and an argv sequence shell=False")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError("timeout must be a positive finite number or None")
        if isinstance(command, str):
            source = command
        else:
            if not command:
                raise ValueError("command must not be empty")
            source = shlex.join(command)
        working_dir = await self._ensure()
        runtime = self._runtime
        backend = self._command_backend()
        started = time.monotonic()
        try:
            handle = await runtime.exec(
                source, backend=backend, cwd=working_dir, env={**self._env, **(env or {})}, timeout=timeout
            )
        except Exception as exc:
            self._raise_if_closed(exc)
            raise
        try:
            result = await handle.result()
        except BaseException:
            await self._stop(handle)
            raise
        self._raise_if_closed()
        if result.exit_code is None:
            raise WorkspaceError(
                f"the command did not run to an exit status: {result.error or result.status}"
            )
        if (
            timeout is not None
            and result.status == "cancelled"
            and result.exit_code == TIMEOUT_EXIT_CODE
            and time.monotonic() - started >= timeout
        ):
            raise WorkspaceTimeoutError(
                f"command timed out after {timeout:g} s", stdout=result.stdout, stderr=result.stderr
            )
        stdout, stderr = await self._complete_output(result)
        return CommandResult(exit_code=result.exit_code, stdout=stdout, stderr=stderr)

    async def _stop(self, handle: ExecHandleSurface) -> None:
        """Cancelled (or the wait failed): end the command's whole tree, best effort and bounded.

        The kill runs as its own task, so a second cancellation cannot interrupt it; the caller waits
        for it at most ``_KILL_WAIT`` seconds, then the task finishes in the background.
        """
        kill = asyncio.ensure_future(handle.kill())
        self._kills.add(kill)
        kill.add_done_callback(self._kills.discard)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(kill), _KILL_WAIT)

    def _command_backend(self) -> str:
        if self._backend_id is not None:
            return self._backend_id
        infos = self._runtime.backends()
        for info in infos:
            if info.protocol == "command":
                return info.id
        configured = ", ".join(info.id for info in infos) or "none"
        raise UserError(
            "This computer workspace has no command-protocol exec backend (configured: "
            f"{configured}); add one, e.g. Workspace(backends=[ShellBackend()])."
        )

    async def _complete_output(self, result: ExecResult) -> tuple[str, str]:
        """Each stream in full: a stream cut to the runtime's tail is read back from its saved log."""
        texts = {"stdout": result.stdout, "stderr": result.stderr}
        over = False
        for name, cut in result.truncated.items():
            if cut.status == "saved" and cut.path is not None and cut.total_bytes <= self._max_output_bytes:
                texts[name] = (await self._read_log(cut.path)).decode("utf-8", "replace")
            else:
                over = True
        if not over:
            return texts["stdout"], texts["stderr"]
        beginnings = {"stdout": "", "stderr": ""}
        for name, cut in result.truncated.items():
            if cut.status == "saved" and cut.path is not None:
                data = await self._read_log(cut.path, self._max_output_bytes)
                beginnings[name] = data.decode("utf-8", "replace")
            # an unsaved stream only has its tail, not its beginning: leave it empty
        raise WorkspaceOutputLimitError(
            f"the command's output exceeded {self._max_output_bytes} bytes per stream",
            limit=self._max_output_bytes,
            stdout=beginnings["stdout"] if "stdout" in result.truncated else texts["stdout"],
            stderr=beginnings["stderr"] if "stderr" in result.truncated else texts["stderr"],
        )

    async def _read_log(self, path: str, length: int | None = None) -> bytes:
        try:
            return await self._fs.read_file(path, length=length)
        except OSError as exc:
            # Not a path error of the caller's: the runtime's saved log is gone (pruned to the newest 50).
            raise WorkspaceError(f"the command's full output log {path} could not be read: {exc}") from exc

    def __repr__(self) -> str:
        return f"ComputerWorkspaceBackend(workspace={self.workspace.id!r}, working_dir={self._working_dir!r})"


def ref_of(workspace: WorkspaceSurface) -> WorkspaceRef:
    """The ``WorkspaceRef`` naming ``workspace`` (stable in every process, like its id)."""
    return WorkspaceRef(provider=PROVIDER, id=workspace.id)


@dataclass
class ComputerWorkspace(AbstractCapability[Any]):
    """Gives runs ``workspace`` as their pydantic-ai workspace (``ctx.workspace``).

    A ref from history or ``workspace=`` that names another environment is declined (``None``), so it
    never redirects a run to a different workspace. ``read_only`` wraps it in ``ReadOnlyWorkspace``;
    ``authority`` and ``path_authority`` (as on pydantic-ai's ``LocalWorkspace``: the level the model
    gets the files' text with, ``"none"`` for files nobody on the application's side wrote, longest path
    wins, paths relative to ``working_dir``) in ``AuthorityWorkspace``.
    """

    workspace: Any
    _: KW_ONLY
    read_only: bool = False
    authority: Authority = "operator"
    path_authority: Mapping[str, Authority] | None = None
    working_dir: str = DEFAULT_WORKING_DIR
    backend: str | None = None
    env: Mapping[str, str] | None = None
    id: str | None = "computer_workspace"

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[Any]]) -> AbstractCapability[Any]:
        # A later configuration replaces an earlier one whole (its env never carries over).
        return capabilities[-1]

    def get_workspace(self, ctx: RunContext[Any], *, ref: WorkspaceRef | None) -> WorkspaceBackend | None:
        if ref is not None and ref != ref_of(self.workspace):
            return None
        backend: WorkspaceBackend = ComputerWorkspaceBackend(
            self.workspace, ref=ref, working_dir=self.working_dir, backend=self.backend, env=self.env
        )
        if self.read_only:
            backend = ReadOnlyWorkspace(Workspace(backend))
        if self.authority != "operator" or self.path_authority:
            backend = AuthorityWorkspace(
                Workspace(backend), authority=self.authority, path_authority=self.path_authority
            )
        return backend
