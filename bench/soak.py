"""Soak: random build-like traffic for a while; RSS, fds, threads and tasks must stay flat.

Each client thread loops over "builds": a batch of random input blobs
(FindMissingBlobs, BatchUpdateBlobs for the missing ones), ByteStream uploads
of larger outputs, GetActionResult misses then UpdateActionResult, cache hits
on a previous build's actions, and reads back of outputs (ByteStream and
BatchRead). Execute is not driven yet (lre does not serve it).

By default lre runs in this process (an ``Application`` on a scratch
directory), so Trio tasks can be counted too; ``--address host:port --pid N``
loads an lre started elsewhere and samples that process (tasks: n/a).
Samples are printed every ``--every`` seconds; the last line compares the end
with the first sample taken after a warm-up.

    .venv/bin/python bench/soak.py --seconds 60 [--threads 4]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from tests._support.reapi import digest, open_channel

INSTANCE = "main"


def build(stubs: tuple[object, ...], rng: random.Random, history: list[re_pb2.Digest]) -> int:
    cas, bytestream, ac = stubs
    calls = 0
    inputs = [rng.randbytes(rng.randrange(1, 20_000)) for _ in range(rng.randrange(5, 40))]
    digests = [digest(b) for b in inputs]
    missing = cas.FindMissingBlobs(  # type: ignore[attr-defined]
        re_pb2.FindMissingBlobsRequest(instance_name=INSTANCE, blob_digests=digests), timeout=60
    ).missing_blob_digests
    wanted = {(d.hash, d.size_bytes) for d in missing}
    cas.BatchUpdateBlobs(  # type: ignore[attr-defined]
        re_pb2.BatchUpdateBlobsRequest(
            instance_name=INSTANCE,
            requests=[
                re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=b)
                for d, b in zip(digests, inputs, strict=True)
                if (d.hash, d.size_bytes) in wanted
            ],
        ),
        timeout=60,
    )
    calls += 2
    for _ in range(rng.randrange(1, 6)):
        action = (
            rng.choice(history) if history and rng.random() < 0.3 else digest(uuid.uuid4().bytes)
        )
        try:
            ac.GetActionResult(  # type: ignore[attr-defined]
                re_pb2.GetActionResultRequest(instance_name=INSTANCE, action_digest=action),
                timeout=60,
            )
            calls += 1
            continue
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
        output = rng.randbytes(rng.choice([10, 5_000, 200_000, 1_500_000]))
        out = digest(output)
        name = f"{INSTANCE}/uploads/{uuid.uuid4()}/blobs/{out.hash}/{out.size_bytes}"
        bytestream.Write(  # type: ignore[attr-defined]
            iter([bs_pb2.WriteRequest(resource_name=name, data=output, finish_write=True)]),
            timeout=60,
        )
        ac.UpdateActionResult(  # type: ignore[attr-defined]
            re_pb2.UpdateActionResultRequest(
                instance_name=INSTANCE,
                action_digest=action,
                action_result=re_pb2.ActionResult(
                    output_files=[re_pb2.OutputFile(path="out", digest=out)]
                ),
            ),
            timeout=60,
        )
        read = b"".join(
            r.data
            for r in bytestream.Read(  # type: ignore[attr-defined]
                bs_pb2.ReadRequest(resource_name=f"{INSTANCE}/blobs/{out.hash}/{out.size_bytes}"),
                timeout=60,
            )
        )
        assert read == output, "read back different bytes"
        history.append(action)
        del history[:-200]
        calls += 4
    return calls


def client(address: str, stop: threading.Event, seed: int, totals: list[int]) -> None:
    rng = random.Random(seed)
    history: list[re_pb2.Digest] = []
    with open_channel(address) as ch:
        stubs = (
            re_grpc.ContentAddressableStorageStub(ch),
            bs_grpc.ByteStreamStub(ch),
            re_grpc.ActionCacheStub(ch),
        )
        while not stop.is_set():
            totals.append(build(stubs, rng, history))


def sample(process: psutil.Process, tasks: int | None) -> dict[str, float]:
    return {
        "rss_mb": process.memory_info().rss / 2**20,
        "fds": process.num_fds(),
        "threads": process.num_threads(),
        "tasks": float("nan") if tasks is None else tasks,
    }


def show(label: str, values: dict[str, float], calls: int) -> None:
    print(
        f"{label:>7s}: rss {values['rss_mb']:7.1f} MiB  fds {values['fds']:4.0f}  "
        f"threads {values['threads']:3.0f}  tasks {values['tasks']:4.0f}  calls {calls}",
        flush=True,
    )


def drive(address: str, args: argparse.Namespace, measure: object) -> int:
    """Run the clients and print samples; ``measure()`` returns a sample dict."""
    stop = threading.Event()
    totals: list[int] = []
    threads = [
        threading.Thread(target=client, args=(address, stop, seed, totals), daemon=True)
        for seed in range(args.threads)
    ]
    for t in threads:
        t.start()
    started = time.monotonic()
    time.sleep(min(args.warmup, args.seconds / 4))
    first = measure()  # type: ignore[operator]
    show("start", first, sum(totals))
    while time.monotonic() - started < args.seconds:
        time.sleep(args.every)
        show(f"{time.monotonic() - started:.0f}s", measure(), sum(totals))  # type: ignore[operator]
    stop.set()
    for t in threads:
        t.join(120)
    last = measure()  # type: ignore[operator]
    show("end", last, sum(totals))
    growth = {k: last[k] - first[k] for k in first}
    print(
        "growth start->end: "
        + ", ".join(f"{k} {v:+.1f}" for k, v in growth.items())
        + f"; {sum(totals)} calls in {time.monotonic() - started:.0f} s"
    )
    return 0


def in_process(args: argparse.Namespace) -> int:
    import trio

    from lre.app import Application
    from lre.config import resolve
    from lre.config._loader import load_config_text
    from tests._support.configs import app_config_text

    root = Path(tempfile.mkdtemp(prefix="lre-soak-"))
    app = Application(resolve(load_config_text(app_config_text(root), source="soak.json5")))
    process = psutil.Process()
    token: list[object] = []
    task_count: list[int] = [0]

    def count_tasks() -> None:
        stack = [trio.lowlevel.current_root_task()]
        count = 0
        while stack:
            task = stack.pop()
            count += 1
            for nursery in task.child_nurseries:
                stack.extend(nursery.child_tasks)
        task_count[0] = count

    def measure() -> dict[str, float]:
        trio.from_thread.run_sync(count_tasks, trio_token=token[0])  # type: ignore[arg-type]
        return sample(process, task_count[0])

    async def main() -> int:
        token.append(trio.lowlevel.current_trio_token())
        async with trio.open_nursery() as nursery:
            ready = await nursery.start(app.serve)
            try:
                return await trio.to_thread.run_sync(drive, ready.grpc_addresses[0], args, measure)
            finally:
                app.request_stop()

    try:
        return trio.run(main)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--every", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--address", help="an lre started elsewhere (needs --pid)")
    parser.add_argument("--pid", type=int)
    args = parser.parse_args()
    if args.address:
        process = psutil.Process(args.pid or os.getpid())
        return drive(args.address, args, lambda: sample(process, None))
    return in_process(args)


if __name__ == "__main__":
    sys.exit(main())
