"""Cumulative CPU per action of each function in ``thread_profile`` stats.

``bench_small_actions.py --profile DIR`` writes one
``<pid>-<kind>-<thread>.prof`` per thread and kind (``trio``, ``spawner``,
``batch``, ``collect``). This shows, per kind, the functions with the most
cumulative time (own time of what they call included) and how often each
runs per action, so that a stage (building the view, recycling a directory)
is seen whole::

    .venv/bin/python bench/profile_cumulative.py DIR ACTIONS [REGEX]

``ACTIONS``: the actions profiled (``--actions`` times the builds profiled,
the warm-up build included). ``REGEX`` keeps only matching functions.
cProfile counts every resumption of a coroutine as a call.
"""

from __future__ import annotations

import argparse
import pstats
import re
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("actions", type=int)
    parser.add_argument("pattern", nargs="?", default="")
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()
    pattern = re.compile(args.pattern)
    by_kind: dict[str, list[pstats.Stats]] = {}
    for path in sorted(args.directory.rglob("*.prof")):
        kind = path.name.split("-")[1]
        by_kind.setdefault(kind, []).append(pstats.Stats(str(path)))
    for kind, stats in by_kind.items():
        totals: dict[str, list[float]] = {}
        own_total = 0.0
        for one in stats:
            for (file, _, name), (_, calls, own, cumulative, _) in one.stats.items():  # type: ignore[attr-defined]
                own_total += own
                key = f"{file.split('/lre/')[-1].split('site-packages/')[-1]}:{name}"
                row = totals.setdefault(key, [0.0, 0.0, 0.0])
                row[0] += cumulative
                row[1] += own
                row[2] += calls
        per = 1e3 / args.actions
        print(f"== {kind}: {own_total * per:.3f} ms/action profiled ({len(stats)} threads)")
        rows = [(k, v) for k, v in totals.items() if pattern.search(k)]
        for key, (cumulative, own, calls) in sorted(rows, key=lambda kv: -kv[1][0])[: args.top]:
            print(
                f"  cum {cumulative * per:7.3f} own {own * per:7.3f} ms  "
                f"calls/action {calls / args.actions:6.2f}  {key}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
