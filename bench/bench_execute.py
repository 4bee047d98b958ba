"""The scheduler and a worker in one process, and held Execute streams.

Parts (``--only`` a comma list of them; all by default), each figure the
median of ``--runs`` runs (default 5):

1. ``scheduler``: a fake worker that completes every lease at once; submit +
   watch to done, concurrency 32 and 256, ``--count`` actions (ops/s, CPU);
2. ``held``: ``--held`` concurrent Execute streams through the real
   ``GrpcServer``/``TrioBridge``/``ExecutionServicer`` (clients in another
   process, grpc.aio) held EXECUTING by the fake worker: server threads and
   RSS, then all released; every stream must end done (none lost);
3. ``worker``: staging an input root of 2,000 files (20 directories x 100)
   from the FilesystemStore (hardlinks) and the MemoryStore (copies), then
   ``--actions`` distinct ``/bin/true`` actions through the Scheduler and one
   real LocalWorker, 32 submitters at once: actions/s, p50/p99 latency
   (submit -> done), lre CPU per action (this process, children excluded).

No-op actions through a real ``lre up`` and gRPC are bench_capacity.py's.

    .venv/bin/python bench/bench_execute.py [--runs 5] [--only scheduler,held,worker]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import own_cpu

from lre.cas import DirectoryReader, FilesystemStore, MemoryStore, write_message
from lre.cas._blob_io import write_bytes
from lre.config import SimpleSchedulerSpec, worker_resources
from lre.config._scheduler_models import PropertyModification, PropertyValue
from lre.config._worker_models import JobserverSpec, LocalWorkerSpec, ResourceSpec
from lre.digest import Digest
from lre.errors import Unavailable
from lre.proto import re_pb2
from lre.scheduler import Completed, Lease, Reservation, Scheduler, WorkerInfo
from lre.worker import LocalWorker, PressureMonitor
from lre.worker.inputs._input_tree import fetch_input_tree
from lre.worker.inputs._staging import stage_inputs

MODS = (PropertyModification(add=PropertyValue(name="cpu_count", value="1")),)


class FakeWorker:
    """Completes each lease at once, or holds every lease until ``release``."""

    def __init__(self, scheduler: Scheduler, *, hold: bool = False, expect: int = 0) -> None:
        self.scheduler = scheduler
        self.hold = hold
        self.held: list[Lease] = []
        self.expect = expect
        self.all_held = trio.Event()  # set once ``expect`` leases are held
        self.info = WorkerInfo(
            name="bench",
            properties={},
            capacity=Reservation(10_000_000 * 1000, 1 << 50),
            max_inflight=0,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.scheduler.register_worker(self.info)
        task_status.started()
        while True:
            try:
                lease = await self.scheduler.lease(self.info.name)
            except Unavailable:
                return
            if self.hold:
                self.held.append(lease)
                if len(self.held) >= self.expect:
                    self.all_held.set()
            else:
                self.complete(lease)

    def complete(self, lease: Lease) -> None:
        result = re_pb2.ActionResult(exit_code=0)
        result.execution_metadata.worker = self.info.name
        self.scheduler.report(lease.lease_id, Completed(result))

    def release(self) -> None:
        held, self.held = self.held, []
        for lease in held:
            self.complete(lease)


async def make_actions(store: MemoryStore, count: int, tag: str) -> list[Digest]:
    digests = []
    root = await write_message(store, re_pb2.Directory())
    for i in range(count):
        command = await write_message(
            store, re_pb2.Command(arguments=["/bin/true", tag, str(i)], output_paths=["out"])
        )
        action = re_pb2.Action(command_digest=command.to_proto(), input_root_digest=root.to_proto())
        digests.append(await write_message(store, action))
    return digests


def new_scheduler(store: MemoryStore) -> Scheduler:
    spec = SimpleSchedulerSpec(ac_store="", cas_store="")
    return Scheduler(spec, cas=store, modifications=MODS, detach_grace_s=5.0)


# ------------------------------------------------------------------ scheduler only


async def scheduler_only(count: int, concurrency: int) -> dict[str, float]:
    store = MemoryStore(1 << 30)
    scheduler = new_scheduler(store)
    digests = await make_actions(store, count, f"s{concurrency}")
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await nursery.start(FakeWorker(scheduler).run)
        # Requests are built before timing: the client's cost is not the scheduler's.
        queue = iter(
            [
                re_pb2.ExecuteRequest(
                    instance_name="main", action_digest=digest.to_proto(), skip_cache_lookup=True
                )
                for digest in digests
            ]
        )

        async def client() -> None:
            for request in queue:
                op = scheduler.submit(request)
                async with scheduler.watch(op.name) as updates:
                    async for snapshot in updates:
                        if snapshot.done:
                            assert snapshot.error is None, snapshot.error
                            break

        cpu0, t0 = own_cpu()[0], time.perf_counter()
        async with trio.open_nursery() as clients:
            for _ in range(concurrency):
                clients.start_soon(client)
        wall, cpu = time.perf_counter() - t0, own_cpu()[0] - cpu0
        nursery.cancel_scope.cancel()
    return {"ops_per_s": count / wall, "cpu_us_per_op": cpu / count * 1e6}


# ------------------------------------------------------------------ through gRPC


async def serve(store: MemoryStore, scheduler: Scheduler, nursery: trio.Nursery) -> str:
    # Imported here so the scheduler-only runs do not load grpc at all.
    from lre.service import GrpcServer, InstanceBackends, Instances, ServerOptions, TrioBridge
    from lre.service.execution import ExecutionServicer
    from lre.service.operations import OperationsServicer

    backends = {"main": InstanceBackends(cas=store, scheduler=scheduler)}
    instances = Instances(backends)
    bridge = TrioBridge()
    server = GrpcServer(
        ServerOptions(address="127.0.0.1:0", grace_seconds=0.5),
        [ExecutionServicer(bridge, instances), OperationsServicer(bridge, instances)],
        bridge,
    )
    address: str = await nursery.start(server.serve)
    return address


def spawn_client(address: str, digests_file: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--client", address, digests_file],
        stdout=subprocess.PIPE,
        text=True,
    )


async def held_streams(held: int, tmp: Path) -> dict[str, float]:
    store = MemoryStore(1 << 30)
    scheduler = new_scheduler(store)
    digests = await make_actions(store, held, "held")
    path = tmp / "digests-held.txt"
    path.write_text("".join(f"{d.hash} {d.size_bytes}\n" for d in digests))
    worker = FakeWorker(scheduler, hold=True, expect=held)
    me = psutil.Process()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await nursery.start(worker.run)
        address = await serve(store, scheduler, nursery)
        rss0 = me.memory_info().rss
        cpu0 = own_cpu()[0]
        proc = spawn_client(address, str(path))
        t0 = time.perf_counter()
        with trio.move_on_after(300):
            await worker.all_held.wait()
        ramp = time.perf_counter() - t0  # 300 s: gave up waiting; "lost" says how many
        await trio.sleep(1.0)  # streams idle while held
        threads = me.num_threads()
        rss = me.memory_info().rss
        reached = len(worker.held)
        watchers = scheduler.statistics().watchers
        worker.release()
        out, _ = await trio.to_thread.run_sync(proc.communicate)
        cpu = own_cpu()[0] - cpu0
        nursery.cancel_scope.cancel()
    result = json.loads(out)
    return {
        "streams": held,
        "reached_worker": reached,
        "reached_worker_s": ramp,
        "watchers": watchers,
        "server_threads": threads,
        "server_rss_mb": rss / 1e6,
        "server_rss_growth_mb": (rss - rss0) / 1e6,
        "done": result["done"],
        "lost": held - result["done"],
        "server_cpu_us_per_stream": cpu / held * 1e6,
    }


# ------------------------------------------------------------------ client process


def client_main(address: str, digests_file: str) -> None:
    """Hold one Execute stream per digest at once; print how many ended done."""
    import grpc.aio

    from lre.proto import re_grpc

    digests = []
    for line in Path(digests_file).read_text().splitlines():
        hash_, size = line.split()
        digests.append(re_pb2.Digest(hash=hash_, size_bytes=int(size)))

    async def main() -> dict[str, Any]:
        options = [("grpc.max_receive_message_length", 64 << 20)]
        channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(4)]
        stubs = [re_grpc.ExecutionStub(c) for c in channels]

        async def one(i: int, digest: re_pb2.Digest) -> bool:
            request = re_pb2.ExecuteRequest(
                instance_name="main", action_digest=digest, skip_cache_lookup=True
            )
            last = None
            async for op in stubs[i % len(stubs)].Execute(request):
                last = op
            return last is not None and last.done

        results = await asyncio.gather(*(one(i, d) for i, d in enumerate(digests)))
        for channel in channels:
            await channel.close()
        return {"done": sum(results)}

    print(json.dumps(asyncio.run(main())))


# ------------------------------------------------------------------ a real worker


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


async def staging(tmp: Path, runs: int) -> dict[str, float]:
    """Median ms to fetch and stage the 2,000-file tree, per store (first run untimed)."""
    results: dict[str, float] = {}
    await trio.Path(tmp).mkdir(parents=True, exist_ok=True)
    fs = FilesystemStore(tmp / "cas", tmp / "cas-tmp", 1 << 30)
    await fs.open()
    for label, store, files in (
        ("filesystem (hardlink)", fs, fs),
        ("memory (copy)", MemoryStore(1 << 30), None),
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
            if i:
                times.append(elapsed)
        results[label] = statistics.median(times) * 1000
    return results


async def local_worker(tmp: Path, actions: int, concurrency: int) -> dict[str, float]:
    """``actions`` distinct /bin/true actions through the Scheduler and a LocalWorker."""
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

        cpu0, wall0 = own_cpu()[0], time.perf_counter()
        async with trio.open_nursery() as clients:
            for _ in range(concurrency):
                clients.start_soon(client)
        wall, cpu = time.perf_counter() - wall0, own_cpu()[0] - cpu0
        nursery.cancel_scope.cancel()
    latencies.sort()
    return {
        "actions_per_s": actions / wall,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "cpu_ms_per_action": cpu / actions * 1000,
    }


async def worker_part(runs: int, actions: int, tmp: Path) -> dict[str, Any]:
    stage = await staging(tmp / "staging", runs)
    for label, ms in stage.items():
        print(f"staging 2,000 files, {label}: median {ms:.1f} ms (target <= 150 ms)", flush=True)
    await local_worker(tmp / "warm", min(actions, 100), 32)  # imports, threads
    rows = [await local_worker(tmp / f"run-{run}", actions, 32) for run in range(runs)]
    e2e = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    print(json.dumps({"worker": e2e}), flush=True)
    print("targets: >= 200 actions/s, p99 <= 250 ms", flush=True)
    return {"staging_ms": stage, "worker": e2e}


# ------------------------------------------------------------------ driver


def median_of(runs: int, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
    samples = [fn() for _ in range(runs)]
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def held_in_fresh_process(held: int) -> dict[str, float]:
    """One held-streams run in a new process, so its RSS is not that of earlier runs."""
    out = subprocess.run(
        [sys.executable, __file__, "--held-once", str(held)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    print(json.dumps({"held_run": result}), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--held", type=int, default=5000)
    parser.add_argument("--actions", type=int, default=400, help="worker: actions per run")
    parser.add_argument("--client", nargs=2, metavar=("ADDRESS", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--held-once", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--only", default="scheduler,held,worker", help="parts to run")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    if not parts <= {"scheduler", "held", "worker"}:
        parser.error(f"--only: unknown parts {sorted(parts)}")
    if args.held_once:
        with tempfile.TemporaryDirectory(prefix="lre-bench-execute-") as tmp:
            print(json.dumps(trio.run(held_streams, args.held_once, Path(tmp))))
        return
    if args.client:
        client_main(*args.client)
        return
    report: dict[str, Any] = {"cpus": os.cpu_count(), "runs": args.runs, "count": args.count}
    with tempfile.TemporaryDirectory(prefix="lre-bench-execute-") as tmp:
        for concurrency in (32, 256) if "scheduler" in parts else ():
            report[f"scheduler_only_c{concurrency}"] = median_of(
                args.runs, lambda c=concurrency: trio.run(scheduler_only, args.count, c)
            )
            print(
                json.dumps(
                    {f"scheduler_only_c{concurrency}": report[f"scheduler_only_c{concurrency}"]}
                ),
                flush=True,
            )
        held_runs = [
            held_in_fresh_process(args.held)
            for _ in range(max(1, args.runs) if "held" in parts else 0)
        ]
        if held_runs:
            held = {key: statistics.median(run[key] for run in held_runs) for key in held_runs[0]}
            held["lost_worst_run"] = max(run["lost"] for run in held_runs)
            held["server_rss_mb_worst_run"] = max(run["server_rss_mb"] for run in held_runs)
            report["held"] = held
        if "worker" in parts:
            report.update(trio.run(worker_part, args.runs, args.actions, Path(tmp)))
    report["load_average_1m_at_end"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
