"""Fair shares between builds in the scheduler alone, on a simulated clock.

The scheduling part of bench_fair_share.py without Bazel, gRPC or the
machine's load: the real ``Scheduler`` and a fake worker with ``--slots``
one-CPU slots, on Trio's ``MockClock`` (every wait is instant, so a run
takes a second and gives the same figures every time). Build A queues
``--a-actions`` actions at time 0; ``--arrive`` seconds later each of
``--small`` small builds (B, C, ...) queues ``--b-actions``. Action ``i`` of
a build runs ``--seconds`` x (0.9, 1.0, 1.1)[i % 3], so slots free at
staggered times as with real actions. Printed per build: when its last
action ended, counted from when the build came, and for the small builds
the bound equal sharing sets (its action-seconds over its share of the
slots, one slot per build here), as the median over ``--runs`` runs whose
arrivals are spread over one action's length.

Run it against another tree to compare schedulers::

    PYTHONPATH=/path/to/tree python bench/sim_fair_share.py --small 2

(``PYTHONPATH`` comes before this checkout, which is only appended to the
path, so it decides which ``lre`` and ``tests`` load; each run prints where
``lre`` came from).
Raises ``RuntimeError`` when an action does not complete.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import trio
import trio.testing

# After PYTHONPATH, so that another tree given there supplies lre and tests.
sys.path.append(str(Path(__file__).resolve().parent.parent))

import lre.scheduler
from lre.config import FairShareSpec
from lre.scheduler import Lease, RequestInfo
from tests._support.scheduler import execute_request, start_harness, worker_info

STRETCH = (0.9, 1.0, 1.1)


async def simulate(args: argparse.Namespace) -> dict[str, float]:
    """When each build's last action ended, counted from when it came."""
    ended: dict[str, float] = {}
    came: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        harness = await start_harness(nursery, fair_share=FairShareSpec())
        worker = await harness.add_worker(worker_info(cpus=args.slots))
        length: dict[str, float] = {}
        build_of: dict[str, str] = {}

        async def run(lease: Lease) -> None:
            await trio.sleep(length[lease.operation_name])
            worker.complete(lease)
            ended[build_of[lease.operation_name]] = trio.current_time()

        async def leases() -> None:
            while True:
                nursery.start_soon(run, await worker.next_lease(timeout=3600))

        async def queue(build: str, count: int) -> None:
            digests = [await harness.builder.action(f"/bin/{build}{i}") for i in range(count)]
            came[build] = trio.current_time()
            for i, digest in enumerate(digests):
                info = RequestInfo(tool_invocation_id=build)
                op = harness.scheduler.submit(execute_request(digest), request_info=info)
                build_of[op.name] = build
                length[op.name] = args.seconds * STRETCH[i % len(STRETCH)]

        nursery.start_soon(leases)
        await queue("A", args.a_actions)
        await trio.sleep(args.arrive)
        for k in range(args.small):
            await queue(chr(ord("B") + k), args.b_actions)
        await trio.sleep(args.a_actions * args.seconds * 2 + 60)
        nursery.cancel_scope.cancel()
    missing = set(came) - set(ended)
    if missing:
        raise RuntimeError(f"builds {sorted(missing)} did not finish")
    return {build: ended[build] - came[build] for build in sorted(came)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--a-actions", type=int, default=90)
    ap.add_argument("--b-actions", type=int, default=5)
    ap.add_argument("--small", type=int, default=2, help="small builds arriving together")
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--arrive", type=float, default=5.0, help="when the small builds come")
    ap.add_argument(
        "--runs", type=int, default=10, help="runs, the arrival moved by seconds/runs each"
    )
    args = ap.parse_args()
    print(f"lre from {Path(lre.scheduler.__file__).parent.parent}", file=sys.stderr)
    runs: list[dict[str, float]] = []
    first = args.arrive
    for k in range(args.runs):  # arrivals spread over one action's length
        args.arrive = first + k * args.seconds / args.runs
        runs.append(trio.run(simulate, args, clock=trio.testing.MockClock(autojump_threshold=0)))
    bound = args.b_actions * args.seconds * (args.small + 1) / args.slots
    for build in runs[0]:
        walls = sorted(run[build] for run in runs)
        extra = "" if build == "A" else f" (equal sharing from its arrival: about {bound:.2f} s)"
        print(
            f"{build}: last action ended {statistics.median(walls):.2f} s after the build came, "
            f"median of {len(walls)} arrivals ({walls[0]:.2f}-{walls[-1]:.2f}){extra}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
