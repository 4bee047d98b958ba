"""Which processes are runnable when the firehose's count of running action
processes goes above 2 x cores (issue 6, bench 1's process target).

Starts ``lre up`` with its defaults (bench/_client.py), submits ``--actions``
firehose actions (bench_firehose.py's burner) and samples the process tree
under lre every 100 ms from a separate thread of this process, naming each
process in state R by what it runs:

- ``recipe``: a make recipe burning CPU (the work);
- ``action-sh``: the action's own ``sh -c 'printf ... | make'``, or a child
  it forked that has not exec'd yet (it still carries the shell's command line);
- ``make``, ``printf``: those programs;
- ``setpriv``, ``guard``: lre's parent-death wrapper and its guard shell;
- ``python``: a process lre forked that has not exec'd yet, or the guardian.

Prints how many samples saw each count of runnable processes and the make-up
of every sample above 2 x cores.

Run: ``.venv/bin/python bench/firehose_runnable.py [--actions 300]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _client import LreProcess, _walk, local_config
from bench_firehose import calibrate, fire


def kind_of(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().decode(errors="replace")
    except OSError:
        return name
    if "PPID" in command:
        return "guard"
    if "setpriv" in command:
        return "setpriv"
    if "while" in command:
        return "recipe"
    if "printf" in command and name == "sh":
        return "action-sh"
    return name


def runnable(root: int) -> list[str]:
    return [
        kind_of(pid, data[data.find(b"(") + 1 : data.rfind(b")")].decode(errors="replace"))
        for pid, data, fields in _walk(root)
        if fields[0] == b"R"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=300)
    args = parser.parse_args()
    limit = 2 * (os.cpu_count() or 1)
    loops = calibrate(0.2)
    counts: collections.Counter[int] = collections.Counter()
    above: collections.Counter[tuple[str, ...]] = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="lre-bench-runnable-") as d:
        home = Path(d) / "lre"
        with LreProcess(local_config(home, {}), home) as lre:
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    seen = runnable(lre.proc.pid)
                    counts[len(seen)] += 1
                    if len(seen) > limit:
                        above[tuple(sorted(seen))] += 1
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            failed, wall = asyncio.run(fire(lre.address, args.actions, loops))
            done.set()
            sampler.join()
    total = sum(counts.values())
    print(f"{args.actions} actions, {failed} failed, {wall:.1f} s, {total} samples")
    for running in sorted(counts):
        print(f"  {running} runnable: {counts[running]} samples ({counts[running] / total:.1%})")
    print(f"samples above {limit}, by what was runnable:")
    for kinds, n in above.most_common():
        print(f"  {n} x {', '.join(kinds)}")


if __name__ == "__main__":
    main()
