"""Worker benchmarks: input staging and no-op actions in one process.

Run: .venv/bin/python bench/bench_worker.py [--runs 5] [--actions 400]

1. Staging an input root of 2,000 files (20 directories x 100 files) from
   the FilesystemStore (hardlinks) and from the MemoryStore (copies): Directory
   walk + validation + materialisation, median of the runs (target <= 150 ms).
2. End-to-end no-op actions (distinct ``/bin/true``, skip_cache_lookup)
   through the in-process Scheduler and one LocalWorker, 32 submitters at
   once: actions/s, p50/p99 latency (submit -> done), lre CPU per action
   (this process's user+sys, children excluded, split too), the 1-minute
   load average when the run started (other work on the machine skews
   everything; compare with the bare rate of the same run).
3. The machine's bare fork+exec rate of ``/bin/true`` measured in the same
   run (subprocess from Python, 32 concurrent), for comparison.

No-op actions through a real ``lre up`` and gRPC are bench_capacity.py's.

Everything is written under a temporary directory that is removed at exit.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from lre.cas import DirectoryReader, FilesystemStore, MemoryStore, write_message
from lre.cas._blob_io import write_bytes
from lre.config import worker_resources
from lre.config._scheduler_models import SimpleSchedulerSpec
from lre.config._worker_models import JobserverSpec, LocalWorkerSpec, ResourceSpec
from lre.digest import Digest
from lre.proto import re_pb2
from lre.scheduler import Scheduler
from lre.worker import LocalWorker, PressureMonitor
from lre.worker.inputs._input_tree import fetch_input_tree
from lre.worker.inputs._staging import stage_inputs


async def build_tree(store: object, dirs: int = 20, files: int = 100) -> Digest:
    root = re_pb2.Directory()
    for d in range(dirs):
        directory = re_pb2.Directory()
        for f in range(files):
            digest = await write_bytes(store, f"content {d} {f}\n".encode())  # type: ignore[arg-type]
            directory.files.add(name=f"f{f:03d}.c", digest=digest.to_proto())
        child = await write_message(store, directory)  # type: ignore[arg-type]
        root.directories.add(name=f"d{d:02d}", digest=child.to_proto())
    return await write_message(store, root)  # type: ignore[arg-type]


async def bench_staging(tmp: Path, runs: int) -> dict[str, float]:
    results: dict[str, float] = {}
    fs = FilesystemStore(tmp / "cas", tmp / "cas-tmp", 1 << 30)
    await fs.open()
    memory = MemoryStore(1 << 30)
    for label, store, files in (
        ("filesystem (hardlink)", fs, fs),
        ("memory (copy)", memory, None),
    ):
        root_digest = await build_tree(store)
        times = []
        for i in range(runs + 1):
            target = tmp / f"stage-{label[:3]}-{i}"
            target.mkdir()
            start = time.perf_counter()
            tree = await fetch_input_tree(DirectoryReader(store), root_digest)
            await stage_inputs(store, tree, target, local_files=files)  # type: ignore[arg-type]
            elapsed = time.perf_counter() - start
            assert len(tree.files) == 2000
            if i:  # first run warms caches (variant files, imports)
                times.append(elapsed)
        results[label] = statistics.median(times) * 1000
    return results


def latency_figures(latencies: list[float]) -> dict[str, float]:
    """p50 and p99 (ms) of ``latencies`` (seconds)."""
    ordered = sorted(latencies)
    return {
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000,
    }


async def bench_end_to_end(tmp: Path, actions: int, concurrency: int) -> dict[str, float]:
    store = MemoryStore(1 << 30)
    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store)
    spec = LocalWorkerSpec(
        name="bench",
        scheduler="main",
        cas_store="CAS",
        work_directory=str(tmp / "work"),
        max_inflight_tasks=concurrency,
        jobserver=JobserverSpec(enabled=True),
        resources=ResourceSpec(cpu_count=concurrency),
    )
    empty = await write_message(store, re_pb2.Directory())
    requests = []
    for i in range(actions):
        command = re_pb2.Command(arguments=["/bin/true", str(i)])
        action = re_pb2.Action(
            command_digest=(await write_message(store, command)).to_proto(),
            input_root_digest=empty.to_proto(),
        )
        digest = await write_message(store, action)
        requests.append(
            re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
        )
    latencies: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        worker = LocalWorker(
            spec,
            resources=worker_resources(spec),
            scheduler=scheduler,
            store=store,
            pressure=PressureMonitor(int(spec.resources.memory_headroom)),
        )
        await nursery.start(worker.run)
        queue = iter(requests)

        async def client() -> None:
            for request in queue:
                start = time.perf_counter()
                op = scheduler.submit(request)
                async with scheduler.watch(op.name) as updates:
                    async for snapshot in updates:
                        if snapshot.done:
                            assert snapshot.result is not None, snapshot.error
                            assert snapshot.result.exit_code == 0
                            break
                latencies.append(time.perf_counter() - start)

        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        wall_start = time.perf_counter()
        async with trio.open_nursery() as clients:
            for _ in range(concurrency):
                clients.start_soon(client)
        wall = time.perf_counter() - wall_start
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        nursery.cancel_scope.cancel()
    user = cpu_after.ru_utime - cpu_before.ru_utime
    system = cpu_after.ru_stime - cpu_before.ru_stime
    return {
        "actions_per_s": actions / wall,
        **latency_figures(latencies),
        "cpu_ms_per_action": (user + system) / actions * 1000,
        "user_ms_per_action": user / actions * 1000,
        "sys_ms_per_action": system / actions * 1000,
    }


async def bare_fork_exec(count: int, concurrency: int) -> float:
    """/bin/true spawned with subprocess from a pool of threads, per second."""
    limiter = trio.CapacityLimiter(concurrency)

    def one() -> None:
        subprocess.run(["/bin/true"], check=True)

    async def task() -> None:
        await trio.to_thread.run_sync(one, limiter=limiter)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(task)
    return count / (time.perf_counter() - start)


async def main(runs: int, actions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lre-bench-worker-") as name:
        tmp = Path(name)
        print(
            f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
            f"load {os.getloadavg()[0]:.2f}"
        )
        staging = await bench_staging(tmp, runs)
        for label, ms in staging.items():
            print(f"staging 2,000 files, {label}: median {ms:.1f} ms (target <= 150 ms)")
        await bench_end_to_end(tmp / "e2e-warm", min(actions, 100), 32)  # imports, threads
        rows = []
        for run in range(runs):
            load = os.getloadavg()[0]
            row = await bench_end_to_end(tmp / f"e2e-{run}", actions, 32)
            row["bare_per_s"] = await bare_fork_exec(actions, 32)
            row["ratio_vs_bare"] = row["actions_per_s"] / row["bare_per_s"]
            row["load_1min"] = load
            rows.append(row)
        for key in (
            "actions_per_s",
            "p50_ms",
            "p99_ms",
            "cpu_ms_per_action",
            "user_ms_per_action",
            "sys_ms_per_action",
            "bare_per_s",
            "ratio_vs_bare",
            "load_1min",
        ):
            values = [row[key] for row in rows]
            print(
                f"no-op e2e {key}: median {statistics.median(values):.2f} "
                f"(runs: {', '.join(f'{v:.2f}' for v in values)})"
            )
        print("targets: >= 200 actions/s, p99 <= 250 ms, <= 3 ms lre CPU per action;")
        print("bare = /bin/true via subprocess from 32 threads, measured right after each run")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--actions", type=int, default=400)
    args = parser.parse_args()
    trio.run(main, args.runs, args.actions)
