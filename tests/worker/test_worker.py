"""LocalWorker against the real in-process Scheduler."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import pytest
import trio

from lre.cas import MemoryStore, read_bytes
from lre.config import worker_resources
from lre.config._scheduler_models import SimpleSchedulerSpec
from lre.config._worker_models import LocalWorkerSpec, PlatformPropertySpec, ResourceSpec
from lre.digest import Digest
from lre.proto import re_pb2
from lre.scheduler import OperationSnapshot, ResourcePolicy, Scheduler
from lre.worker import LocalWorker, PressureMonitor
from lre.worker.directories._workdir import WorkDirectoryInUse
from tests._support.actions import build_action, put_action

from .conftest import make_spec


async def submit(
    scheduler: Scheduler,
    store: MemoryStore,
    arguments: list[str],
    *,
    platform: Mapping[str, str] | None = None,
    outputs: tuple[str, ...] = (),
) -> OperationSnapshot:
    built = build_action(arguments, output_paths=outputs, command_platform=platform)
    digest = await put_action(store, built)
    request = re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
    return scheduler.submit(request)


async def finish(scheduler: Scheduler, name: str) -> OperationSnapshot:
    with trio.fail_after(60):
        async with scheduler.watch(name) as updates:
            async for snapshot in updates:
                if snapshot.done:
                    return snapshot
    raise AssertionError("watch ended without done")


def local_worker(spec: LocalWorkerSpec, scheduler: Scheduler, store: MemoryStore) -> LocalWorker:
    """A worker of ``spec`` reading the host's memory as the app's would."""
    return LocalWorker(
        spec,
        resources=worker_resources(spec),
        scheduler=scheduler,
        store=store,
        pressure=PressureMonitor(int(spec.resources.memory_headroom)),
    )


@asynccontextmanager
async def running(
    store: MemoryStore,
    specs: list[LocalWorkerSpec],
    *,
    resources: ResourcePolicy | None = None,
) -> AsyncIterator[tuple[Scheduler, list[LocalWorker]]]:
    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store, resources=resources)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        workers = [local_worker(spec, scheduler, store) for spec in specs]
        for worker in workers:
            await nursery.start(worker.run)
        yield scheduler, workers
        nursery.cancel_scope.cancel()


async def test_runs_an_action_through_the_scheduler(tmp_path: Path, store: MemoryStore) -> None:
    async with running(store, [make_spec(tmp_path)]) as (scheduler, _):
        op = await submit(scheduler, store, ["/bin/sh", "-c", "echo hello"])
        done = await finish(scheduler, op.name)
    assert done.error is None and done.result is not None
    assert done.result.exit_code == 0
    assert done.result.execution_metadata.worker == "w1"
    stdout = await read_bytes(store, Digest.from_proto(done.result.stdout_digest))
    assert stdout == b"hello\n"


async def test_auto_inflight_is_whole_cpus_of_capacity(tmp_path: Path, store: MemoryStore) -> None:
    """With the defaults (overcommit 1.5) a 2-CPU worker offers 3,000 millicpus
    and takes three one-CPU actions at once; an explicit limit still wins."""
    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store)
    spec = make_spec(tmp_path, resources=ResourceSpec(cpu_count=2))
    auto = local_worker(spec, scheduler, store)
    info = await auto.describe()
    assert info.capacity.millicpus == 3000
    assert info.max_inflight == 3
    spec = make_spec(tmp_path, max_inflight_tasks=2, resources=ResourceSpec(cpu_count=2))
    fixed = local_worker(spec, scheduler, store)
    assert (await fixed.describe()).max_inflight == 2


async def test_workers_receive_only_matching_actions(tmp_path: Path, store: MemoryStore) -> None:
    specs = [
        make_spec(
            tmp_path,
            name=name,
            platform_properties={"pool": PlatformPropertySpec(values=(name,))},
        )
        for name in ("alpha", "beta")
    ]
    specs.append(
        make_spec(
            tmp_path,
            name="gamma",
            platform_properties={"pool": PlatformPropertySpec(query_cmd="echo gamma")},
        )
    )
    async with running(store, specs) as (scheduler, _):
        ops = []
        for i in range(9):
            pool = ("alpha", "beta", "gamma")[i % 3]
            op = await submit(scheduler, store, ["/bin/echo", str(i)], platform={"pool": pool})
            ops.append((pool, op.name))
        for pool, name in ops:
            done = await finish(scheduler, name)
            assert done.result is not None, done.error
            assert done.result.execution_metadata.worker == pool


async def test_second_worker_on_same_directory_refused(tmp_path: Path, store: MemoryStore) -> None:
    spec = make_spec(tmp_path)
    async with running(store, [spec]) as (scheduler, _):
        second = local_worker(spec, scheduler, store)
        async with trio.open_nursery() as nursery:
            with pytest.raises(WorkDirectoryInUse):
                await nursery.start(second.run)


async def test_precondition_backpressure_then_runs(tmp_path: Path, store: MemoryStore) -> None:
    flag = tmp_path / "allow"
    spec = make_spec(tmp_path, precondition_script=f"test -e {flag}")
    async with running(store, [spec]) as (scheduler, (worker,)):
        op = await submit(scheduler, store, ["/bin/true"])
        with trio.fail_after(10):
            while worker.statistics().backpressured < 2:  # noqa: ASYNC110 (polling)
                await trio.sleep(0.05)
        # Idle worker backs off instead of spinning: only a few refusals.
        await trio.sleep(0.5)
        assert worker.statistics().backpressured <= 5
        flag.touch()
        done = await finish(scheduler, op.name)
    assert done.result is not None and done.result.exit_code == 0


async def test_shutdown_kills_running_actions(tmp_path: Path, store: MemoryStore) -> None:
    pidfile = tmp_path / "pids"
    # Each process is found from outside by its unusual sleep duration (in a
    # view, /proc inside is the action's own and shows only its own pids).
    token = str(300 + os.getpid() % 1000)
    script = (
        f"sh -c 'exec sleep {token}' & sh -c 'exec sleep {token}' & echo started > {pidfile}; wait"
    )

    def sleepers() -> list[int]:
        found = []
        for process in psutil.process_iter(["cmdline"]):
            if process.info["cmdline"] == ["sleep", token]:
                found.append(process.pid)
        return found

    # The marker file lies outside lre's directories, writable in the view.
    spec = make_spec(tmp_path, sandbox_writable_paths=(str(tmp_path),))
    async with running(store, [spec]) as (scheduler, (worker,)):
        await submit(scheduler, store, ["/bin/sh", "-c", script])
        with trio.fail_after(10):
            while not pidfile.exists() or len(sleepers()) < 2:  # noqa: ASYNC110
                await trio.sleep(0.02)
        assert worker.statistics().running == 1
        pids = sleepers()
    with trio.move_on_after(5):
        while any(psutil.pid_exists(p) for p in pids):  # noqa: ASYNC110 (other processes)
            await trio.sleep(0.02)
    survivors = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert survivors == []
    # The lock was released: a new worker may take the directory.
    async with running(store, [make_spec(tmp_path)]):
        pass


async def test_jobserver_tokens_and_directories_cleaned_at_stop(
    tmp_path: Path, store: MemoryStore
) -> None:
    spec = make_spec(tmp_path, resources=ResourceSpec(cpu_count=4))
    async with running(store, [spec]) as (scheduler, (worker,)):
        assert worker.jobserver_tokens() == (0, 0)
        built = build_action(["/bin/sh", "-c", "sleep 30"], command_platform={"cpu_count": "3"})
        digest = await put_action(store, built)
        scheduler.submit(
            re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
        )
        with trio.fail_after(20):
            while worker.jobserver_tokens() == (0, 0):  # noqa: ASYNC110
                await trio.sleep(0.02)
        assert worker.jobserver_tokens() == (0, 2)
        for _ in range(3):  # a few no-op actions through the recycled directories
            op = await submit(scheduler, store, ["/bin/true"])
            assert (await finish(scheduler, op.name)).result.exit_code == 0  # type: ignore[union-attr]
    assert worker.jobserver_tokens() == (0, 0)
    work = Path(spec.work_directory) / spec.name
    assert sorted(os.listdir(work)) == [".lock"]  # stock and finished actions removed
