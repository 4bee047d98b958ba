"""The scheduler's roles: ``ActionScheduler`` for clients, ``WorkerScheduler``
for workers. mypy holds both concrete schedulers to them; one real scheduler
runs an action with each side reached only through its role."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from lre.errors import NotFound, Unavailable
from lre.proto import re_pb2
from lre.scheduler import ActionScheduler, Completed, WorkerScheduler
from tests._support.scheduler import execute_request, start_harness, worker_info

ROOT = Path(__file__).resolve().parents[2]

CONFORMING = """
from lre.scheduler import ActionScheduler, ForwardScheduler, Scheduler, WorkerScheduler


def roles(local: Scheduler, forward: ForwardScheduler) -> None:
    clients: ActionScheduler = local
    workers: WorkerScheduler = local
    forwarded: ActionScheduler = forward
    del clients, workers, forwarded
"""

#: A forward scheduler hands no leases out: it cannot be a worker's scheduler.
NOT_CONFORMING = """
from lre.scheduler import ForwardScheduler, WorkerScheduler


def roles(forward: ForwardScheduler) -> None:
    workers: WorkerScheduler = forward
    del workers
"""


def mypy(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    """mypy (strict, the project's settings) on ``program`` as a file."""
    path = tmp_path / "roles_check.py"
    path.write_text(program)
    return subprocess.run(
        [sys.executable, "-m", "mypy", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_mypy_holds_the_schedulers_to_their_roles(tmp_path: Path) -> None:
    kept = mypy(tmp_path, CONFORMING)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    broken = mypy(tmp_path, NOT_CONFORMING)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert '"ForwardScheduler", variable has type "WorkerScheduler"' in broken.stdout


async def test_one_scheduler_serves_clients_and_workers_through_their_roles() -> None:
    async with trio.open_nursery() as nursery:
        harness = await start_harness(nursery)
        clients: ActionScheduler = harness.scheduler
        workers: WorkerScheduler = harness.scheduler
        workers.register_worker(worker_info("w1"))
        workers.heartbeat("w1")
        digest = await harness.builder.action()
        submitted = clients.submit(execute_request(digest))
        with trio.fail_after(5):
            lease = await workers.lease("w1")
        assert lease.operation_name == submitted.name
        result = re_pb2.ActionResult(exit_code=3)
        assert workers.report(lease.lease_id, Completed(result))
        assert not workers.report(lease.lease_id, Completed(result))  # no longer held
        with trio.fail_after(5):
            async with clients.watch(submitted.name) as updates:
                snapshots = [snapshot async for snapshot in updates]
        assert snapshots[-1].done and snapshots[-1].result == result
        assert clients.get_operation(submitted.name).done
        assert [op.name for op in clients.list_operations("main")] == [submitted.name]
        assert clients.list_operations("elsewhere") == []
        clients.cancel(submitted.name)  # finished: left as it is
        assert clients.get_operation(submitted.name).error is None
        clients.delete(submitted.name)
        with pytest.raises(NotFound):
            clients.get_operation(submitted.name)
        workers.set_draining("w1", True)
        assert harness.scheduler.statistics().workers[0].draining
        async with trio.open_nursery() as waiting:

            async def lease_after_unregistering() -> None:
                with pytest.raises(Unavailable):
                    await workers.lease("w1")

            waiting.start_soon(lease_after_unregistering)
            await trio.testing.wait_all_tasks_blocked()
            workers.unregister_worker("w1")
        with pytest.raises(NotFound):
            workers.heartbeat("w1")
        nursery.cancel_scope.cancel()
