"""Refusing gRPC calls that come from lre's own actions.

``PeerGuard`` is the peer check of a listener's one interceptor
(``_call_checks.CallChecks``): before a method's handler runs, the call's
peer (``context.peer()``) is judged by ``LocalPeers`` (``_local_peers.py``).
A call from a connection that belongs to a process lre started ends with
PERMISSION_DENIED naming the reason, and the handler never runs: an action
cannot store an action result, submit an Execute, or read lre's CAS through
lre's own port. A verdict is cached per connection, so a call costs one
netlink lookup (about 8 us); the first call of a new connection reads
``/proc`` of lre's descendants off the event loop, in one thread of its own
(lookups queue there: a burst of new connections costs lre one thread, not
one per connection).

lre makes a guard only while some containment in use leaves its actions on
lre's own network (``portable``); under ``pidns`` and ``userns`` lre's
listeners do not exist for an action and no call is judged.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import grpc.aio

from lre.service._local_peers import LocalPeers, PeerVerdict

__all__ = ["PeerGuard"]

log = logging.getLogger("lre.service.peers")

#: Refusals logged (each names the peer and reason); later ones are only counted.
_MAX_LOGGED = 100


class PeerGuard:
    """See the module docstring. ``listening_on`` must be called with the
    bound address before the server starts (until then nothing is refused)."""

    def __init__(self, peers: LocalPeers) -> None:
        self.peers = peers
        self.host = ""
        self.port = 0
        self._logged = 0
        #: Where new connections' holders are looked up (started on first use).
        self._lookups = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lre-peer-guard")

    @property
    def active(self) -> bool:
        """Whether calls are judged at all (not without Linux's sock_diag)."""
        return self.peers.available

    def listening_on(self, host: str, port: int) -> None:
        self.host = host.strip("[]")
        self.port = port

    async def _verdict(self, context: grpc.aio.ServicerContext[Any, Any]) -> PeerVerdict:
        peer = context.peer() or ""
        if not self.port:
            return PeerVerdict(True)
        verdict = self.peers.judge(peer, self.port, self.host, cached_only=True)
        if verdict is None:
            loop = asyncio.get_running_loop()
            verdict = await loop.run_in_executor(
                self._lookups, lambda: self.peers.judge(peer, self.port, self.host)
            )
        assert verdict is not None
        if not verdict.allowed and self._logged < _MAX_LOGGED:
            self._logged += 1
            log.warning("refused a call from %s: %s (PERMISSION_DENIED)", peer, verdict.reason)
        return verdict

    async def check(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Ends the call with PERMISSION_DENIED (``context.abort`` raises)
        when its connection belongs to one of lre's actions."""
        verdict = await self._verdict(context)
        if not verdict.allowed:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"lre does not serve its own actions: {verdict.reason}",
            )
