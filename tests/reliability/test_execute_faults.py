"""Execute-level client misbehaviour against a whole in-process lre
(``lre.app.Application``): streams never read, disconnects at every stage of
an action, and 10,000 concurrent calls mixing Execute and CAS calls.

The clients are blocking grpc stubs running in threads (``trio.to_thread``),
each on a channel of its own so that closing the channel is a real
disconnect. Before and after each scenario the test counts what the process
holds: open fds (``/proc/self/fd``), OS threads, Trio tasks, bridge request
tasks, live child processes, files in the worker's work directory, and the
scheduler's live operations and watchers; after a settle time everything
must be back at the baseline.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import trio

from lre.app import Application, ReadyInfo
from lre.proto import operations_pb2, re_pb2
from lre.scheduler import Scheduler
from lre.worker.process._process_limit import process_limits
from tests._support.configs import WORKER_EXTRA, app_config_text, config_of
from tests._support.processes import processes_with, wait_until
from tests._support.reapi import Client, Stage, digest, metadata_of, response_of
from tests._support.servers import serve_app

OK = grpc.StatusCode.OK.value[0]
CANCELLED = grpc.StatusCode.CANCELLED.value[0]


# ------------------------------------------------------------------ the server and its counts


@dataclass
class Running:
    app: Application
    address: str
    work: Path

    @property
    def scheduler(self) -> Scheduler:
        return self.app.schedulers["queue"]


@asynccontextmanager
async def running_app(root: Path, *, max_inflight: int) -> AsyncIterator[Running]:
    """A whole lre on 127.0.0.1 in this Trio run; stopped (and checked stopped) on exit."""
    text = app_config_text(root, max_inflight=max_inflight, extra_worker=WORKER_EXTRA)
    app = Application(config_of(text, source="faults.json5"))
    async with trio.open_nursery() as nursery:
        ready: ReadyInfo = await nursery.start(serve_app, app)
        try:
            yield Running(app, ready.grpc_addresses[0], root / "work" / "local")
        finally:
            app.request_stop()
            with trio.fail_after(60):
                await app.stopped.wait()


def trio_tasks() -> int:
    count = 0
    root = trio.lowlevel.current_root_task()
    assert root is not None
    stack = [root]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


#: Programs of the processes a containment backend keeps for its lifetime.
_BACKEND_PROCESSES = ("_guardian.py", "_view_helper.py", "slirp4netns")


def live_children() -> list[psutil.Process]:
    """Live descendants of this process, except process guardians, userns
    view helpers and the actions' slirp4netns (one of each lives as long as
    each containment backend, like
    the spawner threads; an earlier test in this process may have made one)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any(part.endswith(_BACKEND_PROCESSES) for part in child.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def leftovers(work: Path) -> list[str]:
    """What finished actions left in the worker's work directory.

    Allowed: the lock file, the linked-inputs journal, and ready-made action
    directories (``a{n}/`` with empty ``stdout``/``stderr`` logs, an empty
    ``tmp/`` and a ``root/`` holding nothing but empty directories, kept for
    the next action's staging to reuse).
    Anything else (inputs, outputs, symlinks, non-empty logs) is a leftover.
    """
    found = []
    for parent, dirs, files in os.walk(work):
        depth = len(Path(parent).relative_to(work).parts)
        for name in files:
            full = os.path.join(parent, name)
            if depth == 0 and name in (".lock", "linked-inputs.journal"):
                continue
            if depth == 1 and name in ("stdout", "stderr") and os.path.getsize(full) == 0:
                continue
            found.append(full)
        if depth >= 2:  # inside a{n}/root/: directories may stay, symlinks may not
            found.extend(
                os.path.join(parent, d) for d in dirs if os.path.islink(os.path.join(parent, d))
            )
    return found


def action_dirs(work: Path) -> int:
    return sum(1 for entry in os.scandir(work) if entry.is_dir(follow_symlinks=False))


def stocked_layers(server: Running) -> int:
    """Descriptors of the tmpfs that ready action directories hold for their views."""
    return sum(
        directory.layers is not None
        for w in server.app.workers
        if w.runner is not None
        for directory in w.runner.parts.directories._stock
    )


def resources(server: Running) -> dict[str, int]:
    stats = server.scheduler.statistics()
    return {
        # less those the pids cgroups keep open (reused, bounded by the most
        # actions at once: a test running more at once than any before it
        # makes a cgroup, which is not a leak)
        # and less each ready action directory's tmpfs (the stock grows up to
        # twice the worker's concurrency after a burst: not a leak either)
        "fds": len(os.listdir("/proc/self/fd"))
        - process_limits().descriptors
        - stocked_layers(server),
        "threads": len(os.listdir("/proc/self/task")),
        "trio_tasks": trio_tasks(),
        "bridge_running": server.app.bridge.statistics().running,
        "children": len(live_children()),
        "work_leftovers": len(leftovers(server.work)),
        "live_operations": sum(stats.by_stage.values()),
        "watchers": stats.watchers,
        "inflight": sum(w.inflight for w in stats.workers),
        # released action directories not yet recycled or removed (the
        # janitor's batches run in a thread and lag behind on a busy machine)
        "directories_busy": sum(
            w.runner is not None and not w.runner.parts.directories.idle for w in server.app.workers
        ),
    }


#: Counts that must come back to exactly zero.
ZERO = (
    "bridge_running",
    "children",
    "work_leftovers",
    "live_operations",
    "watchers",
    "inflight",
    "directories_busy",
)
#: Threads may differ a little (Trio's idle worker threads come and go).
THREAD_SLACK = 2


def back_to(baseline: dict[str, int], now: dict[str, int]) -> bool:
    return (
        all(now[k] == 0 for k in ZERO)
        and now["trio_tasks"] <= baseline["trio_tasks"]
        and now["fds"] <= baseline["fds"]
        and now["threads"] <= baseline["threads"] + THREAD_SLACK
    )


async def settled(server: Running, baseline: dict[str, int], seconds: float = 30) -> dict[str, int]:
    """Poll until the counts are back at ``baseline``; the last counts."""
    deadline = trio.current_time() + seconds
    now = resources(server)
    while not back_to(baseline, now) and trio.current_time() < deadline:
        await trio.sleep(0.1)
        now = resources(server)
    return now


async def quiet_baseline(server: Running) -> dict[str, int]:
    """Counts once nothing is running (after a warm-up)."""
    zero = {k: 0 for k in ZERO} | {"trio_tasks": 10**6, "fds": 10**6, "threads": 10**6}
    await settled(server, zero)
    await trio.sleep(0.5)
    baseline = resources(server)
    assert all(baseline[k] == 0 for k in ZERO), baseline
    return baseline


def assert_back(baseline: dict[str, int], after: dict[str, int], what: str) -> None:
    assert back_to(baseline, after), f"{what}: before {baseline}, after {after}"


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args)


def warm_up(address: str) -> None:
    """One real action end to end (grpc, spawner threads and stores warm up)."""
    client = Client(address)
    try:
        response = client.run(["/bin/sh", "-c", "echo warm"])
        assert response.status.code == OK and response.result.exit_code == 0, response
    finally:
        client.close()


# ------------------------------------------------------------------ 1. streams never read


def capabilities_latency(address: str) -> float:
    client = Client(address)
    try:
        started = time.monotonic()
        client.capabilities.GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name="main"), timeout=10
        )
        return time.monotonic() - started
    finally:
        client.close()


def open_unread_streams(address: str, count: int) -> tuple[Client, list[Any]]:
    """Upload ``count`` distinct short actions, then start an Execute call for
    each that nobody ever iterates."""
    client = Client(address)
    prepared = [client.prepare(["/bin/sh", "-c", "echo short"]) for _ in range(count)]
    calls = [client.execution.Execute(client.execute_request(p), timeout=120) for p in prepared]
    return client, calls


def cancel_all(client: Client, calls: list[Any]) -> None:
    for call in calls:
        call.cancel()
    client.close()


async def test_execute_streams_never_read(tmp_path: Path) -> None:
    async with running_app(tmp_path, max_inflight=2) as server:
        await in_thread(warm_up, server.address)
        baseline = await quiet_baseline(server)
        before = server.scheduler.statistics()

        client, calls = await in_thread(open_unread_streams, server.address, 200)
        # Every call reached the scheduler although no client reads a byte.
        submitted = before.submitted + 200
        with trio.fail_after(30):
            while (now := server.scheduler.statistics().submitted) < submitted:
                assert now >= before.submitted
                await trio.sleep(0.05)
        # The server answers others promptly meanwhile (200 streams open, the
        # worker busy with their actions).
        latencies = [await in_thread(capabilities_latency, server.address) for _ in range(5)]
        assert max(latencies) < 1.0, latencies
        await trio.sleep(1.0)
        await in_thread(cancel_all, client, calls)

        after = await settled(server, baseline)
        assert_back(baseline, after, "200 unread Execute streams")
        stats = server.scheduler.statistics()
        finished = {
            kind: stats.completions.get(kind, 0) - before.completions.get(kind, 0)
            for kind in ("success", "cancelled", "error", "nonzero_exit", "cached")
        }
        # Each action either ran to success or was cancelled; nothing else.
        assert finished["success"] + finished["cancelled"] == 200, finished
        assert finished["error"] == finished["nonzero_exit"] == finished["cached"] == 0, finished
        assert await in_thread(capabilities_latency, server.address) < 1.0


# ------------------------------------------------------------------ 2. disconnect at every stage


class Disconnecting:
    """One client on a channel of its own, reading an Execute stream until a
    stage, then dropping the whole connection (a real disconnect)."""

    def __init__(self, address: str, arguments: list[str], **prepare: Any) -> None:
        self.client = Client(address)
        self.prepared = self.client.prepare(arguments, **prepare)
        self.call: Any = None
        self.seen: list[int] = []
        self.name = ""

    def until(self, stage: int) -> operations_pb2.Operation:
        """Start Execute (once) and read it until an update with ``stage``."""
        if self.call is None:
            self.call = self.client.execution.Execute(
                self.client.execute_request(self.prepared), timeout=120
            )
        for operation in self.call:
            self.name = operation.name
            self.seen.append(metadata_of(operation).stage)
            if self.seen[-1] == stage:
                return operation
        raise AssertionError(f"the stream ended before stage {stage}: {self.seen}")

    def disconnect(self) -> None:
        self.client.close()


def outcome(address: str, name: str) -> re_pb2.ExecuteResponse:
    """The final ExecuteResponse of operation ``name`` (asked on a new connection)."""
    client = Client(address)
    try:

        def get() -> operations_pb2.Operation:
            got: operations_pb2.Operation = client.operations.GetOperation(
                operations_pb2.GetOperationRequest(name=name), timeout=10
            )
            return got

        assert wait_until(lambda: get().done, seconds=30), get()
        return response_of(get())
    finally:
        client.close()


def disconnect_scenario(address: str, work: Path, tag: str) -> dict[str, Any]:
    """Every stage of an action's life, each with a client that goes away there.

    ``tag`` makes the process markers unique per round. Returns what the
    checks below need.
    """
    busy = f"1000.{tag}1"
    never = f"1000.{tag}2"
    group = f"1000.{tag}3"
    report: dict[str, Any] = {}

    # The single slot is taken by a long action, so the next ones wait.
    # Each long action first leaves a file in its directory (a leftover if
    # the directory were not removed): in its TMPDIR, which lies in the action
    # directory on disk (what it writes into its input root lands on its view's
    # tmpfs, never under the work directory).
    holder = Disconnecting(address, ["/bin/sh", "-c", f'echo x > "$TMPDIR/left"; sleep {busy}'])
    holder.until(Stage.EXECUTING)
    assert wait_until(lambda: processes_with(busy)), "the long action never started"
    # Its file is there while it runs (so the leftover check below can fail).
    assert wait_until(lambda: leftovers(work)), os.listdir(work)

    # Gone right after the first update (stage CACHE_CHECK), and gone while QUEUED.
    early = Disconnecting(address, ["/bin/sh", "-c", f"sleep {never}"])
    early.until(Stage.CACHE_CHECK)
    early.disconnect()
    queued = Disconnecting(address, ["/bin/sh", "-c", f"sleep {never}"])
    queued.until(Stage.QUEUED)
    queued.disconnect()
    report["early"] = outcome(address, early.name)
    report["queued"] = outcome(address, queued.name)

    # Gone while EXECUTING: the holder's process group must die.
    holder.disconnect()
    assert wait_until(lambda: not processes_with(busy), seconds=30), processes_with(busy)
    report["executing"] = outcome(address, holder.name)

    # A process group with a background child: both die with the group.
    parent = Disconnecting(
        address, ["/bin/sh", "-c", f"echo x > left; sleep {group} & sleep {group}; wait"]
    )
    parent.until(Stage.EXECUTING)
    assert wait_until(lambda: len(processes_with(group)) == 3), processes_with(group)  # sh + 2
    parent.disconnect()
    assert wait_until(lambda: not processes_with(group), seconds=30), processes_with(group)
    report["group"] = outcome(address, parent.name)

    # Gone right after COMPLETED, without reading the end of the stream.
    done = Disconnecting(
        address,
        ["/bin/sh", "-c", "sleep 0.3; mkdir -p out; echo hi > out/f"],
        output_paths=["out/f"],
    )
    done.until(Stage.COMPLETED)
    done.disconnect()
    report["completed"] = outcome(address, done.name)

    # The queued actions never started.
    report["never_started"] = processes_with(never)
    return report


async def test_disconnect_at_every_stage_leaks_nothing(tmp_path: Path) -> None:
    async with running_app(tmp_path, max_inflight=1) as server:
        await in_thread(warm_up, server.address)
        for round_ in range(2):  # the second round must not add anything either
            baseline = await quiet_baseline(server)
            before = server.scheduler.statistics()
            tag = f"{os.getpid() % 10**6:06d}{round_}"
            report = await in_thread(disconnect_scenario, server.address, server.work, tag)

            for stage in ("early", "queued", "executing", "group"):
                assert report[stage].status.code == CANCELLED, (stage, report[stage])
            completed = report["completed"]
            assert completed.status.code == OK and completed.result.exit_code == 0, completed
            assert [f.path for f in completed.result.output_files] == ["out/f"]
            assert report["never_started"] == []

            after = await settled(server, baseline)
            assert_back(baseline, after, f"round {round_}")
            stats = server.scheduler.statistics()
            assert (
                stats.completions.get("cancelled", 0) - before.completions.get("cancelled", 0) == 4
            ), stats.completions
            assert (
                stats.completions.get("success", 0) - before.completions.get("success", 0) == 1
            ), stats.completions
            # The actions' directories are gone: once the janitor is idle
            # (``settled`` waits for it) what remains is the lock and empty
            # ready-made directories, at most twice the stock (how many of
            # them are recycled rather than made anew depends on how the
            # janitor's batches interleave with the takes, so the count
            # itself is timing; the bound is not), in every round.
            assert leftovers(server.work) == []
            (worker,) = server.app.workers
            assert worker.runner is not None
            bound = worker.runner.parts.directories.kept_at_most
            count = action_dirs(server.work)
            assert count <= bound, (round_, count, bound, os.listdir(server.work))


# ------------------------------------------------------------------ 4. 10,000 concurrent calls

CALLS = 10_000
CHANNELS = 8


@dataclass
class Tally:
    """Outcome of every call, by kind and status code name."""

    counts: Counter[tuple[str, str]]
    unclear: list[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def mixed_burst(address: str, count: int) -> Tally:
    """``count`` calls started together on ``CHANNELS`` channels: 40 %
    Execute of an action whose result is cached, the rest CAS and AC calls."""
    seed = Client(address)
    try:
        prepared = seed.prepare(["/bin/sh", "-c", "echo cached-output"])
        first = seed.execute(prepared)
        assert response_of(first[-1]).status.code == OK
        blob = b"x" * 1000
        seed.upload([blob])
    finally:
        seed.close()
    blob_digest = digest(blob)
    clients = [Client(address) for _ in range(CHANNELS)]
    pending: list[tuple[str, Any]] = []
    try:
        for i in range(count):
            client = clients[i % CHANNELS]
            kind = ("execute", "execute", "execute", "execute", "find", "find",
                    "read", "read", "ac", "update")[i % 10]  # fmt: skip
            if kind == "execute":
                call = client.execution.Execute(client.execute_request(prepared), timeout=300)
            elif kind == "find":
                call = client.cas.FindMissingBlobs.future(
                    re_pb2.FindMissingBlobsRequest(
                        instance_name="main", blob_digests=[blob_digest]
                    ),
                    timeout=300,
                )
            elif kind == "read":
                call = client.cas.BatchReadBlobs.future(
                    re_pb2.BatchReadBlobsRequest(instance_name="main", digests=[blob_digest]),
                    timeout=300,
                )
            elif kind == "ac":
                call = client.action_cache.GetActionResult.future(
                    re_pb2.GetActionResultRequest(
                        instance_name="main", action_digest=prepared.action_digest
                    ),
                    timeout=300,
                )
            else:
                data = i.to_bytes(4, "big") * 16
                call = client.cas.BatchUpdateBlobs.future(
                    re_pb2.BatchUpdateBlobsRequest(
                        instance_name="main",
                        requests=[
                            re_pb2.BatchUpdateBlobsRequest.Request(digest=digest(data), data=data)
                        ],
                    ),
                    timeout=300,
                )
            pending.append((kind, call))
        counts: Counter[tuple[str, str]] = Counter()
        unclear: list[str] = []
        for kind, call in pending:
            try:
                if kind == "execute":
                    operations = list(call)
                    response = response_of(operations[-1])
                    ok = response.status.code == OK and response.cached_result
                    if not ok:
                        unclear.append(f"execute: {response}")
                    counts[kind, "OK" if ok else "WRONG"] += 1
                    continue
                reply = call.result()
                ok = True
                if kind == "find":
                    ok = not reply.missing_blob_digests
                elif kind == "read":
                    ok = [r.data for r in reply.responses] == [blob]
                elif kind == "ac":
                    ok = reply.exit_code == 0 and bool(reply.stdout_digest.hash or reply.stdout_raw)
                else:
                    ok = [r.status.code for r in reply.responses] == [0]
                if not ok:
                    unclear.append(f"{kind}: {reply}")
                counts[kind, "OK" if ok else "WRONG"] += 1
            except grpc.RpcError as error:
                code = error.code()
                counts[kind, code.name] += 1
                clear = code in (
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    grpc.StatusCode.UNAVAILABLE,
                ) and bool(error.details())
                if not clear:
                    unclear.append(f"{kind}: {code.name} {error.details()!r}")
        return Tally(counts, unclear)
    finally:
        for client in clients:
            client.close()


@pytest.mark.slow
async def test_ten_thousand_mixed_calls(tmp_path: Path) -> None:
    async with running_app(tmp_path, max_inflight=2) as server:
        await in_thread(warm_up, server.address)
        baseline = await quiet_baseline(server)
        peak = dict(baseline)
        done = threading.Event()

        async def sample() -> None:
            while not done.is_set():
                now = resources(server)
                for k in ("threads", "fds", "trio_tasks", "bridge_running"):
                    peak[k] = max(peak[k], now[k])
                await trio.sleep(0.05)

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample)
            try:
                tally: Tally = await in_thread(mixed_burst, server.address, CALLS)
            finally:
                done.set()
        elapsed = trio.current_time() - started
        print(f"{CALLS} calls in {elapsed:.1f} s: {dict(tally.counts)}; peak {peak}")

        assert tally.total == CALLS, tally.counts
        assert tally.unclear == [], tally.unclear[:5]
        # Threads stay bounded: grpc's threads of the client channels and of the
        # server, Trio's worker cache (at most its default 40 tokens), spawners.
        assert peak["threads"] <= baseline["threads"] + 2 * CHANNELS + 48, (baseline, peak)
        after = await settled(server, baseline, seconds=60)
        assert_back(baseline, after, "10,000 calls")
        stats = server.scheduler.statistics()
        assert stats.cache_hits + stats.dedup_hits >= tally.counts["execute", "OK"]
