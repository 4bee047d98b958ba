"""A real scheduler over a real MemoryStore, and a fake worker the tests drive.

Used by the scheduler tests and by the service tests that put the Execution
service in front of a scheduler. Nothing here fails by itself; the waits
(``FakeWorker.next_lease``, ``Harness.wait_stage``) raise ``trio.TooSlowError``
after their timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import trio

from lre.cas import MemoryStore
from lre.config import FairShareSpec, PropertyModification, PropertyValue, SimpleSchedulerSpec
from lre.digest import Digest
from lre.errors import Unavailable
from lre.proto import re_pb2
from lre.scheduler import (
    Completed,
    Lease,
    OperationSnapshot,
    Reservation,
    ResourcePolicy,
    Scheduler,
    Stage,
    WorkerInfo,
)
from tests._support.actions import blob_digest, build_action, put_blobs

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MODS = (PropertyModification(add=PropertyValue(name="cpu_count", value="1")),)


def worker_info(
    name: str = "w1",
    *,
    cpus: int = 4,
    memory: int = 8 * GiB,
    max_inflight: int = 0,
    properties: Mapping[str, frozenset[str]] | None = None,
    max_timeout: float = 3600.0,
    default_timeout: float = 1200.0,
) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        properties=properties if properties is not None else {"OSFamily": frozenset({"linux"})},
        capacity=Reservation(cpus * 1000, memory),
        max_inflight=max_inflight,
        max_action_timeout_s=max_timeout,
        default_timeout_s=default_timeout,
    )


@dataclass
class ActionBuilder:
    """Builds actions (``tests._support.actions``) straight into ``cas``."""

    cas: MemoryStore
    counter: int = 0

    async def action(
        self,
        *args: str,
        platform: Mapping[str, str] | None = None,
        command_platform: Mapping[str, str] | None = None,
        timeout_s: int | None = None,
        do_not_cache: bool = False,
        files: Mapping[str, bytes] | None = None,
        upload: bool = True,
    ) -> Digest:
        """Store a Command, input tree and Action; return the Action's digest.
        Each call makes a distinct action unless ``args`` repeat. With
        ``upload`` false the files' contents are left out of the store."""
        self.counter += 1
        built = build_action(
            list(args) or ["/bin/true", str(self.counter)],
            inputs=files,
            action_platform=platform,
            command_platform=command_platform,
            timeout_s=timeout_s,
            do_not_cache=do_not_cache,
        )
        contents = {blob_digest(data) for data in (files or {}).values()}
        await put_blobs(
            self.cas, {d: b for d, b in built.blobs.items() if upload or d not in contents}
        )
        return built.digest


def execute_request(
    digest: Digest, *, instance: str = "main", priority: int = 0, skip_cache: bool = False
) -> re_pb2.ExecuteRequest:
    request = re_pb2.ExecuteRequest(
        instance_name=instance, action_digest=digest.to_proto(), skip_cache_lookup=skip_cache
    )
    request.execution_policy.priority = priority
    return request


@dataclass
class FakeWorker:
    """Leases everything the scheduler gives it into ``leases``; the test
    decides when and how each finishes."""

    scheduler: Scheduler
    info: WorkerInfo
    send: trio.MemorySendChannel[Lease]
    receive: trio.MemoryReceiveChannel[Lease]
    held: list[Lease] = field(default_factory=list)

    async def loop(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.scheduler.register_worker(self.info)
        task_status.started()
        while True:
            try:
                lease = await self.scheduler.lease(self.info.name)
            except Unavailable:
                return  # unregistered
            self.held.append(lease)
            await self.send.send(lease)

    async def next_lease(self, timeout: float = 5.0) -> Lease:
        with trio.fail_after(timeout):
            return await self.receive.receive()

    def no_lease_pending(self) -> bool:
        try:
            lease = self.receive.receive_nowait()
        except trio.WouldBlock:
            return True
        raise AssertionError(f"unexpected lease {lease.operation_name}")

    def complete(self, lease: Lease, exit_code: int = 0) -> None:
        result = re_pb2.ActionResult(exit_code=exit_code)
        result.execution_metadata.worker = self.info.name
        assert self.scheduler.report(lease.lease_id, Completed(result))
        self.held.remove(lease)


@dataclass
class Harness:
    scheduler: Scheduler
    cas: MemoryStore
    builder: ActionBuilder
    nursery: trio.Nursery

    async def add_worker(self, info: WorkerInfo | None = None) -> FakeWorker:
        send, receive = trio.open_memory_channel[Lease](1000)
        worker = FakeWorker(self.scheduler, info or worker_info(), send, receive)
        await self.nursery.start(worker.loop)
        return worker

    async def wait_stage(self, name: str, stage: Stage, timeout: float = 5.0) -> OperationSnapshot:
        with trio.fail_after(timeout):
            while True:
                snapshot = self.scheduler.get_operation(name)
                if snapshot.stage >= stage:
                    return snapshot
                await trio.sleep(0.001)


def make_scheduler(
    cas: MemoryStore,
    *,
    retain: float = 60.0,
    retries: int = 2,
    resources: ResourcePolicy | None = None,
    detach_grace_s: float = 2.0,
    fair_share: FairShareSpec | None = None,
    **kwargs: object,
) -> Scheduler:
    spec = SimpleSchedulerSpec(
        retain_completed_for_s=retain,  # type: ignore[arg-type]
        max_job_retries=retries,
        progress_interval_s=10,  # type: ignore[arg-type]
        fair_share=fair_share or FairShareSpec(),
    )
    return Scheduler(
        spec,
        cas=cas,
        modifications=DEFAULT_MODS,
        resources=resources,
        detach_grace_s=detach_grace_s,
        **kwargs,  # type: ignore[arg-type]
    )


async def start_harness(nursery: trio.Nursery, **kwargs: object) -> Harness:
    """A running scheduler (options as ``make_scheduler``) in ``nursery``."""
    cas = MemoryStore(1 << 30)
    scheduler = make_scheduler(cas, **kwargs)  # type: ignore[arg-type]
    await nursery.start(scheduler.run)
    return Harness(scheduler, cas, ActionBuilder(cas), nursery)
