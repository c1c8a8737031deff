"""The warm sandboxes of a backend (``_warm.WarmSandboxes``: one concept for standbys, launched live
inits and python guests), driven as a state machine: whatever is started ahead is taken at most
once, never ended while a run holds it, ended exactly once otherwise, and at most ``cap`` are kept.
The things started are fakes (no sandboxes): this is the bookkeeping a run relies on.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from computer.runtime._mirror import Mirror
from computer.runtime._warm import Spares, WarmSandboxes


class FakeReady:
    """Counts how it ends; ``dead`` makes it unusable (died while it waited)."""

    made = 0

    def __init__(self) -> None:
        FakeReady.made += 1
        self.name = FakeReady.made
        self.discarded = 0
        self.dead = False

    def usable(self) -> bool:
        return not self.dead

    async def discard(self) -> None:
        self.discarded += 1

    def discard_now(self) -> None:
        self.discarded += 1


class WarmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.mirrors = []
        for i in range(3):
            directory = Path(self.tmp.name) / f"m{i}"
            directory.mkdir()
            self.mirrors.append(Mirror(directory, "/workspace"))
        self.cap = 2
        self.warm: WarmSandboxes[FakeReady] = WarmSandboxes(self.cap, per_mirror=1, back_to_back=2)
        self.started: list[FakeReady] = []
        self.held: list[FakeReady] = []  # taken by a run that has not finished

    async def _make(self) -> FakeReady:
        ready = FakeReady()
        self.started.append(ready)
        return ready

    def _settle(self) -> None:
        """Let every pending start and end run (bounded)."""

        async def settle() -> None:
            for _ in range(10):
                await asyncio.sleep(0.002)

        self.loop.run_until_complete(settle())

    @rule(which=st.integers(0, 3))
    def keep(self, which: int) -> None:
        mirror = self.mirrors[which] if which < 3 else None

        async def keep() -> None:
            self.warm.keep(mirror, self._make)

        self.loop.run_until_complete(keep())

    @rule(which=st.integers(0, 3), settle=st.booleans())
    def take(self, which: int, settle: bool) -> None:
        if settle:
            self._settle()
        mirror = self.mirrors[which] if which < 3 else None
        taken = self.loop.run_until_complete(self.warm.take(mirror))
        if taken is not None:
            assert taken.usable() and taken.discarded == 0 and taken not in self.held
            self.held.append(taken)

    @precondition(lambda self: self.held)
    @rule()
    def run_ends(self) -> None:
        ready = self.held.pop(0)
        self.loop.run_until_complete(ready.discard())  # the run's program ended with it

    @rule(which=st.integers(0, 2))
    def dies_while_waiting(self, which: int) -> None:
        self._settle()
        spares = self.mirrors[which].standby
        if isinstance(spares, Spares):
            for warm in spares.items:
                if warm.task.done() and not warm.task.cancelled():
                    warm.task.result().dead = True

    @rule(which=st.integers(0, 2))
    def mirror_dropped(self, which: int) -> None:
        self.mirrors[which].drop_standby()  # eviction: whatever it kept ends
        self._settle()

    @rule(which=st.integers(0, 2))
    def workspace_closed(self, which: int) -> None:
        self.loop.run_until_complete(self.warm.close([self.mirrors[which]]))

    @invariant()
    def at_most_cap_kept(self) -> None:
        assert len([w for w in self.warm.kept if not (w.closed or w.taken)]) <= self.cap

    @invariant()
    def nothing_ended_twice_and_nothing_held_ended(self) -> None:
        assert all(ready.discarded <= 1 for ready in self.started)
        assert all(ready.discarded == 0 for ready in self.held)

    def teardown(self) -> None:
        try:
            for mirror in self.mirrors:
                mirror.drop_standby()
            self.loop.run_until_complete(self.warm.close([]))
            self._settle()
            for ready in self.held:
                self.loop.run_until_complete(ready.discard())
            self._settle()
            # Everything started was ended exactly once: by its run, or as a spare.
            assert [r.name for r in self.started if r.discarded != 1] == []
        finally:
            self.loop.close()
            self.tmp.cleanup()


WarmMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=20, deadline=None)
test_warm_sandboxes = WarmMachine.TestCase


async def test_one_that_died_while_it_waited_is_ended_once_and_not_handed_out(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    mirror = Mirror(tmp_path / "m", "/workspace")
    made: list[FakeReady] = []

    async def make() -> FakeReady:
        made.append(FakeReady())
        return made[-1]

    warm: WarmSandboxes[FakeReady] = WarmSandboxes(4)
    warm.keep(mirror, make)
    spares = mirror.standby
    assert isinstance(spares, Spares)
    await asyncio.wait_for(asyncio.shield(spares.items[0].task), 5)
    made[0].dead = True
    assert await warm.take(mirror) is None
    assert made[0].discarded == 1
    warm.keep(mirror, make)
    fresh = await warm.take(mirror)  # taken before its delay: started at once
    assert fresh is made[1] and fresh.discarded == 0
    await warm.close([mirror])
    assert [r.discarded for r in made] == [1, 0]  # the one a run holds is the run's to end
