"""A dispatcher's calls about a workspace's live sandbox (issue 18, SPEC section 10): ``processes``,
``kill_process`` and ``end_sandbox``, asked of the worker the workspace is pinned to (the worker
answers them in :mod:`~computer.actors._pool_live`).

A worker that died took the sandbox and its processes with it; one that does not answer a probe
(:mod:`~computer.actors._pool_probe`: stopped, wedged) holds them out of reach. Either way the
workspace's next run says so (:mod:`~computer.actors._pool_notices`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ._errors import first_line
from ._pool_notices import SILENT_SANDBOX, Notices
from ._pool_pins import Pins
from ._pool_probe import PROBE_TIMEOUT, WorkerSilent

__all__ = ["PinnedSandboxes"]

log = logging.getLogger("computer.actors.pools")


class PinnedSandboxes:
    """The live sandbox calls of one dispatcher (the pool ``backend``).

    ``handle_of(name)``: the worker's handle (None when the dispatcher knows no such worker);
    ``watched(call, name)``: ``call`` awaited while the worker ``name`` is probed when silent;
    ``bound``: seconds a worker has to answer ``processes``/``kill_process``.
    """

    def __init__(
        self,
        backend: str,
        pins: Pins,
        notices: Notices,
        handle_of: Callable[[str], Awaitable[Any]],
        watched: Callable[[Any, str], Awaitable[Any]],
        lost_there: Callable[[str, str], Awaitable[str | None]],
    ) -> None:
        self.backend = backend
        self._pins = pins
        self._notices = notices
        self._handle_of = handle_of
        self._watched = watched
        self._lost_there = lost_there

    async def _pinned_handle(self, workspace_id: str) -> Any:
        name = self._pins.get(workspace_id)
        return await self._handle_of(name) if name is not None else None

    async def processes(self, workspace_id: str, bound: float) -> list[Any]:
        """The processes of the workspace's live sandbox; [] without one (or with its worker gone)."""
        from ray.exceptions import RayTaskError

        handle = await self._pinned_handle(workspace_id)
        if handle is None:
            return []
        try:
            async with asyncio.timeout(bound):
                call = handle.live_processes.remote(workspace_id)
                return list(await self._watched(call, self._pins.get(workspace_id) or ""))
        except (TimeoutError, WorkerSilent) as exc:
            raise self._unanswered(workspace_id, exc, bound) from None
        except RayTaskError as exc:  # the sandbox's own failure (as embedded), not "no processes"
            raise (exc.cause if isinstance(exc.cause, Exception) else RuntimeError(str(exc))) from None
        except Exception:  # the worker is gone: so is its sandbox
            # The pin stays: the next run finds its worker dead and says the sandbox and its
            # processes were lost (LOST_SANDBOX). Dropped here, a "is my server up?" look first
            # made that notice vanish.
            return []

    async def kill_process(self, workspace_id: str, pid: int, bound: float) -> None:
        """SIGKILL ``pid`` in the workspace's live sandbox, on its worker. A worker found dead or
        restarting took the sandbox and its processes with it: ``ProcessLookupError`` saying so, and
        the pin stays (the next run says the sandbox was lost). Before, Ray's own error came through
        ("The actor ... is unavailable ... may or may not have been executed"), which ``computer
        kill`` and the ``kill`` tool did not expect."""
        from ray.exceptions import RayActorError, RayTaskError, WorkerCrashedError

        try:
            handle = await self._pinned_handle(workspace_id)
            if handle is None:
                raise ProcessLookupError(
                    f"no process {pid}: the workspace has no live {self.backend} sandbox"
                )
            async with asyncio.timeout(bound):
                await self._watched(
                    handle.live_kill.remote(workspace_id, pid), self._pins.get(workspace_id) or ""
                )
        except (TimeoutError, WorkerSilent) as exc:
            raise self._unanswered(workspace_id, exc, bound) from None
        except RayTaskError as exc:
            cause = exc.cause
            raise (cause if isinstance(cause, OSError) else ProcessLookupError(str(cause))) from None
        except (RayActorError, WorkerCrashedError, ValueError) as exc:  # (ValueError: its name is gone)
            name = self._pins.get(workspace_id) or ""
            if await self._lost_there(name, "") is None:  # retired by the control loop, idle
                raise ProcessLookupError(
                    f"no process {pid}: the workspace's live {self.backend} sandbox ended, idle, when the "
                    f"pool scaled down ({name} was retired)"
                ) from None
            raise ProcessLookupError(
                f"no process {pid}: the exec worker holding the workspace's live {self.backend} sandbox "
                f"died ({name}: {first_line(exc)}); its processes ended with it"
            ) from None

    def _unanswered(self, workspace_id: str, exc: Exception, bound: float) -> TimeoutError:
        within = (
            f"a liveness probe within {PROBE_TIMEOUT:g} s"
            if isinstance(exc, WorkerSilent)
            else f"within {bound:g} s"
        )
        return TimeoutError(
            f"the exec worker holding the workspace's live {self.backend} sandbox "
            f"({self._pins.get(workspace_id)}) did not answer {within} (stopped or wedged)"
        )

    async def end(self, workspace_id: str) -> bool:
        """End the workspace's live sandbox on its worker. A worker that dies under the call (or was
        found dead) took the sandbox with it: True when a sandbox was known there, and its next run
        says so (LOST_SANDBOX: what the processes wrote after the last sync is not kept). Before, that
        gave False and dropped the pin, so nothing ever said the end's pull never came.

        A worker that answers it holds none keeps the pin: it may be a new process, restarted after
        the one holding the sandbox died, which only the next run finds out (``OwnerUnknown``) and
        says; a worker whose sandbox ended on its own (idle) just runs it. Before, the pin was dropped
        and that run, placed anew, said nothing of the processes lost with the worker."""
        from ray.exceptions import RayActorError, RayTaskError, WorkerCrashedError

        name = self._pins.get(workspace_id)
        known = self._pins.known(workspace_id)
        keep = False
        try:
            handle = await self._pinned_handle(workspace_id)
            if handle is None:
                return False
            ended = bool(await self._watched(handle.live_end.remote(workspace_id), name or ""))
            keep = known and not ended
            return ended
        except WorkerSilent as exc:
            # Stopped or wedged: the end's pull (which may legitimately be long: the probe answers
            # meanwhile) never comes. The end stays asked: a worker that resumes ends the sandbox.
            if not known:
                return False
            log.warning(
                "pool %s: %s holding the live sandbox of %s did not answer (%s): the sandbox is given up; what its "
                "processes wrote after their last sync is not in the workspace",
                self.backend,
                name,
                workspace_id,
                exc,
            )
            self._notices.lose(workspace_id, SILENT_SANDBOX.format(why=f"{name}: {exc}"))
            return True
        except (RayActorError, WorkerCrashedError, ValueError) as exc:  # (ValueError: its name is gone)
            if not known or isinstance(exc, RayTaskError):
                return False
            # (None: the control loop retired that worker, which held no live sandbox then: its idle
            # sandbox ended with the drain, nothing lost and nothing to say)
            notice = await self._lost_there(name or "", f"{name}: {first_line(exc)}")
            if notice is None:
                return True
            log.warning(
                "pool %s: %s died ending the live sandbox of %s: %s", self.backend, name, workspace_id, exc
            )
            self._notices.lose(workspace_id, notice)
            return True
        except Exception:  # the worker answered with the sandbox's own failure (``RayTaskError``)
            return False
        finally:
            if not keep:
                self._pins.unpin(workspace_id)
