"""Raw throughput of lre's blob stores, against the machine's own limits.

Measures, each as the median of ``--runs`` (>= 5) runs:

- memory vs filesystem store: 5,000 x 4 KiB writes, then reads of them
  (``--concurrency`` Trio tasks at once; the filesystem store uses its own
  4-thread limiter);
- ``has_many`` of 10,000 digests on the filesystem store (the FindMissingBlobs
  path minus gRPC);
- the raw file-create rate of the machine: create + write 4 KiB + rename into
  a sharded directory with plain ``os`` calls in one thread (the limit the
  filesystem store is compared against), and the same in 4 threads;
- ``FilesystemStore.open()`` with 100,000 blobs on disk.

Prints a markdown table. Run: ``.venv/bin/python bench/bench_stores.py``.
Everything is written below a temporary directory (``--dir`` to choose its
parent; it must not be a tmpfs if disk figures are wanted) and removed at the
end (not between phases: mass unlinks on a ``discard`` mount stall the next
phase). ``os.sync()`` runs between phases for the same reason.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from lre.cas import BlobStore, FilesystemStore, MemoryStore, read_bytes
from lre.cas._blob_io import write_bytes
from lre.digest import Digest, digest_of

BLOB_SIZE = 4096


def blobs(count: int, seed: int) -> list[bytes]:
    """``count`` distinct 4 KiB blobs (distinct per seed, so runs never overlap)."""
    base = os.urandom(BLOB_SIZE - 16)
    return [seed.to_bytes(8, "big") + i.to_bytes(8, "big") + base for i in range(count)]


async def in_parallel(
    items: list[bytes] | list[Digest], fn: Callable[..., Awaitable[object]], concurrency: int
) -> None:
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:
            await fn(item)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)


async def store_round(store: BlobStore, data: list[bytes], concurrency: int) -> tuple[float, float]:
    """Seconds to write all of ``data`` and then to read all of it back."""
    digests = [digest_of(d) for d in data]

    async def write_one(blob: bytes) -> None:
        await write_bytes(store, blob)

    async def read_one(digest: Digest) -> None:
        await read_bytes(store, digest)

    start = time.perf_counter()
    await in_parallel(data, write_one, concurrency)
    written = time.perf_counter()
    await in_parallel(digests, read_one, concurrency)
    read = time.perf_counter()
    return written - start, read - written


def raw_create(root: Path, data: list[bytes], threads: int) -> float:
    """Seconds to create+write+rename ``data`` as files with plain os calls."""
    tmp = root / "tmp"
    content = root / "content"
    tmp.mkdir(parents=True)
    for i in range(256):
        (content / f"{i:02x}").mkdir(parents=True)
    names = [digest_of(d).hash for d in data]

    def run(part: range) -> None:
        for i in part:
            temp = f"{tmp}/{i}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, data[i])
            os.fchmod(fd, 0o444)
            os.close(fd)
            name = names[i]
            os.rename(temp, f"{content}/{name[:2]}/{name}")

    n = len(data)
    start = time.perf_counter()
    workers = [threading.Thread(target=run, args=(range(k, n, threads),)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def populate(content: Path, count: int) -> None:
    """Lay out ``count`` 64-byte blobs as a FilesystemStore would name them."""
    for i in range(256):
        (content / f"{i:02x}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        data = i.to_bytes(8, "big") * 8
        d = digest_of(data)
        path = f"{content}/{d.hash[:2]}/{d.hash}-{d.size_bytes}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o444)
        os.write(fd, data)
        os.close(fd)


def median(values: list[float]) -> float:
    return statistics.median(values)


async def main(args: argparse.Namespace) -> None:
    parent = Path(tempfile.mkdtemp(prefix="lre-bench-stores-", dir=args.dir))
    rows: list[tuple[str, str, str]] = []
    try:
        n = args.blobs
        mb = n * BLOB_SIZE / 1e6

        mem_w, mem_r, fs_w, fs_r, raw1, raw4, hm = [], [], [], [], [], [], []
        for run in range(args.runs):
            data = blobs(n, run)
            memory = MemoryStore(1 << 30)
            w, r = await store_round(memory, data, args.concurrency)
            mem_w.append(w)
            mem_r.append(r)

            root = parent / f"fs{run}"
            fs = FilesystemStore(root / "cas", root / "tmp", 1 << 34)
            await fs.open()
            os.sync()
            w, r = await store_round(fs, data, args.concurrency)
            fs_w.append(w)
            fs_r.append(r)

            os.sync()  # earlier phases' dirty pages must not be paid for here
            probe = [digest_of(d) for d in data] + [digest_of(d) for d in blobs(5000, 10_000 + run)]
            probe = (probe * ((args.probe + len(probe) - 1) // len(probe)))[: args.probe]
            start = time.perf_counter()
            await fs.has_many(probe)
            hm.append(time.perf_counter() - start)

            raw_data = blobs(n, 1000 + run)
            os.sync()
            raw1.append(
                await trio.to_thread.run_sync(raw_create, parent / f"raw1-{run}", raw_data, 1)
            )
            os.sync()
            raw4.append(
                await trio.to_thread.run_sync(raw_create, parent / f"raw4-{run}", raw_data, 4)
            )
            os.sync()

        def rate(label: str, seconds: list[float], note: str = "") -> None:
            s = median(seconds)
            rows.append((label, f"{n / s:,.0f} blobs/s ({mb / s:,.0f} MB/s)", note))

        rate("MemoryStore write, 5,000 x 4 KiB", mem_w)
        rate("MemoryStore read, 5,000 x 4 KiB", mem_r)
        rate(
            "FilesystemStore write (fsync never)",
            fs_w,
            f"{median(raw1) / median(fs_w):.2f}x raw 1-thread",
        )
        rate("FilesystemStore read", fs_r)
        rate("raw create+write+rename, 1 thread", raw1, "the limit")
        rate("raw create+write+rename, 4 threads", raw4)
        rows.append(
            (
                f"FilesystemStore.has_many, {args.probe:,} digests (half present)",
                f"{args.probe / median(hm):,.0f} digests/s",
                f"{median(hm) * 1e3:.1f} ms",
            )
        )

        content = parent / "big" / "cas"
        await trio.to_thread.run_sync(populate, content, args.open_blobs)
        opens = []
        for _ in range(args.runs):
            store = FilesystemStore(content, parent / "big" / "tmp", 1 << 40)
            start = time.perf_counter()
            await store.open()
            opens.append(time.perf_counter() - start)
            assert store.statistics().blob_count == args.open_blobs
        rows.append(
            (
                f"FilesystemStore.open() with {args.open_blobs:,} blobs",
                f"{median(opens):.2f} s",
                f"min {min(opens):.2f} s, max {max(opens):.2f} s",
            )
        )
    finally:
        shutil.rmtree(parent, ignore_errors=True)

    print(f"Medians of {args.runs} runs, {os.cpu_count()} CPUs, concurrency {args.concurrency}.\n")
    print("| measurement | result | note |")
    print("|---|---|---|")
    for label, result, note in rows:
        print(f"| {label} | {result} | {note} |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--blobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--probe", type=int, default=10_000)
    parser.add_argument("--open-blobs", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="parent of the temporary directory")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs: medians need at least 5 runs")
    return args


if __name__ == "__main__":
    trio.run(main, parse_args())
