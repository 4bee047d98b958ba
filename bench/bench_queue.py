"""The run queue's own cost per operation, two source trees side by side.

Each round runs, in a fresh interpreter per tree (``PYTHONPATH`` = the tree,
A then B, then B then A in the next round), the queue's part of an
operation's life with everything else left out: ``push`` of ``--ops``
queued operations, then ``take`` by one worker with room for ``--slots`` at
a time, each taken operation reported started and, once ``--slots`` run,
the oldest one finished (the fair shares' ``started``/``finished`` where
the tree's queue has them, as the scheduler calls them), until the queue is empty. The
operations belong to ``--builds`` builds (their ``tool_invocation_id``s),
submitted interleaved; a tree without fair shares puts them in one queue.
Reported per tree: the median over rounds of CPU microseconds (the
child's process time, steadier than wall time on a busy machine) per operation
(push + take + start + finish), and B/A.

    .venv/bin/python bench/bench_queue.py --tree-a /var/tmp/base --tree-b . --builds 1,2,3

Raises ``RuntimeError`` when a child fails or the queue does not empty.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
from lre.proto import re_pb2
from lre.digest import Digest, DigestFunction
from lre.scheduler._matching import Requirements
from lre.scheduler._model import ActionKey, RequestInfo, Reservation, ResourcePolicy, WorkerInfo
from lre.scheduler._queue import RunQueue
from lre.scheduler._records import OperationState, WorkerState

ops_count, slots, builds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
one = Reservation(1000, 64 << 20)
requirements = Requirements((("OSFamily", "linux"),), (), one)
request = re_pb2.ExecuteRequest()
ops = []
for i in range(ops_count):
    key = ActionKey("", DigestFunction.SHA256, Digest(f"{i:064x}", 100))
    info = RequestInfo(tool_name="bazel", tool_invocation_id=f"build-{i % builds}")
    op = OperationState(f"op{i}", key, i, request, info)
    op.requirements = requirements
    op.reservation = one
    ops.append(op)
queue = RunQueue(ResourcePolicy(), None)
worker = WorkerInfo("w", {"OSFamily": frozenset({"linux"})}, Reservation(slots * 1000, 1 << 40))
state = WorkerState(worker)
shares = getattr(queue, "shares", None)
if shares is not None:
    shares.set_capacity(slots * 1000, 1 << 40)
running = []
begin = time.process_time()
for op in ops:
    queue.push(op)
taken = 0
while True:
    got = queue.take(state, 0, len(running))
    if got is None:
        if not running:
            break
        op, reservation = running.pop(0)
        state.reserved = state.reserved - reservation
        if shares is not None:
            shares.finished(op.build, reservation)
        continue
    op, reservation, _ = got
    state.reserved = state.reserved + reservation
    if shares is not None:
        shares.started(op.build, reservation)
    running.append((op, reservation))
    taken += 1
elapsed = time.process_time() - begin
if taken != ops_count:
    raise SystemExit(f"took {taken} of {ops_count}")
print(json.dumps({"us_per_op": elapsed / ops_count * 1e6}))
"""


def measure(tree: Path, ops: int, slots: int, builds: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(ops), str(slots), str(builds)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: {proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout)["us_per_op"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree-a", type=Path, required=True)
    ap.add_argument("--tree-b", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--builds", default="1,2,3")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    for builds in (int(b) for b in args.builds.split(",")):
        a: list[float] = []
        b: list[float] = []
        for rnd in range(args.rounds):
            order = ((a, args.tree_a), (b, args.tree_b))
            for samples, tree in order if rnd % 2 == 0 else order[::-1]:
                samples.append(measure(tree, args.ops, args.slots, builds))
        ma, mb = statistics.median(a), statistics.median(b)
        print(
            f"{builds} build(s), {args.ops} ops, {args.slots} slots: "
            f"A {ma:.2f} us/op  B {mb:.2f} us/op  B/A {mb / ma:.2f}  "
            f"(A {', '.join(f'{x:.2f}' for x in a)}; B {', '.join(f'{x:.2f}' for x in b)})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
