"""Where some threads' CPU goes, by system call: a split of ``perf script`` output.

Record the whole machine while a bench runs, then split the samples of the
threads of interest (their thread ids, e.g. lre's two ``lre-spawner-N``
threads, found with the second command)::

    perf record -a -g -e cpu-clock -F 2000 -o run.data -- \\
        .venv/bin/python bench/bench_lre_ab.py --tree-a . --work true --rounds 4 --reps 4
    perf script -i run.data -F comm,tid,ip,sym > run.script
    grep -E '^lre-spawner' run.script | awk '{print $1, $2}' | sort | uniq -c | sort -rn | head
    .venv/bin/python bench/perf_syscall_split.py run.script --tids 101,102 --units 672

Each sample is charged to the system call it was taken in (the frame just
above ``do_syscall_64``; a mount or ``fsconfig`` call also names the
filesystem whose superblock it was filling, e.g. ``ovl_fill_super``), or to
user space (the interpreter's frames by their C function). ``--units`` (the
number of actions the threads served) turns sample counts into microseconds
per action at the recording frequency (``--hz``). ``--under FRAME`` instead
splits the samples below one kernel frame (e.g. ``ovl_fill_super``) by the
frames they passed through. A sample taken with interrupts off is charged
where they came back on (``cpu-clock`` on a VM without a PMU), so small
entries are approximate.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Iterator
from pathlib import Path

#: Kernel frames that say which filesystem a mount call was making.
_FILL_SUPER = ("ovl_fill_super", "shmem_fill_super", "proc_fill_super")


def samples(script: Path, tids: set[str]) -> Iterator[list[str]]:
    """The call stacks (leaf first) of the samples of ``tids``."""
    tid: str | None = None
    stack: list[str] = []
    with script.open() as lines:
        for line in lines:
            if not line.strip():
                if tid in tids and stack:
                    yield stack
                tid, stack = None, []
            elif not line[0].isspace():
                if tid in tids and stack:
                    yield stack
                fields = line.split()
                tid, stack = (fields[1] if len(fields) > 1 else None), []
            else:
                parts = line.split(None, 1)
                stack.append(parts[1].strip() if len(parts) > 1 else "?")
    if tid in tids and stack:
        yield stack


def syscall_of(stack: list[str]) -> str:
    """The system call a sample was taken in (with the filesystem being
    filled, if any), or its user-space function."""
    if "do_syscall_64" in stack:
        at = stack.index("do_syscall_64")
        name = stack[at - 1] if at > 0 else "?"
        filling = next((frame for frame in stack[:at] if frame in _FILL_SUPER), None)
        return f"{name}/{filling}" if filling else name
    leaf = stack[0]
    return f"user:{leaf}" if "Py" in leaf else "user (other)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path, help="perf script -F comm,tid,ip,sym output")
    parser.add_argument("--tids", required=True, help="comma-separated thread ids")
    parser.add_argument("--units", type=float, required=True, help="actions those threads served")
    parser.add_argument("--hz", type=float, default=2000.0, help="perf record -F (default 2000)")
    parser.add_argument("--under", help="split the samples below this kernel frame instead")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    tids = set(args.tids.split(","))
    per_sample_us = 1e6 / args.hz / args.units
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for stack in samples(args.script, tids):
        if args.under is not None:
            if args.under not in stack:
                continue
            total += 1
            counts.update(set(stack[: stack.index(args.under)]))
        else:
            total += 1
            counts[syscall_of(stack)] += 1
    if args.under is not None:
        print(f"{total} samples below {args.under} ({total * per_sample_us:.1f} us per action)")
        for frame, count in counts.most_common(args.top):
            print(f"{100 * count / max(1, total):6.1f}%  {frame}")
        return
    print(f"{total} samples: {total * per_sample_us / 1000:.3f} ms per action")
    for name, count in counts.most_common(args.top):
        print(f"{count * per_sample_us:8.1f} us  {name}")


if __name__ == "__main__":
    main()
