"""One contract suite for every Directory implementation (SQLite embedded, Redis against a real server)."""

from __future__ import annotations

import errno
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import computer
from computer.actors.directory import (
    DELETING,
    Directory,
    LeaseRenewal,
    RedisDirectory,
    RegisteredDirectory,
    SqliteDirectory,
    last_known_file,
    open_directory,
    renew_leases,
)


@pytest.fixture(params=["sqlite", "redis", "redis+registry"])
def directory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Directory]:
    d: Directory
    if request.param == "sqlite":
        d = SqliteDirectory(tmp_path / "directory.sqlite")
    else:
        url = request.getfixturevalue("redis_url")
        d = RedisDirectory(url, prefix=f"test:{uuid.uuid4().hex}:")
        if request.param == "redis+registry":
            d = RegisteredDirectory(computer.Settings(data_dir=tmp_path, redis_url=url), d)
    yield d
    d.close()


def test_the_registry_beside_redis_keeps_where_each_file_is(tmp_path: Path, redis_url: str) -> None:
    """Issue 25: a Redis that forgets (flushed, restarted empty) does not take the file's place with it."""
    config = computer.Settings(data_dir=tmp_path, redis_url=redis_url)
    redis = RedisDirectory(redis_url, prefix=f"test:{uuid.uuid4().hex}:")
    d = RegisteredDirectory(config, redis)
    assert isinstance(open_directory(config), RegisteredDirectory)
    # A shared data directory: tombstones only (every node sees every file), no file notes.
    shared = RegisteredDirectory(config.model_copy(update={"shared_data_dir": True}), redis)
    assert isinstance(open_directory(shared._config), RegisteredDirectory)
    shared.acquire_lease("shared", "node-b", "o0", 30.0, host="box-b/10.0.0.2")
    shared.close()
    d.acquire_lease("ws", "node-b", "o1", 30.0, host="box-b/10.0.0.2")
    d.acquire_lease("cli", "process:12@box", "o2", 30.0, host=None)  # outside Ray: no place to note
    d.acquire_lease("gone", "node-b", "o3", 30.0, host="box-b/10.0.0.2")
    assert d.remove("gone", "o3")
    redis.remove("ws", "o1")  # Redis forgets behind the registry's back
    assert d.get("ws") is None
    assert last_known_file(config, "ws") == ("node-b", "box-b/10.0.0.2")
    assert last_known_file(config, "cli") is None
    assert last_known_file(config, "gone") is None  # a deleted workspace is nowhere
    assert last_known_file(config, "shared") is None  # not noted
    assert last_known_file(config.model_copy(update={"redis_url": None}), "ws") is None
    d.close()


def test_unknown_name_has_no_record(directory: Directory) -> None:
    assert directory.get("nobody") is None
    assert directory.names() == []


def test_first_lease_is_epoch_one_and_records_node_and_owner(directory: Directory) -> None:
    before = time.time()
    assert directory.acquire_lease("ws", "node-a", "owner-1", 30.0) == 1
    rec = directory.get("ws")
    assert rec is not None
    assert (rec.name, rec.node, rec.owner, rec.epoch, rec.state) == ("ws", "node-a", "owner-1", 1, "active")
    assert rec.lease_live()
    assert rec.lease_expires >= before + 30.0
    assert rec.last_active >= before


def test_takeover_increases_epoch_strictly(directory: Directory) -> None:
    epochs = [directory.acquire_lease("ws", "n", f"owner-{i}", 30.0) for i in range(5)]
    assert epochs == [1, 2, 3, 4, 5]


def test_a_deletions_lease_refuses_owners_until_it_ends_and_another_deletion_takes_it(
    directory: Directory,
) -> None:
    """A hosted workspace the deletion had closed was reopened by its client's next call, above the
    deletion's fence: that client's writes were acknowledged into the file the deletion then unlinked.
    The deletions' leases are long while they must hold (before, 0.3 s: a process descheduled that
    long on a loaded machine saw the lease run out before the refusal it pins); only the last one,
    which must run out, is short."""
    assert directory.acquire_lease("ws", "node-a", "owner", 30.0) == 1
    assert directory.acquire_lease("ws", DELETING, "deleter", 60.0) == 2  # an owner's lease is taken over
    with pytest.raises(OSError) as refused:
        directory.acquire_lease("ws", "node-a", "owner-again", 30.0)
    assert refused.value.errno == errno.EBUSY and "being deleted" in str(refused.value)
    assert directory.get("ws").owner == "deleter"  # type: ignore[union-attr]
    assert directory.acquire_lease("ws", DELETING, "deleter-2", 60.0) == 3  # a retried deletion (live lease)
    with pytest.raises(OSError) as still_refused:
        directory.acquire_lease("ws", "node-a", "owner-again", 30.0)
    assert still_refused.value.errno == errno.EBUSY
    assert directory.acquire_lease("ws", DELETING, "deleter-2", 0.3) == 3  # its lease, now short
    time.sleep(0.35)  # a deletion that died midway: its lease runs out (wall-clock time must pass)
    assert directory.acquire_lease("ws", "node-a", "owner-again", 30.0) == 4


def test_same_owner_reacquiring_a_live_lease_keeps_its_epoch(directory: Directory) -> None:
    assert directory.acquire_lease("ws", "n", "o", 30.0) == 1
    assert directory.acquire_lease("ws", "n", "o", 30.0) == 1


def test_same_owner_after_expiry_gets_a_new_epoch(directory: Directory) -> None:
    assert directory.acquire_lease("ws", "n", "o", 0.01) == 1
    time.sleep(0.05)  # a lease expiring is the behaviour under test: wall-clock time must pass
    assert directory.acquire_lease("ws", "n", "o", 30.0) == 2


def test_stale_owner_cannot_renew_after_takeover(directory: Directory) -> None:
    old = directory.acquire_lease("ws", "n1", "old", 30.0)
    new = directory.acquire_lease("ws", "n2", "new", 30.0)
    assert new > old
    assert directory.renew_lease("ws", "old", old, 30.0) is False
    assert directory.renew_lease("ws", "new", new, 30.0) is True
    rec = directory.get("ws")
    assert rec is not None and (rec.owner, rec.node, rec.epoch) == ("new", "n2", new)


def test_renewing_many_leases_at_once_is_renewing_each(directory: Directory) -> None:
    """An owner host renews all its workspaces' leases in one write (one SQLite transaction; Redis
    one by one): each answers as its own ``renew_lease`` would."""
    held = directory.acquire_lease("a", "n", "host#1", 0.5)
    stale = directory.acquire_lease("b", "n", "host#2", 30.0)
    directory.acquire_lease("b", "n2", "elsewhere", 30.0)  # b was taken over
    released = directory.acquire_lease("c", "n", "host#3", 30.0)
    assert directory.release_lease("c", "host#3", released, hibernating=True)
    before = directory.get("a")
    assert before is not None
    stamp = before.last_active + 100.0
    kept = renew_leases(
        directory,
        [
            LeaseRenewal("a", "host#1", held, 60.0, stamp),
            LeaseRenewal("b", "host#2", stale, 60.0, stamp),
            LeaseRenewal("c", "host#3", released, 60.0, stamp),
            LeaseRenewal("never", "host#4", 1, 60.0, None),
        ],
    )
    assert kept == [True, False, False, False]
    a, b, c = (directory.get(n) for n in "abc")
    assert a is not None and a.lease_expires > before.lease_expires + 50.0
    assert a.last_active == pytest.approx(stamp)
    assert b is not None and b.owner == "elsewhere"
    assert c is not None and c.state == "hibernating"
    assert directory.get("never") is None
    assert renew_leases(directory, []) == []


def test_stale_owner_cannot_release_after_takeover(directory: Directory) -> None:
    old = directory.acquire_lease("ws", "n", "old", 30.0)
    directory.acquire_lease("ws", "n", "new", 30.0)
    assert directory.release_lease("ws", "old", old, hibernating=True) is False
    rec = directory.get("ws")
    assert rec is not None and rec.state == "active" and rec.owner == "new"


def test_renew_extends_the_lease_and_records_activity(directory: Directory) -> None:
    epoch = directory.acquire_lease("ws", "n", "o", 0.5)
    first = directory.get("ws")
    assert first is not None
    stamp = first.last_active + 100.0
    assert directory.renew_lease("ws", "o", epoch, 60.0, last_active=stamp)
    rec = directory.get("ws")
    assert rec is not None
    assert rec.lease_expires > first.lease_expires + 50.0
    assert rec.last_active == pytest.approx(stamp)


def test_renew_never_moves_last_activity_back(directory: Directory) -> None:
    epoch = directory.acquire_lease("ws", "n", "o", 30.0)
    rec = directory.get("ws")
    assert rec is not None
    assert directory.renew_lease("ws", "o", epoch, 30.0, last_active=rec.last_active - 1000.0)
    again = directory.get("ws")
    assert again is not None and again.last_active == pytest.approx(rec.last_active)


def test_renew_of_an_unknown_name_fails(directory: Directory) -> None:
    assert directory.renew_lease("ghost", "o", 1, 30.0) is False
    assert directory.get("ghost") is None


def test_hibernating_release_keeps_node_and_epoch(directory: Directory) -> None:
    epoch = directory.acquire_lease("ws", "node-x", "o", 30.0)
    assert directory.release_lease("ws", "o", epoch, hibernating=True)
    rec = directory.get("ws")
    assert rec is not None
    assert (rec.state, rec.node, rec.epoch) == ("hibernating", "node-x", epoch)
    assert not rec.lease_live()
    assert directory.renew_lease("ws", "o", epoch, 30.0) is False


def test_plain_release_closes(directory: Directory) -> None:
    epoch = directory.acquire_lease("ws", "n", "o", 30.0)
    assert directory.release_lease("ws", "o", epoch)
    rec = directory.get("ws")
    assert rec is not None and rec.state == "closed"
    assert directory.release_lease("ws", "o", epoch) is False


def test_wake_up_after_hibernation_is_a_new_epoch(directory: Directory) -> None:
    epoch = directory.acquire_lease("ws", "n", "o", 30.0)
    directory.release_lease("ws", "o", epoch, hibernating=True)
    again = directory.acquire_lease("ws", "n", "o2", 30.0)
    assert again == epoch + 1
    rec = directory.get("ws")
    assert rec is not None and rec.state == "active"


def test_names_are_listed_in_byte_order(directory: Directory) -> None:
    for name in ["b", "a", "é", "Z", "a b%_*"]:
        directory.acquire_lease(name, "n", "o", 30.0)
    assert directory.names() == sorted(["b", "a", "é", "Z", "a b%_*"], key=lambda n: n.encode())


def test_workspaces_do_not_share_epochs(directory: Directory) -> None:
    assert directory.acquire_lease("one", "n", "o", 30.0) == 1
    assert directory.acquire_lease("one", "n", "p", 30.0) == 2
    assert directory.acquire_lease("two", "n", "o", 30.0) == 1


def test_concurrent_takeovers_hand_out_distinct_epochs(directory: Directory) -> None:
    epochs: list[int] = []
    guard = threading.Lock()

    def take(i: int) -> None:
        for j in range(10):
            e = directory.acquire_lease("race", "n", f"o{i}-{j}", 30.0)
            with guard:
                epochs.append(e)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(epochs) == list(range(1, 41))
    rec = directory.get("race")
    assert rec is not None and rec.epoch == 40


def test_released_epoch_remembers_the_last_owner_that_let_go(directory: Directory) -> None:
    first = directory.acquire_lease("ws", "n", "a", 30.0)
    rec = directory.get("ws")
    assert rec is not None and rec.released_epoch == 0
    directory.release_lease("ws", "a", first, hibernating=True)
    second = directory.acquire_lease("ws", "n", "b", 30.0)
    rec = directory.get("ws")
    assert rec is not None and rec.released_epoch == first
    # b is taken over while live (killed): released_epoch still names a, not b.
    directory.acquire_lease("ws", "n", "c", 30.0)
    rec = directory.get("ws")
    assert rec is not None and rec.released_epoch == first and rec.epoch == second + 1
