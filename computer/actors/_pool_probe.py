"""A dispatcher's probe of a silent worker: ``watched`` awaits a worker's answer and probes the worker
while it keeps the call waiting.

A worker call (a run's next item, ``end_sandbox``'s end) that has waited :data:`PROBE_AFTER` seconds
without an answer makes the dispatcher probe the worker (``PoolWorker.probe``, on its own concurrency
group :data:`~computer.actors._pool_registry.PROBE_GROUP`: it answers within milliseconds while the
worker's loop is busy, a big end's pull included); a worker that does not answer the probe within
:data:`PROBE_TIMEOUT` is stopped (SIGSTOP) or wedged, and the call raises :class:`WorkerSilent`: the
caller treats the worker as dead for that call. Ray has no bound of its own: a run sent to a stopped
worker waited its timeout plus ~17-22 s, ``end_sandbox`` and the hibernation's ``close_workspace``
forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from ._pool_registry import PROBE_GROUP

__all__ = ["PROBE_AFTER", "PROBE_TIMEOUT", "WorkerSilent", "answer_within", "probe", "watched"]

PROBE_AFTER = 3.0  # seconds a worker call waits before the worker is probed (again)
PROBE_TIMEOUT = 5.0  # seconds a probed worker has to answer


class WorkerSilent(Exception):
    """A worker did not answer a liveness probe while a call waited on it (stopped or wedged)."""


async def answer_within(ref: Any, seconds: float) -> Any:
    """The answer to the liveness call ``ref`` (an ``ObjectRef``) within ``seconds``
    (``TimeoutError`` past it). One given up (timed out, or its caller cancelled) is cancelled in Ray:
    the await stops, the task does not, and a stopped or wedged process ran every call it had been
    sent once it went on (Ray cannot reach a stopped process either: pending until it goes on)."""
    import ray

    try:
        async with asyncio.timeout(seconds):
            return await ref
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(Exception):  # finished meanwhile, or its actor is gone
            ray.cancel(ref)
        raise


async def probe(handle: Any) -> str | None:
    """None when the worker answers a liveness probe within :data:`PROBE_TIMEOUT`, else why not
    (a probe given up is cancelled: :func:`answer_within`). A worker found dead by Ray is left to the
    call that waits on it (it fails on its own)."""
    try:
        await answer_within(handle.probe.options(concurrency_group=PROBE_GROUP).remote(), PROBE_TIMEOUT)
    except TimeoutError:
        return f"no answer to a liveness probe within {PROBE_TIMEOUT:g} s: stopped or wedged"
    except Exception:
        return None  # an answer of Ray's (the worker died)
    return None


async def watched(call: Any, handle_of: Callable[[], Any]) -> Any:
    """Await ``call`` (a worker's answer), probing the worker (``handle_of()``, looked up each time:
    None, no longer known, stops the probing) every :data:`PROBE_AFTER` seconds it stays silent;
    :class:`WorkerSilent` when a probe gets no answer."""
    task = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PROBE_AFTER)
            if done:
                return task.result()
            handle = handle_of()
            if handle is None:
                return await task
            why = await probe(handle)
            if task.done():
                return task.result()
            if why is not None:
                raise WorkerSilent(why)
    finally:
        if not task.done():
            task.cancel()
