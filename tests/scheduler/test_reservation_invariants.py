"""Random load against the real scheduler: reservations never exceed what
workers (and the memory budget) offer, in-flight bounds hold, and no worker
sits idle while an action it could run waits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from lre.errors import Internal, Unavailable
from lre.proto import re_pb2
from lre.scheduler import (
    Backpressure,
    Completed,
    InfrastructureFailure,
    Lease,
    MemoryExceeded,
    ResourcePolicy,
    Scheduler,
    WorkerInfo,
)
from tests._support.scheduler import GiB, Harness, MiB, execute_request, start_harness, worker_info

BUDGET = 6 * GiB


def _parse_memory(text: str) -> float:
    number, unit = text.split(" ")
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB}[unit]


async def test_reservations_never_exceed_capacity_under_random_load(
    nursery: trio.Nursery,
) -> None:
    token = trio.lowlevel.current_trio_token()

    def call(fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=token)

    class Load(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.scope = trio.CancelScope()
            self.harness: Harness = call(self._start)
            self.held: dict[str, list[Lease]] = {}
            self.workers: dict[str, WorkerInfo] = {}
            self.ops: list[str] = []

        async def _start(self) -> Harness:
            result: list[Harness] = []

            async def host(task_status: trio.TaskStatus[None]) -> None:
                with self.scope:
                    async with trio.open_nursery() as inner:
                        policy = ResourcePolicy(
                            cold_memory_bytes=256 * MiB,
                            ladder=(1 * GiB, 2 * GiB),
                            max_steps=3,
                            memory_budget_bytes=BUDGET,
                        )
                        result.append(await start_harness(inner, resources=policy, retries=1))
                        task_status.started()
                        await trio.sleep_forever()

            await nursery.start(host)
            return result[0]

        @property
        def scheduler(self) -> Scheduler:
            return self.harness.scheduler

        async def _settle(self) -> None:
            await trio.testing.wait_all_tasks_blocked(cushion=0.0001)

        async def _worker_loop(self, name: str) -> None:
            while True:
                try:
                    lease = await self.scheduler.lease(name)
                except Unavailable:
                    return
                self.held[name].append(lease)

        async def _add_worker(self, info: WorkerInfo) -> None:
            self.scheduler.register_worker(info)
            self.held[info.name] = []
            self.harness.nursery.start_soon(self._worker_loop, info.name)
            await self._settle()

        @precondition(lambda self: len(self.workers) < 3)
        @rule(
            cpus=st.integers(1, 6),
            memory_gib=st.integers(1, 8),
            max_inflight=st.integers(0, 3),
            mac=st.booleans(),
        )
        def add_worker(self, cpus: int, memory_gib: int, max_inflight: int, mac: bool) -> None:
            name = f"w{len(self.workers)}"
            info = worker_info(
                name,
                cpus=cpus,
                memory=memory_gib * GiB,
                max_inflight=max_inflight,
                properties={"OSFamily": frozenset({"mac" if mac else "linux"})},
            )
            self.workers[name] = info
            call(self._add_worker, info)

        async def _submit(self, cpus: int, memory_mib: int, os: str, priority: int) -> None:
            platform = {"cpu_count": str(cpus)}
            if memory_mib:
                platform["memory_kb"] = str(memory_mib * 1024)
            if os:
                platform["OSFamily"] = os
            digest = await self.harness.builder.action(platform=platform)
            op = self.scheduler.submit(execute_request(digest, priority=priority))
            self.ops.append(op.name)
            await self._settle()

        @rule(
            cpus=st.integers(1, 4),
            memory_mib=st.sampled_from([0, 0, 100, 700, 3000]),
            os=st.sampled_from(["", "linux", "mac"]),
            priority=st.integers(-2, 2),
        )
        def submit(self, cpus: int, memory_mib: int, os: str, priority: int) -> None:
            call(self._submit, cpus, memory_mib, os, priority)

        async def _finish(self, pick: int, kind: int) -> None:
            leases = [lease for held in self.held.values() for lease in held]
            if not leases:
                return
            lease = leases[pick % len(leases)]
            self.held[lease.worker_name].remove(lease)
            outcome = [
                Completed(re_pb2.ActionResult()),
                Backpressure(),
                InfrastructureFailure(Internal("boom")),
                MemoryExceeded(lease.reservation.memory_bytes * 2),
            ][kind]
            self.scheduler.report(lease.lease_id, outcome)
            await self._settle()

        @rule(pick=st.integers(0, 1000), kind=st.sampled_from([0, 0, 0, 1, 2, 3]))
        def finish(self, pick: int, kind: int) -> None:
            call(self._finish, pick, kind)

        async def _cancel(self, pick: int) -> None:
            if self.ops:
                name = self.ops[pick % len(self.ops)]
                self.scheduler.cancel(name)
            await self._settle()

        @rule(pick=st.integers(0, 1000))
        def cancel(self, pick: int) -> None:
            call(self._cancel, pick)

        async def _drain(self, pick: int, draining: bool) -> None:
            if self.workers:
                names = sorted(self.workers)
                self.scheduler.set_draining(names[pick % len(names)], draining)
            await self._settle()

        @rule(pick=st.integers(0, 10), draining=st.booleans())
        def drain(self, pick: int, draining: bool) -> None:
            call(self._drain, pick, draining)

        @invariant()
        def reservations_fit(self) -> None:
            stats = self.scheduler.statistics()
            assert stats.memory_reserved_bytes <= BUDGET
            total = 0
            for worker in stats.workers:
                assert worker.reserved.fits_in(worker.capacity), worker
                assert worker.reserved.millicpus >= 0 and worker.reserved.memory_bytes >= 0
                if worker.max_inflight:
                    assert worker.inflight <= worker.max_inflight
                assert worker.inflight == len(self.held[worker.name])
                total += sum(lease.reservation.memory_bytes for lease in worker.leases)
            assert total == stats.memory_reserved_bytes

        @invariant()
        def no_idle_worker_while_runnable_work_waits(self) -> None:
            stats = self.scheduler.statistics()
            if stats.memory_reserved_bytes:
                return  # the budget may be what holds the queue back
            for worker in stats.workers:
                if worker.draining or worker.inflight:
                    continue
                # An idle worker under an idle budget: anything still queued must
                # be unable to run on it.
                for label, count in stats.queued_by_reservation.items():
                    assert count > 0
                    fields = dict(part.split("=", 1) for part in label.split(",") if "=" in part)
                    offered = next(iter(self.workers[worker.name].properties["OSFamily"]))
                    os_ok = fields.get("OSFamily", offered) == offered
                    cpu_ok = float(fields["cpu"]) * 1000 <= worker.capacity.millicpus
                    memory = _parse_memory(fields.get("mem", "0 B"))
                    mem_ok = memory <= min(worker.capacity.memory_bytes, BUDGET)
                    assert not (os_ok and cpu_ok and mem_ok), (worker, label)

        async def _stop(self) -> None:
            self.scope.cancel()

        def teardown(self) -> None:
            call(self._stop)

    await trio.to_thread.run_sync(
        lambda: run_state_machine_as_test(
            Load,
            settings=settings(
                max_examples=40, stateful_step_count=30, deadline=None, database=None
            ),
        )
    )
