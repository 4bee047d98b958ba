"""The scheduler's two roles, as typed protocols.

- ``ActionScheduler``: what the Execution and Operations services call.
  ``Scheduler`` and ``ForwardScheduler`` (which sends some actions upstream)
  both play it, so the services never know which one serves an instance.
- ``WorkerScheduler``: what a worker calls to take work and report on it.
  ``Scheduler`` plays it; a worker is handed one by the composition root.

mypy checks that both concrete schedulers conform where ``lre.app`` wires
them (a ``Scheduler`` or ``ForwardScheduler`` given as an instance's
``ActionScheduler``, a ``Scheduler`` given to each ``LocalWorker``), and
tests/scheduler/test_roles.py runs mypy on the three assignments alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from lre.proto import re_pb2
from lre.scheduler._lease import Lease
from lre.scheduler._model import OperationSnapshot, Outcome, RequestInfo, WorkerInfo


class ActionScheduler(Protocol):
    """Operations for clients: submit, follow, list, cancel and forget them.

    Every call but ``watch``'s iteration is synchronous and runs on the
    scheduler's Trio thread. Names unknown or expired raise ``NotFound``.
    """

    def submit(
        self, request: re_pb2.ExecuteRequest, *, request_info: RequestInfo | None = None
    ) -> OperationSnapshot:
        """Accept an Execute request; its operation's first state.

        Raises ``InvalidArgument`` for a malformed request and ``Unavailable``
        when the scheduler is not running.
        """
        ...

    def watch(self, name: str) -> AbstractAsyncContextManager[AsyncIterator[OperationSnapshot]]:
        """Updates of operation ``name``: ``async with`` it, then iterate
        snapshots until the one with ``done`` (see ``OperationWatch``)."""
        ...

    def get_operation(self, name: str) -> OperationSnapshot:
        """The current state of operation ``name``."""
        ...

    def list_operations(self, instance_name: str | None = None) -> list[OperationSnapshot]:
        """Every known operation, optionally of one instance."""
        ...

    def cancel(self, name: str) -> None:
        """End operation ``name`` with CANCELLED (finished ones are left alone)."""
        ...

    def delete(self, name: str) -> None:
        """Forget operation ``name`` (a running action still finishes)."""
        ...


class WorkerScheduler(Protocol):
    """Work for workers: register, take leases, report their outcomes.

    Calls for a worker name not registered raise ``NotFound``.
    """

    def register_worker(self, info: WorkerInfo) -> None:
        """Add a worker, or update the description of one already registered."""
        ...

    def unregister_worker(self, name: str) -> None:
        """Remove a worker; its running leases are taken back and retried."""
        ...

    def set_draining(self, name: str, draining: bool) -> None:
        """A draining worker finishes what it holds and is given nothing new."""
        ...

    def heartbeat(self, name: str) -> None:
        """Record that worker ``name`` is alive."""
        ...

    async def lease(self, worker_name: str) -> Lease:
        """Wait for an action the worker can run now; ``Unavailable`` once
        the worker is unregistered."""
        ...

    def report(self, lease_id: str, outcome: Outcome) -> bool:
        """The outcome of a lease; False for a lease no longer held."""
        ...
