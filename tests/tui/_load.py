"""Drive the real ``Scheduler`` with many distinct actions (for snapshot and
metrics tests): a worker registered by the test leases actions and reports
results, so the scheduler's statistics are the real ones."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from lre.app._events import EventLog
from lre.app._snapshot import SnapshotAssembler
from lre.cas import MemoryStore, StoreStatistics
from lre.config import PropertyModification, PropertyValue, SimpleSchedulerSpec
from lre.proto import re_pb2
from lre.scheduler import Completed, Lease, RequestInfo, Reservation, Scheduler, WorkerInfo
from lre.snapshot import EventKind
from tests._support.actions import build_action, put_action

GIB = 1 << 30


@dataclass
class Load:
    scheduler: Scheduler
    cas: MemoryStore
    assembler: SnapshotAssembler
    worker: str
    #: per-action identifiers that must never become metric labels
    digests: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    held: list[Lease] = field(default_factory=list)
    submitted: int = 0


async def start_load(nursery: trio.Nursery, *, worker: str = "local", cpus: int = 64) -> Load:
    cas = MemoryStore(1 << 30)
    scheduler = Scheduler(
        SimpleSchedulerSpec(),
        cas=cas,
        modifications=(PropertyModification(add=PropertyValue(name="cpu_count", value="1")),),
    )
    await nursery.start(scheduler.run)
    scheduler.register_worker(
        WorkerInfo(
            name=worker,
            properties={"OSFamily": frozenset({"linux"})},
            capacity=Reservation(cpus * 1000, 64 * GIB),
        )
    )
    events = EventLog()

    def stores() -> dict[str, StoreStatistics]:
        return {"cas": cas.statistics()}

    assembler = SnapshotAssembler(
        address="127.0.0.1:0", scheduler=scheduler.statistics, stores=stores, events=events
    )
    return Load(scheduler, cas, assembler, worker)


async def submit(load: Load, count: int) -> None:
    """Submit ``count`` distinct actions (distinct mnemonic, target, command and
    cpu_count 1..3) and wait until none is in CACHE_CHECK any more."""
    for _ in range(count):
        n = load.submitted
        load.submitted += 1
        built = build_action(
            [f"/usr/bin/tool{n}", f"-O{n % 3}", f"src/file{n}.c"],
            action_platform={"OSFamily": "linux", "cpu_count": str(1 + n % 3)},
            instance="main",
        )
        digest = await put_action(load.cas, built)
        request = built.request
        info = RequestInfo(action_mnemonic=f"Mnemonic{n}", target_id=f"//pkg{n}:target")
        operation = load.scheduler.submit(request, request_info=info)
        load.digests.append(digest.hash)
        load.operations.append(operation.name)
    with trio.fail_after(10):
        for _ in range(10_000):  # polling: the scheduler offers no event for this
            if not load.scheduler.statistics().by_stage.get("CACHE_CHECK", 0):
                break
            await trio.sleep(0.001)


async def run(load: Load, finish: int, *, hold: int = 0) -> None:
    """Lease and finish ``finish`` actions (every 7th exits 1, every 11th is
    reported as a ladder kill), then lease ``hold`` more and keep them running."""
    for i in range(finish):
        with trio.fail_after(5):
            lease = await load.scheduler.lease(load.worker)
        result = re_pb2.ActionResult(exit_code=1 if i % 7 == 0 else 0)
        load.scheduler.report(lease.lease_id, Completed(result))
        if i % 11 == 0:
            target = lease.request_info.target_id
            load.assembler.events.add(
                EventKind.FAILURE,
                f"Mnemonic{i} {target} failed",
                summary=f"Mnemonic{i}",
                target=target,
            )
    for _ in range(hold):
        with trio.fail_after(5):
            load.held.append(await load.scheduler.lease(load.worker))
