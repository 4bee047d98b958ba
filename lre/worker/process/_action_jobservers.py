"""The jobserver pools of one worker's running actions.

Each action with ``jobserver.enabled`` gets a pool (``JobserverPool``) whose
tokens are the CPUs it reserved beyond its first. ``ActionJobservers.take``
hands one out before the action starts and ``give_back`` ends it afterwards;
``tokens`` sums the private pools of the actions running now.
"""

from __future__ import annotations

from pathlib import Path

from lre.config import LocalWorkerSpec
from lre.scheduler import Lease
from lre.worker.process._jobserver import JobserverPool, jobserver_tokens

__all__ = ["ActionJobservers"]


class ActionJobservers:
    """The pools of one worker's actions (``spec.jobserver``); an empty pool
    shared by every action without a token to hand out lies in
    ``worker_dir``."""

    def __init__(
        self, spec: LocalWorkerSpec, worker_dir: Path, *, owner: tuple[int, int] | None = None
    ) -> None:
        self.spec = spec
        #: (uid, gid) a private pool's fifo is given to: the user actions
        #: run as (None: lre's own).
        self._owner = owner
        self._worker_dir = worker_dir
        #: lease id -> private jobserver pool of actions running now
        self._pools: dict[str, JobserverPool] = {}
        #: One empty pool shared by every action that reserves less than two
        #: CPUs (see ``take``); made on first use.
        self._empty_pool: JobserverPool | None = None

    def tokens(self) -> tuple[int, int]:
        """``(in_use, total)`` tokens over the private pools of running actions."""
        in_use = total = 0
        for pool in self._pools.values():
            in_use += pool.in_use()
            total += pool.expected_tokens
        return in_use, total

    def close(self) -> None:
        """Release the shared empty pool (call when no action runs)."""
        if self._empty_pool is not None:
            self._empty_pool.close()
            self._empty_pool = None

    def take(self, lease: Lease, fifo_dir: str) -> tuple[JobserverPool, bool]:
        """The pool ``lease``'s action gets and whether it is the shared empty one.

        An action reserving less than two CPUs has no token to hand out, so it
        gets the worker's one shared empty pool (no pipe made per action):
        with nothing in it no client can take a token, and a SIGKILLed client
        cannot lose one. A client that writes tokens it never read is the only
        way tokens appear there; they are drained (and logged) after every
        action that used the pool. Larger actions get a private pool. A fifo
        lies in ``fifo_dir``, the action's private temporary directory (the one
        directory of lre's its view shows), so the fifo style has no shared
        pool: a fifo in the worker's directory would be out of every view.
        Raises ``OSError`` when the pool's pipe or fifo cannot be made.
        """
        tokens = jobserver_tokens(lease.reservation.millicpus)
        style = self.spec.jobserver.style
        if tokens or style == "fifo":
            pool = JobserverPool(
                tokens, style=style, fifo_dir=fifo_dir, name=lease.operation_name, owner=self._owner
            )
            self._pools[lease.lease_id] = pool
            return pool, False
        if self._empty_pool is None:
            self._empty_pool = JobserverPool(
                0,
                style=style,
                fifo_dir=str(self._worker_dir),
                name=f"{self.spec.name}/one-cpu",
            )
        return self._empty_pool, True

    def give_back(self, lease_id: str, pool: JobserverPool, shared: bool) -> None:
        """The action of ``lease_id`` ended: drain the shared pool of tokens
        a client made up, or close the action's private pool."""
        if shared:
            pool.drain_extra()
        else:
            self._pools.pop(lease_id, None)
            pool.close()
