"""What lre's action history costs: CPU per recorded action and size on disk.

Records ``--actions`` (default 100,000) Bazel-shaped finished actions (target,
mnemonic, invocation id, 64-hex action digest, five phase stamps, waits,
reservation, peak RSS) through the real ``HistoryRecorder`` (``record`` on
the caller's thread, ``flush`` as its Trio task does, every 500 records ~ a
busy second) into a temporary state dir, and reports:

- CPU (process time) per action for ``record`` and for ``flush``;
- bytes per action and the size of the ring on disk: once unbounded (what
  100,000 actions take) and once with the default bound
  (``global.history.max_bytes``, 64 MiB: what is kept, and how many actions);
- the time to read the whole ring back (``lre history`` / ``builds``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lre.app._history import HistoryRecorder
from lre.config import HistorySpec
from lre.snapshot import ActionRecord, Source, read_history, summarize_builds


def _records(count: int) -> list[ActionRecord]:
    invocation = str(uuid.uuid4())
    out = []
    t0 = time.time()
    for n in range(count):
        start = t0 + n * 0.01
        out.append(
            ActionRecord(
                at=start + 1.3,
                source=Source.EXECUTED,
                invocation=invocation,
                tool="bazel 7.1.0",
                instance="main",
                target=f"//src/component{n % 300}/module{n % 17}:library_{n % 1000}",
                mnemonic="CppCompile",
                action=f"{n * 2654435761 % (1 << 256):064x}",
                worker="local",
                exit_code=0,
                submitted_at=start,
                waited_for=("cpu",) if n % 3 == 0 else (),
                reserved_millicpus=1000,
                reserved_memory_bytes=268_435_456,
                peak_rss_bytes=88_000_000 + n,
                cpu_seconds=1.1,
                attempts=1,
                stamps={
                    "queued": start,
                    "worker_start": start + 0.05,
                    "execution_start": start + 0.08,
                    "execution_completed": start + 1.25,
                    "worker_completed": start + 1.3,
                },
            )
        )
    return out


def _run(records: list[ActionRecord], directory: Path, max_bytes: int) -> dict[str, float]:
    recorder = HistoryRecorder(directory, max_bytes=max_bytes)
    record_cpu = flush_cpu = 0.0
    for start in range(0, len(records), 500):
        began = time.process_time()
        for record in records[start : start + 500]:
            recorder.record(record)
        record_cpu += time.process_time() - began
        began = time.process_time()
        recorder.flush()
        flush_cpu += time.process_time() - began
    recorder.close()
    began = time.perf_counter()
    kept = [r for r in read_history(directory) if isinstance(r, ActionRecord)]
    summarize_builds(kept)
    read_s = time.perf_counter() - began
    size = recorder.file.size_on_disk()
    return {
        "record_us": record_cpu / len(records) * 1e6,
        "flush_us": flush_cpu / len(records) * 1e6,
        "bytes": float(size),
        "kept": float(len(kept)),
        "read_s": read_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=100_000)
    args = parser.parse_args()
    records = _records(args.actions)
    default_bound = int(HistorySpec().max_bytes)
    with tempfile.TemporaryDirectory(prefix="lre-history-bench-") as tmp:
        unbounded = _run(records, Path(tmp) / "unbounded", 1 << 40)
        bounded = _run(records, Path(tmp) / "bounded", default_bound)
    print(f"actions recorded: {args.actions}")
    for name, r in (("unbounded", unbounded), (f"bound {default_bound >> 20} MiB", bounded)):
        print(
            f"{name:>14}: record {r['record_us']:.1f} us + flush {r['flush_us']:.1f} us CPU per "
            f"action; {r['bytes'] / 2**20:.1f} MiB on disk ({r['bytes'] / args.actions:.0f} B per "
            f"action recorded); {r['kept']:.0f} actions kept; read back + summarised in "
            f"{r['read_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
