"""Benchmark of lre's cache services against a real server in a subprocess.

Usage (from the repository root)::

    .venv/bin/python bench/bench_cas.py [--runs 5] [--only memory,filesystem,direct]
        [--tests find_missing,batches,bytestream] [--open-blobs 100000]

Starts ``bench_cas.py serve`` (the real ``GrpcServer`` with the cache
servicers) on 127.0.0.1, once with a memory store and once with a filesystem
store in a temporary directory, and measures with a grpc client in this
process:

- FindMissingBlobs with 10,000 absent digests in one request (digests/s);
- BatchUpdateBlobs / BatchReadBlobs of 5,000 x 4 KiB blobs, in requests of
  at most max_batch_total_size_bytes (MB/s), and for reference the raw rate
  of creating 4 KiB files (write temp + rename) in the same directory;
- ByteStream Write / Read of one 64 MiB blob in 1 MiB chunks (MB/s)
  (``--tests`` keeps some of these three: ``find_missing``, ``batches``,
  ``bytestream``);
- in this process, no gRPC (``--only`` kind ``direct``): the filesystem
  store's own write and read of the same 5,000 blobs, one blob a call, 64 at
  once, and its ``open()`` with ``--open-blobs`` blobs on disk.

Figures are medians of ``--runs`` runs; a markdown table goes to stdout.
Every server is stopped (SIGTERM, then SIGKILL) before the script exits.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import process_cpu

from lre.proto import bs_pb2, re_grpc, re_pb2

MB = 1_000_000
BATCH_LIMIT = 4_000_000


# ----------------------------------------------------------------------------- server


def serve(store_kind: str, directory: str) -> None:
    """Run the server until SIGTERM; print the bound address on stdout."""
    import trio

    from lre.cas import ActionResultCache, FilesystemStore, MemoryActionCache, MemoryStore
    from lre.service import (
        GrpcServer,
        InstanceBackends,
        Instances,
        ServerOptions,
        TrioBridge,
        cache_servicers,
    )

    async def main() -> None:
        if store_kind == "memory":
            store: Any = MemoryStore(max_bytes=2 << 30)
        else:
            store = FilesystemStore(
                os.path.join(directory, "cas"), os.path.join(directory, "tmp"), 8 << 30
            )
            await store.open()
        results = ActionResultCache(MemoryActionCache(), store)
        instances = Instances({"": InstanceBackends(cas=store, action_cache=results)})
        bridge = TrioBridge()
        servicers: list[Any] = [*cache_servicers(bridge, instances)]
        server = GrpcServer(ServerOptions(address="127.0.0.1:0"), servicers, bridge)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(server.serve)
            print(address, flush=True)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)


class Server:
    def __init__(self, store_kind: str, directory: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "serve", store_kind, directory],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()
        if not self.address:
            self.stop()
            raise RuntimeError(f"{store_kind} server did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ----------------------------------------------------------------------------- client


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ],
    )


def sha(data: bytes) -> re_pb2.Digest:
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


#: The pid of the server being measured; ``timed`` also records its CPU time.
SERVER: list[int] = []
#: Server CPU seconds of each ``timed`` call, by the caller's label.
SERVER_CPU: dict[str, list[float]] = {}


def _cpu() -> float:
    return process_cpu(SERVER[0])[0] if SERVER else 0.0


def timed(fn: Callable[[], object], label: str = "") -> float:
    """Wall seconds of ``fn()``; the server's CPU seconds go to ``SERVER_CPU[label]``."""
    cpu = _cpu()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    if label:
        SERVER_CPU.setdefault(label, []).append(_cpu() - cpu)
    return wall


def bench_find_missing(ch: grpc.Channel, runs: int) -> list[float]:
    stub = re_grpc.ContentAddressableStorageStub(ch)
    rates = []
    for _ in range(runs):
        digests = [sha(os.urandom(16)) for _ in range(10_000)]
        request = re_pb2.FindMissingBlobsRequest(blob_digests=digests)
        seconds = timed(lambda r=request: stub.FindMissingBlobs(r), "find_missing")  # type: ignore[misc]
        rates.append(10_000 / seconds)
    return rates


def batches(blobs: list[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for blob in blobs:
        if batch and size + len(blob) + 200 > BATCH_LIMIT:
            yield batch
            batch, size = [], 0
        batch.append(blob)
        size += len(blob) + 200
    if batch:
        yield batch


def bench_batches(
    ch: grpc.Channel, runs: int, raw_dir: str = "", raw: list[float] | None = None
) -> tuple[list[float], list[float]]:
    """Batch update and read rates; with ``raw_dir``, the raw file-create rate is
    measured into ``raw`` right before each update run (same load, same disk)."""
    stub = re_grpc.ContentAddressableStorageStub(ch)
    up, down = [], []
    for run in range(runs):
        if raw_dir and raw is not None:
            raw.append(file_create_rate(raw_dir, run))
        blobs = [os.urandom(4096) for _ in range(5000)]
        total = sum(map(len, blobs)) / MB
        requests = [
            re_pb2.BatchUpdateBlobsRequest(
                requests=[
                    re_pb2.BatchUpdateBlobsRequest.Request(digest=sha(b), data=b) for b in batch
                ]
            )
            for batch in batches(blobs)
        ]

        def update(reqs: list[Any] = requests) -> None:
            for r in reqs:
                response = stub.BatchUpdateBlobs(r)
                assert all(x.status.code == 0 for x in response.responses)

        up.append(total / timed(update, "batch_update"))
        reads = [
            re_pb2.BatchReadBlobsRequest(digests=[sha(b) for b in batch])
            for batch in batches(blobs)
        ]

        def read(reqs: list[Any] = reads) -> None:
            for r in reqs:
                response = stub.BatchReadBlobs(r)
                assert all(x.status.code == 0 for x in response.responses)

        down.append(total / timed(read, "batch_read"))
    return up, down


def file_create_rate(directory: str, run: int) -> float:
    """MB/s of creating 5,000 x 4 KiB files (temp + rename) in ``directory``."""
    target = os.path.join(directory, f"raw{run}")
    os.makedirs(target)
    blobs = [os.urandom(4096) for _ in range(5000)]
    start = time.perf_counter()
    for i, blob in enumerate(blobs):
        tmp = os.path.join(target, f"t{i}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        os.write(fd, blob)
        os.close(fd)
        os.rename(tmp, os.path.join(target, f"b{i}"))
    return 5000 * 4096 / MB / (time.perf_counter() - start)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _write_frame(name: str, offset: int, data: bytes, finish: bool) -> bytes:
    """A serialized ``WriteRequest`` (fields 1, 2, 3, 10), built without protobuf copies."""
    parts = []
    if name:
        encoded = name.encode()
        parts += [b"\x0a", _varint(len(encoded)), encoded]
    if offset:
        parts += [b"\x10", _varint(offset)]
    if finish:
        parts.append(b"\x18\x01")
    parts += [b"\x52", _varint(len(data)), data]
    return b"".join(parts)


def _bytestream_once(ch: grpc.Channel, chunk: int) -> tuple[float, float]:
    """One 64 MiB write and read.

    The client sends pre-serialized ``WriteRequest`` frames (built before the
    clock starts) and receives ``ReadResponse`` frames as raw bytes, counting
    them, so that the measured rate is the server's, not this Python client's
    protobuf copies. The content read back is checked after the clock stops.
    """
    data = os.urandom(64 << 20)
    digest = sha(data)
    name = f"uploads/{uuid.uuid4()}/blobs/{digest.hash}/{digest.size_bytes}"
    view = memoryview(data)
    frames = [
        _write_frame(
            name if offset == 0 else "",
            offset,
            bytes(view[offset : offset + chunk]),
            offset + chunk >= len(data),
        )
        for offset in range(0, len(data), chunk)
    ]
    write_method = ch.stream_unary(
        "/google.bytestream.ByteStream/Write",
        request_serializer=None,
        response_deserializer=bs_pb2.WriteResponse.FromString,
    )

    def write() -> None:
        assert write_method(iter(frames)).committed_size == len(data)

    up = len(data) / MB / timed(write, "bytestream_write")
    frames.clear()  # free the 64 MiB before reading
    read_name = f"blobs/{digest.hash}/{digest.size_bytes}"
    read_method = ch.unary_stream(
        "/google.bytestream.ByteStream/Read",
        request_serializer=bs_pb2.ReadRequest.SerializeToString,
        response_deserializer=None,
    )
    received: list[bytes] = []

    def read() -> None:
        received.clear()
        got = 0
        for frame in read_method(bs_pb2.ReadRequest(resource_name=read_name)):
            received.append(frame)
            got += len(frame)
        assert got >= len(data)

    down = len(data) / MB / timed(read, "bytestream_read")
    back = b"".join(bs_pb2.ReadResponse.FromString(f).data for f in received)
    assert back == data, "ByteStream read returned different bytes"
    return up, down


def bench_bytestream(ch: grpc.Channel, runs: int) -> tuple[list[float], list[float]]:
    pairs = [_bytestream_once(ch, 1 << 20) for _ in range(runs)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def direct_store(directory: str, runs: int, open_blobs: int) -> dict[str, list[float]]:
    """Blobs/s of the filesystem store's write and read called in this process
    (64 Trio tasks at once), and seconds of its ``open()`` over ``open_blobs``
    blobs. ``os.sync()`` between phases keeps one phase's dirty pages out of the
    next one's figure. A read that returns other bytes raises AssertionError."""
    import trio

    from lre.cas import FilesystemStore, read_bytes
    from lre.cas._blob_io import write_bytes
    from lre.digest import digest_of

    async def each(items: list[Any], call: Callable[[Any], Any]) -> float:
        pending = iter(items)

        async def drain() -> None:
            for item in pending:
                await call(item)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(64):
                nursery.start_soon(drain)
        return time.perf_counter() - start

    async def write(blob: bytes) -> None:
        await write_bytes(store, blob)

    async def check_read(blob: bytes) -> None:
        assert await read_bytes(store, digest_of(blob)) == blob

    out: dict[str, list[float]] = {"store_write": [], "store_read": [], "store_open_s": []}
    for run in range(runs):
        root = os.path.join(directory, f"direct{run}")
        store = FilesystemStore(os.path.join(root, "cas"), os.path.join(root, "tmp"), 1 << 34)
        trio.run(store.open)
        blobs = [os.urandom(4096) for _ in range(5000)]
        os.sync()
        out["store_write"].append(5000 / trio.run(each, blobs, write))
        out["store_read"].append(5000 / trio.run(each, blobs, check_read))
    content = os.path.join(directory, "many", "cas")
    for i in range(open_blobs):
        data = i.to_bytes(8, "big") * 8
        d = digest_of(data)
        os.makedirs(os.path.join(content, d.hash[:2]), exist_ok=True)
        with open(os.path.join(content, d.hash[:2], f"{d.hash}-{d.size_bytes}"), "wb") as f:
            f.write(data)
    os.sync()
    for _ in range(runs):
        store = FilesystemStore(content, os.path.join(directory, "many", "tmp"), 1 << 40)
        start = time.perf_counter()
        trio.run(store.open)
        out["store_open_s"].append(time.perf_counter() - start)
        assert store.statistics().blob_count == open_blobs
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default="memory,filesystem,direct")
    parser.add_argument("--tests", default="find_missing,batches,bytestream")
    parser.add_argument("--open-blobs", type=int, default=100_000)
    args = parser.parse_args()
    results: dict[str, Any] = {"runs": args.runs}
    kinds = args.only.split(",")
    tests = args.tests.split(",")
    if "direct" in kinds:
        kinds.remove("direct")
        with tempfile.TemporaryDirectory(prefix="lre-bench-") as directory:
            results["direct"] = direct_store(directory, args.runs, args.open_blobs)
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="lre-bench-") as directory:
            server = Server(kind, directory)
            SERVER[:] = [server.process.pid]
            SERVER_CPU.clear()
            load_before = os.getloadavg()[0]
            try:
                with channel(server.address) as ch:
                    ch_results: dict[str, Any] = {}
                    if "find_missing" in tests:
                        ch_results["find_missing"] = bench_find_missing(ch, args.runs)
                    raw: list[float] = []
                    if "batches" in tests:
                        ch_results["batch_update"], ch_results["batch_read"] = bench_batches(
                            ch, args.runs, directory if kind == "filesystem" else "", raw
                        )
                    if raw:
                        ch_results["raw_file_create"] = raw
                        ch_results["update_vs_raw"] = [
                            u / r for u, r in zip(ch_results["batch_update"], raw, strict=True)
                        ]
                    if "bytestream" in tests:
                        ch_results["bytestream_write"], ch_results["bytestream_read"] = (
                            bench_bytestream(ch, args.runs)
                        )
                ch_results["load_after"] = os.getloadavg()[0]
                ch_results["server_cpu"] = dict(SERVER_CPU)
                ch_results["load_before"] = load_before
                results[kind] = ch_results
            finally:
                server.stop()
    print("| store | test | median | runs (sorted) | server CPU per run | target |")
    print("|---|---|---|---|---|---|")
    targets = {
        "find_missing": (">= 200k digests/s", "digests/s"),
        "batch_update": (">= 3x peer (~45 MB/s)", "MB/s"),
        "batch_read": (">= 3x peer (~50 MB/s)", "MB/s"),
        "bytestream_write": (">= 500 MB/s", "MB/s"),
        "bytestream_read": (">= 800 MB/s", "MB/s"),
        "raw_file_create": ("(limit; measured before each update run)", "MB/s"),
        "update_vs_raw": (">= 0.8 (filesystem)", "x raw"),
        "store_write": ("(in process, one blob a call)", "blobs/s"),
        "store_read": ("(in process, one blob a call)", "blobs/s"),
        "store_open_s": (f"(open with {args.open_blobs:,} blobs)", "s"),
    }
    for kind in args.only.split(","):
        for test, (target, unit) in targets.items():
            values = results.get(kind, {}).get(test)
            if not values:
                continue
            fmt = "{:,.2f}" if unit in ("x raw", "s") else "{:,.0f}"
            shown = ", ".join(fmt.format(v) for v in sorted(values))
            cpu = results[kind].get("server_cpu", {}).get(test)
            cpu_text = f"{median(cpu) * 1000:.0f} ms" if cpu else "-"
            print(
                f"| {kind} | {test} | {fmt.format(median(values))} {unit} | {shown} | {cpu_text} "
                f"| {target} |"
            )
    for kind in args.only.split(","):
        run = results.get(kind, {})
        if "load_before" in run:
            print(
                f"\n{kind}: 1-minute load average {run['load_before']:.1f} before, "
                f"{run['load_after']:.1f} after ({os.cpu_count()} cores)"
            )


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        main()
