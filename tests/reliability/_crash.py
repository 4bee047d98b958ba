"""Run ``lre up`` as a subprocess, load it, SIGKILL it, restart, check what it serves.

Shared by ``tests/reliability/test_crash.py`` and
``test_crash_executions.py``. Everything lives under one root
directory; the server listens on 127.0.0.1 with a port it picks itself (the
address comes from its pid file).

A cycle: start lre on the same directories, check it (``verify``), run
uploads (ByteStream, chunked, and BatchUpdateBlobs) and action-cache updates
on several client threads, SIGKILL lre at a random moment. ``verify``
checks that every blob the server reports present reads back with the
right hash and size, that everything acknowledged before the kill is still
there, and that every action-cache entry it serves is complete.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from tests._support.reapi import digest, open_channel

CHUNK = 64 << 10
INSTANCE = "main"


def key(d: re_pb2.Digest) -> tuple[str, int]:
    return d.hash, d.size_bytes


class LreProcess:
    """``python -m lre up`` on ``config`` (all directories under ``root``)."""

    def __init__(self, root: Path, config_text: str) -> None:
        self.root = root
        self.config = root / "lre.json5"
        self.config.write_text(config_text)
        self.state_dir = root / "state"
        self.log = root / "lre-up.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self, timeout: float = 60) -> str:
        """Start and wait until it listens; returns the gRPC address."""
        from lre.cli._daemon import read_pid_file

        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lre", "up", "--no-tui", "--no-client-config",
                 "--config", str(self.config)],
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lre up exited with {self.proc.returncode}:\n{self.tail()}")
            running = read_pid_file(self.state_dir)
            if running is not None and running.pid == self.proc.pid and running.grpc_address:
                self.address = running.grpc_address
                return self.address
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"lre up did not listen within {timeout} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, grace: float = 20) -> int | None:
        """SIGTERM, SIGKILL after ``grace``; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


@dataclass
class Ledger:
    """What the clients tried and what the server acknowledged (thread-safe)."""

    attempted: dict[tuple[str, int], re_pb2.Digest] = field(default_factory=dict)
    acknowledged: set[tuple[str, int]] = field(default_factory=set)
    actions: dict[tuple[str, int], re_pb2.Digest] = field(default_factory=dict)
    actions_acknowledged: set[tuple[str, int]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attempt(self, *digests: re_pb2.Digest) -> None:
        with self.lock:
            for d in digests:
                self.attempted[key(d)] = d

    def ack(self, *digests: re_pb2.Digest) -> None:
        with self.lock:
            self.acknowledged.update(key(d) for d in digests)


def _write_requests(data: bytes, d: re_pb2.Digest) -> Iterator[bs_pb2.WriteRequest]:
    name = f"{INSTANCE}/uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
    offset = 0
    while True:
        piece = data[offset : offset + CHUNK]
        last = offset + len(piece) >= len(data)
        yield bs_pb2.WriteRequest(
            resource_name=name if offset == 0 else "",
            write_offset=offset,
            data=piece,
            finish_write=last,
        )
        offset += len(piece)
        if last:
            return
        time.sleep(0)  # let the kill land mid-stream now and then


def load(address: str, ledger: Ledger, stop: threading.Event, seed: int) -> int:
    """Upload blobs and action results until ``stop`` or the server dies; returns calls made."""
    rng = random.Random(seed)
    calls = 0
    with open_channel(address) as ch:
        cas = re_grpc.ContentAddressableStorageStub(ch)
        bytestream = bs_grpc.ByteStreamStub(ch)
        ac = re_grpc.ActionCacheStub(ch)
        while not stop.is_set():
            try:
                if rng.random() < 0.5:
                    data = rng.randbytes(rng.choice([1, 100, 70_000, 300_000, 2_000_000]))
                    d = digest(data)
                    ledger.attempt(d)
                    bytestream.Write(_write_requests(data, d), timeout=30)
                    ledger.ack(d)
                    outputs = [d]
                else:
                    blobs = [rng.randbytes(rng.randrange(1, 40_000)) for _ in range(8)]
                    ds = [digest(b) for b in blobs]
                    ledger.attempt(*ds)
                    response = cas.BatchUpdateBlobs(
                        re_pb2.BatchUpdateBlobsRequest(
                            instance_name=INSTANCE,
                            requests=[
                                re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=b)
                                for d, b in zip(ds, blobs, strict=True)
                            ],
                        ),
                        timeout=30,
                    )
                    ledger.ack(*(r.digest for r in response.responses if r.status.code == 0))
                    outputs = ds
                calls += 1
                action = digest(uuid.uuid4().bytes)
                result = re_pb2.ActionResult(
                    output_files=[
                        re_pb2.OutputFile(path=f"out/{i}", digest=d) for i, d in enumerate(outputs)
                    ],
                    stdout_digest=outputs[0],
                )
                with ledger.lock:
                    ledger.actions[key(action)] = action
                ac.UpdateActionResult(
                    re_pb2.UpdateActionResultRequest(
                        instance_name=INSTANCE, action_digest=action, action_result=result
                    ),
                    timeout=30,
                )
                with ledger.lock:
                    ledger.actions_acknowledged.add(key(action))
                calls += 1
            except grpc.RpcError:
                return calls  # the server was killed
    return calls


@dataclass
class Verdict:
    present: int
    verified: int
    complete_actions: int
    problems: list[str]


def _read(bytestream: bs_grpc.ByteStreamStub, d: re_pb2.Digest) -> bytes:
    name = f"{INSTANCE}/blobs/{d.hash}/{d.size_bytes}"
    return b"".join(
        r.data for r in bytestream.Read(bs_pb2.ReadRequest(resource_name=name), timeout=60)
    )


def verify(address: str, ledger: Ledger) -> Verdict:
    """Check what the (restarted) server at ``address`` serves against ``ledger``."""
    problems: list[str] = []
    present: set[tuple[str, int]] = set()
    verified = 0
    complete = 0
    with open_channel(address) as ch:
        cas = re_grpc.ContentAddressableStorageStub(ch)
        bytestream = bs_grpc.ByteStreamStub(ch)
        ac = re_grpc.ActionCacheStub(ch)
        digests = list(ledger.attempted.values())
        for start in range(0, len(digests), 5000):
            part = digests[start : start + 5000]
            missing = cas.FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(instance_name=INSTANCE, blob_digests=part),
                timeout=60,
            ).missing_blob_digests
            absent = {key(m) for m in missing}
            present.update(key(d) for d in part if key(d) not in absent)
        for k in sorted(present):
            d = ledger.attempted[k]
            data = _read(bytestream, d)
            if len(data) != d.size_bytes or hashlib.sha256(data).hexdigest() != d.hash:
                problems.append(f"blob {d.hash}/{d.size_bytes} reads back {len(data)} wrong bytes")
            else:
                verified += 1
        lost = ledger.acknowledged - present
        if lost:
            problems.append(f"{len(lost)} acknowledged blobs are gone, e.g. {sorted(lost)[0]}")
        for k, action in ledger.actions.items():
            try:
                result = ac.GetActionResult(
                    re_pb2.GetActionResultRequest(instance_name=INSTANCE, action_digest=action),
                    timeout=30,
                )
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    problems.append(f"GetActionResult {k}: {error.code()} {error.details()}")
                elif k in ledger.actions_acknowledged:
                    problems.append(f"acknowledged action result {k} is gone")
                continue
            referenced = [o.digest for o in result.output_files] + [result.stdout_digest]
            for d in referenced:
                data = _read(bytestream, d)
                if hashlib.sha256(data).hexdigest() != d.hash or len(data) != d.size_bytes:
                    problems.append(f"action {k} serves output {d.hash} with wrong content")
            complete += 1
    return Verdict(len(present), verified, complete, problems)


def stray_files(root: Path) -> list[str]:
    """Files in the CAS content directory whose bytes do not match their name."""
    bad = []
    content = root / "cas"
    for shard in content.iterdir() if content.exists() else ():
        for entry in shard.iterdir():
            name = entry.name.removesuffix(".x")
            hash_hex, _, size = name.partition("-")
            data = entry.read_bytes()
            if hashlib.sha256(data).hexdigest() != hash_hex or str(len(data)) != size:
                bad.append(str(entry))
    return bad


def crash_cycle(
    lre: LreProcess, ledger: Ledger, rng: random.Random, *, threads: int = 4
) -> tuple[Verdict, int, float]:
    """Start lre, verify it, load it, SIGKILL it at a random moment.

    Returns the verdict of the check made right after the start, the calls
    completed under load, and the moment (seconds into the load) of the kill.
    """
    address = lre.start()
    verdict = verify(address, ledger)
    stop = threading.Event()
    counts: list[int] = []

    def run(seed: int) -> None:
        counts.append(load(address, ledger, stop, seed))

    workers = [threading.Thread(target=run, args=(rng.randrange(1 << 30),)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    moment = rng.uniform(0.05, 1.5)
    time.sleep(moment)
    lre.kill()
    stop.set()
    for worker in workers:
        worker.join(60)
    return verdict, sum(counts), moment


def clean_exit_check(lre: LreProcess, ledger: Ledger) -> Verdict:
    """A last start, check and clean stop (SIGTERM) after the crash cycles."""
    address = lre.start()
    try:
        return verify(address, ledger)
    finally:
        status = lre.stop()
        if status != 0:
            raise RuntimeError(f"lre did not stop cleanly (status {status}):\n{lre.tail()}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
