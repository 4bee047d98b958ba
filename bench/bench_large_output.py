"""What an action's large output costs lre: wall and lre's CPU per action.

Run: .venv/bin/python bench/bench_large_output.py [--rounds 6] [--actions 4]
     [--mib 100] NAME=TREE ...

Each side is ``lre up`` from the checkout ``TREE`` (its ``.venv``; ``NAME``
alone: this one), containment as ``choose_containment`` picks it (``pidns``
as root). A round starts every side in turn (order reversed every other
round) and Executes ``--actions`` actions one after another, each writing
one output file of ``--mib`` MiB (distinct content: a line naming the
action, then zeros) into its input root; the output is stored in the CAS as
it would be for any client. Per side: medians over rounds of the wall per
action (Execute to its response) and lre's CPU per action (its own threads
plus the processes it reaped, less nothing: the command's ``head`` is the
same on every side).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, local_config, process_cpu


async def one_round(address: str, pid: int, tag: str, count: int, mib: int) -> dict[str, float]:
    client = ReapiClient(address)
    try:
        script = f'{{ echo "$0"; head -c {mib}M /dev/zero; }} > out'
        warm = await client.prepare(["/bin/sh", "-c", "echo > out", "warm"], outputs=["out"])
        assert (await client.execute(warm)).result.exit_code == 0
        digests = [
            await client.prepare(["/bin/sh", "-c", script, f"{tag}-{i}"], outputs=["out"])
            for i in range(count)
        ]
        own0, kids0 = process_cpu(pid)
        started = time.perf_counter()
        for digest in digests:
            response = await client.execute(digest)
            assert response.result.exit_code == 0, response
            size = response.result.output_files[0].digest.size_bytes
            assert size > mib << 20, response
        wall = time.perf_counter() - started
        own1, kids1 = process_cpu(pid)
    finally:
        await client.close()
    return {
        "wall_ms": wall / count * 1000,
        "lre_cpu_ms": ((own1 - own0) + (kids1 - kids0)) / count * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--actions", type=int, default=4)
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("sides", nargs="+", metavar="NAME[=TREE]")
    args = ap.parse_args()
    sides: dict[str, str] = {}
    for side in args.sides:
        name, _, tree = side.partition("=")
        sides[name] = str(Path(tree) / ".venv/bin/python") if tree else sys.executable
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="lre-large-", dir="/var/tmp") as tmp:
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                home = Path(tmp) / f"{name}-{r}"
                worker = {"max_inflight_tasks": 4}
                with LreProcess(local_config(home, worker), home, python=sides[name]) as lre:
                    row = asyncio.run(
                        one_round(lre.address, lre.proc.pid, f"{name}{r}", args.actions, args.mib)
                    )
                rows[name].append(row)
                print(f"round {r} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    print(f"\n{args.mib} MiB output, {args.actions} actions per round, medians of {args.rounds}:")
    for name, samples in rows.items():
        parts = []
        for key in samples[0]:
            values = [s[key] for s in samples]
            parts.append(
                f"{key} {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"
            )
        print(f"  {name:8s} " + ", ".join(parts))


if __name__ == "__main__":
    main()
