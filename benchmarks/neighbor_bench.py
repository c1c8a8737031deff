"""One hostile workspace against its neighbours in the same process.

Workspace V (the victim) runs a loop of small live `exec` calls (`echo x > f$i; cat f$i`) while a
task measures the event loop's lag (a 10 ms sleep, how late it wakes). First alone, then while
workspace H, served by the same process, runs one attack at a time for a bounded time. Prints the
victim's exec latency (p50/p99/max, ms) and the loop's lag (p99/max, ms) with ratios against the
alone baseline of the same run, and the longest single step of the loop (``step``: the loop thread's
CPU time in one callback, which other processes' load does not inflate; ``>20``: steps over 20 ms;
``blk``: the longest step spent waiting, over 50 ms and 3x its CPU: a blocking call on the loop, or
the GIL). With ``--stacks`` also where the loop's thread was when it was late (a sampling thread
reading ``sys._current_frames``) and the await each long step stopped at. After each attack: the
process's full garbage collections during it (``gc.callbacks``: count, longest, sum, what they freed)
and the objects the collector then tracks.

    .venv/bin/python benchmarks/neighbor_bench.py                    # every attack
    .venv/bin/python benchmarks/neighbor_bench.py files dirs --stacks
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import statistics
import sys
import threading
import time
import traceback
from typing import Any

import computer
from computer.runtime import PythonBackend, ShellBackend

T = 12  # seconds an attack lasts, at most (the sandbox's own `timeout`)

ATTACKS: dict[str, tuple[str, str]] = {
    # name: (backend, source run in H; foreground unless it sends itself to the background)
    "files": ("shell", f"timeout {T} sh -c 'seq 200000 | sed s/^/f/ | xargs touch'"),
    "dirs": ("shell", f"timeout {T} sh -c 'seq 50000 | sed s/^/d/ | xargs mkdir -p'"),
    "bgtouch": (
        "shell",
        f"timeout {T} bash -c 'while :; do touch t$RANDOM; done' >/dev/null 2>&1 & sleep {T}",
    ),
    "renames": (
        "shell",
        "mkdir -p r && (cd r && seq 5000 | xargs touch) && "
        f"timeout {T} bash -c 'while :; do mv r s; mv s r; done'",
    ),
    # A directory's rename storm over a tree of 20,000 watched directories (each pairing re-keyed every
    # watched path on the shared reader, s67: ``_watch_moves.REKEY_WORK``).
    "dirstorm": (
        "shell",
        "python3 -c \"import os, time\nfor i in range(200):\n os.mkdir('d%d' % i)\n"
        " for j in range(99): os.mkdir('d%d/s%d' % (i, j))\nos.mkdir('a'); time.sleep(1)\n"
        "for _ in range(5000): os.rename('a', 'b'); os.rename('b', 'a')\" && sleep 2",
    ),
    "rmtree": ("shell", "mkdir -p big && (cd big && seq 100000 | xargs touch) && rm -rf big"),
    "sparse": ("shell", "truncate -s 2G sparse && sleep 3 && rm sparse"),
    "dd": (
        "shell",
        f"timeout {T} dd if=/dev/zero of=grow bs=64k count=100000 >/dev/null 2>&1 & sleep {T}; rm -f grow",
    ),
    "links": (
        "shell",
        "touch a && python3 -c \"import os\nfor i in range(10000): os.link('a', 'l%d' % i)\" && sleep 2",
    ),
    "chain": (
        "shell",
        "python3 -c \"import os\nfor i in range(2000): os.mkdir('c'); os.chdir('c')\" ; "
        "ln -s loop1 loop2; ln -s loop2 loop1; sleep 2",
    ),
    "symlinks": (
        "shell",
        "python3 -c \"import os\nfor i in range(30000): os.symlink('t' * 100, 's%d' % i)\" && sleep 2",
    ),
    "forkloop": (
        "shell",
        f"for i in $(seq 40); do (timeout {T} bash -c 'while :; do /bin/echo $RANDOM > f$BASHPID; done' &); done;"
        f" sleep {T}",
    ),
    "flood": ("shell", f"timeout {T} yes"),
    "bgflood": (
        "shell",
        f"for i in $(seq 50); do timeout {T} yes & done; sleep {T}",
    ),
    "noline": ("shell", f"timeout {T} tr -d '\\n' < /dev/zero"),
    "overflow": (
        "shell",
        'python3 -c "import os,time\nend=time.time()+'
        f"{T}\nwhile time.time()<end:\n for i in range(20000): open('o%d' % (i % 50), 'w').close()\"",
    ),
    "forks": (
        "shell",
        f"for i in $(seq 250); do (timeout {T} bash -c 'while :; do echo $RANDOM > p$$; done' &) ; done; sleep {T}",
    ),
    "bigdir": (
        "shell",
        "mkdir big && cd big && python3 -c \"import os\nfor i in range(500000): os.close(os.open('e%d' % i, "
        'os.O_CREAT | os.O_WRONLY))" && sleep 2',
    ),
    "bigdir300": (
        "shell",
        "mkdir big && cd big && python3 -c \"import os\nfor i in range(300000): os.close(os.open('e%d' % i, "
        'os.O_CREAT | os.O_WRONLY))" && sleep 2',
    ),
    "million": (
        "shell",
        "python3 -c \"import os\nfd = os.open('m', os.O_CREAT | os.O_WRONLY)\n"
        "for i in range(10**6): os.write(fd, b'x')\"",
    ),
    "sparses": ("shell", "for i in $(seq 100); do truncate -s 4G s$i; done; sleep 2; rm s*"),
    "grow": (
        "shell",
        f"timeout {T} bash -c 'while :; do head -c 65536 /dev/zero >> g; truncate -s 0 g; done'",
    ),
    "pidloop": (
        "shell",
        f"timeout {T} bash -c 'while :; do for i in $(seq 300); do sleep 0 & done 2>/dev/null; wait; done' 2>/dev/null",
    ),
    "noterm": ("shell", "trap '' TERM; (trap '' TERM; sleep 1000) & sleep 3"),
    "pycalls": (
        "python",
        "import threading, time\nimport workspace\nend = time.time() + "
        f"{T}\ndef go(k):\n    while time.time() < end:\n        workspace.write_file(f'/workspace/w{{k}}', 'x')\n"
        "        workspace.exists(f'/workspace/w{k}')\n"
        "ts = [threading.Thread(target=go, args=(k,)) for k in range(16)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]",
    ),
    "pybig": (
        "python",
        "import os\nimport workspace\nfor i in range(4):\n"
        "    workspace.write_file('/workspace/big', os.urandom(1 << 20) * 60)",
    ),
    "pyfresh": (
        "python",
        "import os\nimport workspace\nfor i in range(4):\n"
        "    workspace.write_file('/workspace/big', os.urandom(60 << 20))",
    ),
    "pyread": (
        "python",
        "import os\nimport workspace\nworkspace.write_file('/workspace/big', os.urandom(60 << 20))\n"
        "for i in range(4):\n    assert len(workspace.read_file('/workspace/big')) == 60 << 20",
    ),
    "pytext": (
        "python",
        "import workspace\nworkspace.write_file('/workspace/t', 'é€😀a' * (6 << 20))\n"
        "for i in range(4):\n    assert len(workspace.read_text('/workspace/t')) == 24 << 20",
    ),
    "pytool": (
        "python",
        "import time\nimport workspace\nend = time.time() + "
        f"{T}\nwhile time.time() < end:\n"
        "    try:\n        workspace.call('agent_tool', token='t', name='n', args={'a': list(range(200000))})\n"
        "    except OSError:\n        pass",
    ),
    "pyresult": (
        "python",
        "def main(input):\n    return list(range(250000))",
    ),
    "pyflood": (
        "python",
        f"import sys, time\nend = time.time() + {T}\nline = 'y' * 100 + '\\n'\n"
        "while time.time() < end:\n    sys.stdout.write(line * 1000)",
    ),
}


def where(handle: asyncio.events.Handle) -> str:
    """The await a task's step stopped at (its coroutine chain, innermost last)."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if not isinstance(task, asyncio.Task):
        args = getattr(handle, "_args", ()) or ()
        task = next((a for a in args if isinstance(a, asyncio.Task)), None)
    if task is None:
        return repr(handle)[:150]
    chain, coro = [], task.get_coro()
    while coro is not None and len(chain) < 12:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            chain.append(f"{frame.f_code.co_filename.split('/')[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return " > ".join(chain[-5:])


class Steps:
    """The loop thread's CPU time in each callback it runs (``Handle._run``): what one step holds the
    loop for, whatever else the machine runs (wall-clock lag counts other processes' CPU too)."""

    def __init__(self) -> None:
        self.longest: list[tuple[float, str]] = []
        self.blocked: list[tuple[float, str]] = []
        self.last_blocked: list[tuple[float, str]] = []
        run = asyncio.events.Handle._run
        steps = self

        def timed(handle: asyncio.events.Handle) -> None:
            t, w = time.thread_time(), time.monotonic()
            run(handle)
            spent, wall = (time.thread_time() - t) * 1000, (time.monotonic() - w) * 1000
            if spent > 20:
                steps.longest.append((spent, where(handle)))
            if wall > 50 and wall > 3 * spent:  # waiting, not computing: a blocking call (or the GIL)
                steps.blocked.append((wall, f"{spent:.0f} ms CPU: {where(handle)}"))

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]

    def take(self) -> tuple[float, int, str]:
        """(longest step in ms of CPU, steps over 20 ms, the longest's callback)"""
        taken, self.longest = self.longest, []
        self.last_blocked, self.blocked = sorted(self.blocked)[-3:], []
        if not taken:
            return 0.0, 0, ""
        most = max(taken)
        return most[0], len(taken), most[1]


STEPS = Steps()


class FullCollections:
    """The process's full (generation 2) garbage collections (``gc.callbacks``): how many, how long
    (wall ms, the longest and the sum), what they freed, and the objects the collector tracks."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.freed = 0
        self.start = 0.0
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self.start = time.perf_counter()
        else:
            self.times.append((time.perf_counter() - self.start) * 1000)
            self.freed += info["collected"]

    def take(self) -> str:
        times, freed = self.times, self.freed
        self.times, self.freed = [], 0
        return f"gen2 {len(times)}x max {max(times, default=0):.0f} sum {sum(times):.0f} ms freed {freed}"


GC = FullCollections()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


class Sampler:
    """Where the loop's thread is while the loop is late (> 100 ms since its last heartbeat)."""

    def __init__(self) -> None:
        self.beat = time.monotonic()
        self.loop_thread = threading.get_ident()
        self.seen: collections.Counter[str] = collections.Counter()
        self.stop = False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while not self.stop:
            time.sleep(0.02)
            if time.monotonic() - self.beat > 0.1:
                me = threading.get_ident()
                for ident, frame in sys._current_frames().items():
                    if ident == me:
                        continue
                    stack = traceback.extract_stack(frame)[-5:]
                    idle = ("_worker", "_do_waitpid", "_reap", "wait", "poll", "select", "_read_ahead")
                    if ident != self.loop_thread and stack[-1].name in idle:
                        continue
                    who = "loop" if ident == self.loop_thread else "thread"
                    self.seen[
                        who
                        + ": "
                        + " < ".join(
                            f"{f.filename.split('/')[-1]}:{f.lineno} {f.name}" for f in reversed(stack)
                        )
                    ] += 1


async def heartbeat(sampler: Sampler | None, lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(0.01)
        now = time.monotonic()
        lags.append((now - t - 0.01) * 1000)
        if sampler:
            sampler.beat = now


async def victim(ws: computer.Workspace, lat: list[float], stop: asyncio.Event, errors: list[str]) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        t = time.monotonic()
        r = await (await ws.runtime.exec(f"echo x > f{i % 20}; cat f{i % 20}")).result()
        lat.append((time.monotonic() - t) * 1000)
        if r.stdout != "x\n":
            errors.append(f"{r.status} {r.error} {r.stdout[:80]!r}")
        await asyncio.sleep(0.005)


async def attack(h: computer.Workspace, kind: str, source: str) -> str:
    """Run one attack in H; what came of it."""
    t = time.monotonic()
    r = await (await h.runtime.exec(source, backend=kind, timeout=T + 20)).result()
    last = r.stderr.strip().splitlines()[-1:]
    said = (r.error or (last[0] if last else ""))[:90]
    return f"{r.status} exit {r.exit_code} {time.monotonic() - t:.1f}s {said}"


async def phase(
    v: computer.Workspace, sampler: Sampler | None, attack: Any
) -> tuple[list[float], list[float], list[str]]:
    lat: list[float] = []
    lags: list[float] = []
    errors: list[str] = []
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(heartbeat(sampler, lags, stop)),
        asyncio.create_task(victim(v, lat, stop, errors)),
    ]
    await attack
    stop.set()
    await asyncio.gather(*tasks)
    return lat, lags, errors


async def main(names: list[str], stacks: bool, shared: bool) -> None:
    sampler = Sampler() if stacks else None
    sb, pb = ShellBackend(), PythonBackend()
    v = computer.Workspace(backends=[ShellBackend(), PythonBackend()])
    await v.__aenter__()
    await v.fs.mkdir("/workspace")
    await (await v.runtime.exec("true")).result()
    STEPS.take()
    base = await phase(v, sampler, asyncio.sleep(6))
    base_step = STEPS.take()
    b50, b99 = statistics.median(base[0]), pct(base[0], 0.99)
    lag99 = pct(base[1], 0.99)
    print(
        f"{'attack':10} {'runs':>5} {'p50':>7} {'p99':>7} {'max':>7} {'lag99':>7} {'lagmax':>7} {'step':>6} {'>20':>4} {'blk':>5}"
        "  ratios p50/p99/lag99  H"
    )
    print(
        f"{'alone':10} {len(base[0]):5} {b50:7.1f} {b99:7.1f} {max(base[0]):7.1f} {lag99:7.1f} {max(base[1]):7.1f}"
        f" {base_step[0]:6.1f} {base_step[1]:4} {max(STEPS.last_blocked, default=(0.0, ''))[0]:5.0f}"
    )
    for name in names:
        kind, source = ATTACKS[name]
        h = computer.Workspace(backends=[sb, pb] if shared else [ShellBackend(), PythonBackend()])
        await h.__aenter__()
        await h.fs.mkdir("/workspace")
        await (await h.runtime.exec("true")).result()
        if sampler:
            sampler.seen.clear()

        task = asyncio.ensure_future(attack(h, kind, source))
        STEPS.take()
        GC.take()
        lat, lags, errors = await phase(v, sampler, task)
        step = STEPS.take()
        collections_ = GC.take()
        tracked = len(gc.get_objects())
        said = task.result()
        t = time.monotonic()
        await h.__aexit__(None, None, None)
        close = time.monotonic() - t
        p50, p99 = statistics.median(lat) if lat else float("nan"), pct(lat, 0.99)
        print(
            f"{name:10} {len(lat):5} {p50:7.1f} {p99:7.1f} {max(lat, default=0):7.1f} {pct(lags, 0.99):7.1f}"
            f" {max(lags):7.1f} {step[0]:6.1f} {step[1]:4} {max(STEPS.last_blocked, default=(0.0, ''))[0]:5.0f}  {p50 / b50:5.1f} {p99 / b99:5.1f} {pct(lags, 0.99) / lag99:5.1f}  {said}; close {close:.1f}s",
            flush=True,
        )
        print(f"   {collections_}; tracked after the run {tracked}", flush=True)
        if stacks and step[0]:
            print("   longest step:", step[2])
        for wall, what in STEPS.last_blocked if stacks else ():
            print(f"   blocked {wall:.0f} ms, {what}")
        for e in errors[:3]:
            print("   victim:", e)
        if sampler:
            for stack, n in sampler.seen.most_common(8):
                print(f"   {n:4} {stack}")
    await v.__aexit__(None, None, None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("attacks", nargs="*", default=list(ATTACKS))
    parser.add_argument("--stacks", action="store_true")
    parser.add_argument("--shared", action="store_true", help="H shares one backend pair across attacks")
    args = parser.parse_args()
    asyncio.run(main(args.attacks, args.stacks, args.shared))
