"""A pull's page of new chunks staged by the owner (``PullCommits._stage``: one store file per chunk),
with the names the pull computed (``SyncPull.stage_digests``, s65) and without (each chunk hashed with
SHA-256 again, as before), alternated in the same process against one store.

    .venv/bin/python benchmarks/stage_bench.py --mib 256 --rounds 4
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time

from computer.runtime._backend import SyncPull
from computer.runtime._pull_commit import PullCommits
from computer.storage import CHUNK_SIZE, FileSystem


class Owner(PullCommits):
    def __init__(self, fs: FileSystem) -> None:
        self.fs = fs
        self.delivery_revs = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as where:
        fs = FileSystem.open(os.path.join(where, "ws.db"))
        owner = Owner(fs)
        took: dict[str, list[float]] = {"named by the pull": [], "hashed again (before)": []}
        for n in range(args.rounds):
            for label in took:
                chunks = [os.urandom(CHUNK_SIZE) for _ in range(args.mib * (1 << 20) // CHUNK_SIZE)]
                digests = [hashlib.sha256(c).hexdigest() for c in chunks] if label.startswith("named") else []
                pull = SyncPull("/workspace", stage=chunks, stage_digests=digests, staging=f"b{n}{label[0]}")
                t = time.perf_counter()
                owner._stage(pull, set())
                took[label].append(time.perf_counter() - t)
                fs.commit_batch({f"/.computer/sync/{pull.staging}": None})
        base = statistics.median(took["hashed again (before)"])
        print(f"{args.mib} MiB of new chunks staged, median of {args.rounds}:")
        for label, times in took.items():
            print(f"  {label:22} {statistics.median(times):6.2f} s  {statistics.median(times) / base:4.2f}x")


if __name__ == "__main__":
    main()
