"""Crash safety, long variant: SIGKILL ``lre up`` at random moments, >= 50 times,
while uploads stream in and actions execute.

Each cycle (``tests.reliability.test_crash_executions.exec_crash_cycle``):

1. starts lre on the same directories and checks that the work directory
   holds nothing of the dead run;
2. checks the CAS and the action cache: every blob ever attempted is looked
   up (FindMissingBlobs) and none that was acknowledged may be missing; the
   ``--recent`` blobs, action-cache entries and executions attempted last
   (those in flight around the previous kill) plus ``--sample`` random older
   ones are read back and hashed, and every action result found must
   reference only present blobs with the right content. (Reading everything
   every cycle made a cycle take about a minute after 30 cycles; the last
   start reads everything once.)
3. runs one new Execute;
4. loads lre with ByteStream and BatchUpdate uploads plus action-cache
   updates (``tests.reliability._crash.load``), short executions with file
   and directory outputs, and long actions (a leader ``exec sleep`` with a
   marker; one shell with a background child), and SIGKILLs it at a random
   moment once the long actions execute;
5. checks that no action leader survived the kill (parent-death signal)
   and no background child either (the process guardian; counted
   separately as orphans).

A final clean start, full check, new Execute and SIGTERM end the run. Exits 1
when any problem was found (``--stop`` stops at the first).

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

from tests.reliability._crash import LreProcess, stray_files
from tests.reliability.test_crash_executions import (
    CrashRun,
    crash_config,
    exec_crash_cycle,
    final_check,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="upload client threads")
    parser.add_argument("--exec-threads", type=int, default=2, help="execution client threads")
    parser.add_argument("--long-actions", type=int, default=2)
    parser.add_argument("--recent", type=int, default=200, help="newest items read per check")
    parser.add_argument("--sample", type=int, default=40, help="older items read per check")
    parser.add_argument("--cas-bytes", default="32GiB", help="CAS cap (no eviction in the run)")
    parser.add_argument("--stop", action="store_true", help="stop at the first problem")
    parser.add_argument("--keep", type=Path, help="use (and keep) this directory")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="lre-crash-"))
    root.mkdir(parents=True, exist_ok=True)
    run = CrashRun(
        LreProcess(root, crash_config(root, cas_bytes=args.cas_bytes)), random.Random(args.seed)
    )
    started = time.monotonic()
    uploads = executions = orphans = bad_cycles = 0
    try:
        for _ in range(args.cycles):
            report = exec_crash_cycle(
                run,
                upload_threads=args.threads,
                exec_threads=args.exec_threads,
                long_actions=args.long_actions,
                recent=args.recent,
                sample=args.sample,
            )
            uploads += report.upload_calls
            executions += report.executions
            orphans += report.orphans
            check = report.check
            phases = ", ".join(f"{k} {v:.1f}" for k, v in report.seconds.items())
            print(
                f"cycle {report.cycle:3d} ({phases} s): killed {report.kill_after_s:.2f} s "
                f"into the load; {report.upload_calls} upload calls, {report.executions} "
                f"executions; before it: {check.present} blobs present ({check.hashed} "
                f"hashed), {check.results_found}/{check.results_checked} results found "
                f"complete; work leftovers at kill {report.leftovers_before_restart}; "
                f"surviving leaders {len(report.survivors)}, orphans {report.orphans}",
                flush=True,
            )
            if report.problems:
                bad_cycles += 1
                print("  PROBLEMS:", *report.problems[:10], sep="\n    ", flush=True)
                if args.stop:
                    return 1
        final, final_problems = final_check(run)
        strays = stray_files(root)
    finally:
        run.lre.kill()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.cycles} SIGKILL cycles in {time.monotonic() - started:.0f} s: "
        f"{uploads} upload calls, {executions} executions; "
        f"{len(run.ledger.attempted)} blobs attempted, {len(run.ledger.acknowledged)} "
        f"acknowledged; {len(run.executions.submitted)} actions submitted, "
        f"{len(run.executions.acknowledged)} acknowledged; final check: {final.present} "
        f"present, {final.hashed} hashed, {final.results_found}/{final.results_checked} "
        f"results complete; cycles with problems: {bad_cycles}; final problems: "
        f"{len(final_problems)}; CAS files not matching their name: {len(strays)}; "
        f"background children that survived a kill: {orphans}"
    )
    for problem in final_problems[:10]:
        print("  ", problem)
    return 1 if bad_cycles or final_problems or strays or orphans else 0


if __name__ == "__main__":
    sys.exit(main())
