"""Crash safety, long variant: SIGKILL ``lre up`` at random moments, >= 50 times.

Each cycle starts lre on the same directories, checks every blob it reports
present (hash and size), that nothing acknowledged before a kill is lost and
that every action-cache entry it serves is complete, then loads it with
concurrent ByteStream and BatchUpdate uploads and action-cache updates and
kills it with SIGKILL at a random moment. A final clean start, check and
SIGTERM ends the run. Exits 1 on the first problem.

    .venv/bin/python bench/crash_cycles.py --cycles 50 [--seed 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.app.conftest import app_config_text
from tests.reliability._crash import (
    Ledger,
    LreProcess,
    clean_exit_check,
    crash_cycle,
    stray_files,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="use (and keep) this directory")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="lre-crash-"))
    root.mkdir(parents=True, exist_ok=True)
    lre = LreProcess(root, app_config_text(root))
    ledger = Ledger()
    rng = random.Random(args.seed)
    started = time.monotonic()
    calls = 0
    try:
        for cycle in range(1, args.cycles + 1):
            verdict, done, moment = crash_cycle(lre, ledger, rng, threads=args.threads)
            calls += done
            print(
                f"cycle {cycle:3d}: killed after {moment:.2f} s, {done} calls; before it: "
                f"{verdict.present} blobs present ({verdict.verified} verified), "
                f"{verdict.complete_actions} complete action results",
                flush=True,
            )
            if verdict.problems:
                print("PROBLEMS:", *verdict.problems[:10], sep="\n  ")
                return 1
        final = clean_exit_check(lre, ledger)
        strays = stray_files(root)
    finally:
        lre.kill()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.cycles} SIGKILL cycles in {time.monotonic() - started:.0f} s, {calls} calls: "
        f"{len(ledger.attempted)} blobs attempted, {len(ledger.acknowledged)} acknowledged, "
        f"{final.present} present and verified {final.verified}; "
        f"{len(ledger.actions)} action results attempted, {final.complete_actions} served "
        f"complete; problems: {len(final.problems)}; files not matching their name: {len(strays)}"
    )
    for problem in final.problems[:10]:
        print("  ", problem)
    return 1 if final.problems or strays else 0


if __name__ == "__main__":
    sys.exit(main())
