"""The status listener: a small HTTP/1.1 server on Trio.

Its routes and answers are in docs/observability.md ("Status listener"); GET
and HEAD read a ``SnapshotSource``, the POST routes call ``CacheAdmin`` (or
flush the history) and need the admin token.

Robustness: the request head must arrive within ``request_timeout_s``
(else 408) and fit in ``max_request_bytes`` (else 431); a malformed request
line gets 400, another method 405, another path 404; each is logged once at
INFO without a traceback. At most ``max_connections`` are served at once;
more get 503 at once. A snapshot source that raises gives 500 and one
logged traceback (a bug). The listener stops when its task is cancelled.

Wiring: ``port = await nursery.start(StatusServer(address, source).serve)``.
"""

from __future__ import annotations

import json
import logging
import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Final

import trio

from lre.app._cache_admin import CacheAdmin
from lre.app._logging import log_rejected
from lre.app._metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from lre.app._metrics import render_metrics
from lre.app._snapshot import SnapshotSource
from lre.service import LocalPeers, RpcStatistics
from lre.snapshot import WAIT_TEXT, ProcessSnapshot

__all__ = ["StatusServer", "parse_listen_address"]

log = logging.getLogger("lre.status")

_JSON: Final = "application/json"
_GET_ROUTES: Final = ("/status", "/metrics", "/api/v1/stats")
_DRAIN_LIMIT: Final = 1 << 20
_TEXT: Final = "text/plain; charset=utf-8"
#: ``_refusal``'s answer for a client socket nobody holds any more.
_GONE: Final = "gone"


def parse_listen_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:50061"`` / ``"[::1]:0"`` / ``"localhost:8080"`` -> (host, port).

    Raises ``ValueError`` naming ``global.status.address`` and the value.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(
            f"global.status.address: {address!r} is not host:port (e.g. 127.0.0.1:50061)"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


class _Rejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class StatusServer:
    """Serves ``/status``, ``/metrics`` and ``/api/v1/stats`` from ``source``.

    ``rpc`` returns the gRPC recorder's statistics for ``/metrics`` (None:
    no RPC metrics). ``source`` is called on the Trio thread, once per
    request that needs it.
    """

    def __init__(
        self,
        address: str,
        source: SnapshotSource,
        *,
        rpc: Callable[[], RpcStatistics] | None = None,
        request_timeout_s: float = 5.0,
        max_request_bytes: int = 8192,
        max_connections: int = 64,
        local_peers: LocalPeers | None = None,
        admin: CacheAdmin | None = None,
        admin_token: str = "",
        protections_missing: tuple[str, ...] = (),
        flush_history: Callable[[], None] | None = None,
    ) -> None:
        self.host, self.port = parse_listen_address(address)
        #: Writes the history's buffered lines (a blocking call, run in a thread).
        self.flush_history = flush_history
        #: When set, connections from lre's own actions get 403 (see
        #: ``lre.service.LocalPeers``).
        self.local_peers = local_peers
        self.admin = admin
        self.admin_token = admin_token
        #: Shown in ``/status`` (what lre cannot give its actions here).
        self.protections_missing = protections_missing
        self.source = source
        self.rpc = rpc
        self.request_timeout_s = request_timeout_s
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.bound_address = ""
        self._active = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; ``task_status.started`` gets the bound port
        (``bound_address`` then holds ``host:port``). Raises ``OSError`` naming
        the address when it cannot be bound."""
        try:
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        except OSError as exc:
            raise OSError(
                exc.errno, f"global.status.address: cannot listen on {self.host}:{self.port}: {exc}"
            ) from None
        sockname = listeners[0].socket.getsockname()
        port = int(sockname[1])
        host = self.host if ":" not in self.host else f"[{self.host}]"
        self.bound_address = f"{host}:{port}"
        log.info("status listener on http://%s/status", self.bound_address)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started(port)

    # ------------------------------------------------------------------ per connection

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            if self._active >= self.max_connections:
                await self._send_quietly(stream, 503, _TEXT, b"too many connections\n", False)
                return
            self._active += 1
            try:
                refusal = await self._refusal(stream)
                if refusal == _GONE:
                    # A client that connected and closed (a port probe such
                    # as `lre doctor`'s): no request, nobody to answer.
                    log.debug("status listener: a client closed its connection at once")
                    return
                if refusal is not None:
                    log_rejected(
                        log, "HTTP request", status="403", reason=refusal, peer=_peer(stream)
                    )
                    await self._send_quietly(stream, 403, _TEXT, (refusal + "\n").encode(), False)
                    return
                await self._handle(stream)
            finally:
                self._active -= 1

    async def _refusal(self, stream: trio.SocketStream) -> str | None:
        """Why this connection is refused (it is one of lre's actions), or None;
        ``_GONE`` when no process holds the client's end any more."""
        peers = self.local_peers
        if peers is None or not peers.available:
            return None
        try:
            remote = stream.socket.getpeername()
            local = stream.socket.getsockname()
        except OSError:
            return None
        kind = "ipv6" if stream.socket.family == trio.socket.AF_INET6 else "ipv4"
        host = f"[{remote[0]}]" if kind == "ipv6" else remote[0]
        peer = f"{kind}:{host}:{remote[1]}"
        verdict = await trio.to_thread.run_sync(peers.judge, peer, int(local[1]), str(local[0]))
        if verdict is None or verdict.allowed:
            return None
        if verdict.gone:
            return _GONE
        return f"lre does not serve its own actions: {verdict.reason}"

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        head_only = False
        try:
            with trio.fail_after(self.request_timeout_s):
                method, path, query, headers = await self._read_request(stream)
            head_only = method == "HEAD"
            if method == "POST":
                status, content_type, body = await self._post(path, query, headers)
            else:
                status, content_type, body = self._respond(method, path)
        except _Rejected as rejected:
            log_rejected(
                log, "HTTP request", status=str(rejected.status), reason=rejected.reason, peer=peer
            )
            status, content_type, body = rejected.status, _TEXT, (rejected.reason + "\n").encode()
        except trio.TooSlowError:
            log_rejected(
                log, "HTTP request", status="408", reason="request head too slow", peer=peer
            )
            status, content_type, body = 408, _TEXT, b"request timeout\n"
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the client went away; nothing to answer
        await self._send_quietly(stream, status, content_type, body, head_only)

    async def _read_request(
        self, stream: trio.SocketStream
    ) -> tuple[str, str, dict[str, str], dict[str, str]]:
        buffer = bytearray()
        while b"\r\n\r\n" not in buffer and b"\n\n" not in buffer:
            if len(buffer) > self.max_request_bytes:
                raise _Rejected(431, f"request head over {self.max_request_bytes} bytes")
            chunk = await stream.receive_some(4096)
            if not chunk:
                if not buffer:
                    raise trio.BrokenResourceError("closed before a request")
                raise _Rejected(400, "connection closed mid-request")
            buffer += chunk
        lines = bytes(buffer).replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].split(b"\n")
        try:
            line = lines[0].decode("ascii")
        except UnicodeDecodeError:
            raise _Rejected(400, "request line is not ASCII") from None
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
            raise _Rejected(400, f"malformed request line {line[:80]!r}")
        headers: dict[str, str] = {}
        for raw in lines[1:]:
            name, sep, value = raw.decode("latin-1").partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        path, _, query_text = parts[1].partition("?")
        query = dict(urllib.parse.parse_qsl(query_text))
        return parts[0], path, query, headers

    async def _post(
        self, path: str, query: dict[str, str], headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """A ``CacheAdmin`` call; 401 without the admin token, 400 naming a
        bad parameter, 404 for another path."""
        routes = (
            "/api/v1/cache/gc",
            "/api/v1/cache/clean",
            "/api/v1/stats/zero",
            "/api/v1/history/flush",
        )
        if path in _GET_ROUTES:
            raise _Rejected(405, f"{path} answers GET or HEAD, not POST")
        if path not in routes:
            raise _Rejected(404, f"no such POST path {path[:80]!r} ({', '.join(routes)})")
        admin = self.admin
        given = headers.get("authorization", "")
        if (
            admin is None
            or not self.admin_token
            or not secrets.compare_digest(given, f"Bearer {self.admin_token}")
        ):
            raise _Rejected(401, "POST needs Authorization: Bearer <lre's admin.token>")
        if path == "/api/v1/history/flush":
            if self.flush_history is None:
                raise _Rejected(404, "lre keeps no history (global.history.enabled is false)")
            await trio.to_thread.run_sync(self.flush_history)
            return 200, _JSON, b'{"flushed": true}\n'
        force = _flag(query, "force")
        if path == "/api/v1/cache/gc":
            to = query.get("to", "")
            if not to.isdigit():
                raise _Rejected(400, f"to: {to[:40]!r} is not a number of bytes")
            answer = await admin.gc(int(to), force=force)
        elif path == "/api/v1/cache/clean":
            answer = await admin.clean(force=force)
        else:
            answer = await admin.zero()
        log.info("status listener: %s done (%s)", path, "forced" if force else "contract kept")
        return 200, _JSON, json.dumps(answer).encode() + b"\n"

    def _respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method not in ("GET", "HEAD"):
            raise _Rejected(405, f"method {method[:16]!r} not allowed (GET, HEAD or POST)")
        if path not in _GET_ROUTES:
            raise _Rejected(404, f"no such path {path[:80]!r} (/status, /metrics, /api/v1/stats)")
        try:
            snapshot = self.source()
            if path == "/status":
                return _status_body(snapshot, self.protections_missing)
            if path == "/metrics":
                rpc = self.rpc() if self.rpc is not None else None
                return 200, METRICS_CONTENT_TYPE, render_metrics(snapshot, rpc).encode()
            return 200, _JSON, snapshot.dumps().encode()
        except Exception:
            log.exception("status listener: building the answer to %s failed", path)
            return 500, _TEXT, b"internal error (see lre's log)\n"

    async def _send_quietly(
        self,
        stream: trio.SocketStream,
        status: int,
        content_type: str,
        body: bytes,
        head_only: bool,
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode("ascii")
        try:
            with trio.move_on_after(self.request_timeout_s):
                await stream.send_all(head if head_only else head + body)
                # Lingering close: closing with unread request bytes makes the
                # kernel send RST, which can destroy the answer before the
                # client reads it; so end our side and drain a bounded amount.
                await stream.send_eof()
                drained = 0
                with trio.move_on_after(1.0):
                    while drained < _DRAIN_LIMIT and (chunk := await stream.receive_some(65536)):
                        drained += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _picked(row: object, *names: str) -> dict[str, object]:
    """The fields ``names`` of ``row`` by name, a mapping among them as a dict."""
    values = {name: getattr(row, name) for name in names}
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in values.items()}


def _flag(query: dict[str, str], name: str) -> bool:
    value = query.get(name, "0")
    if value not in ("0", "1"):
        raise _Rejected(400, f"{name}: {value[:40]!r} is not 0 or 1")
    return value == "1"


def _upstreams(snapshot: ProcessSnapshot) -> list[dict[str, object]]:
    """Each upstream's state, last error and counters (an upstream that is down
    does not make lre unhealthy: builds continue local-only)."""
    return [
        _picked(row, "name", "address", "state", "last_error", "counters")
        for row in snapshot.upstreams
    ]


def _queue(snapshot: ProcessSnapshot) -> dict[str, object]:
    """The queue by platform, the next queued actions with what each waits
    for (``waiting_for``: a ``lre.snapshot.WaitReason`` value, "" = next in
    line), and each build with actions queued or running with its fair share
    (``fair_share``: the fraction of the workers it is entitled to now;
    ``used_share``: the dominant fraction its running actions reserve)."""
    return {
        "by_platform": dict(snapshot.queued_by_platform),
        "builds": [
            {
                "invocation": b.invocation,
                "repository": b.repository,
                "tool": b.tool,
                "weight": b.weight,
                "fair_share": round(b.fair_share, 3),
                "used_share": round(b.used_share, 3),
                "running": b.running,
                "queued": b.queued,
            }
            for b in snapshot.build_shares
        ],
        "next": [
            {
                "target": q.target,
                "mnemonic": q.summary,
                "platform": q.platform,
                "waiting_for": q.waiting_for,
                "waits_for": WAIT_TEXT.get(q.waiting_for, q.waiting_for),
                "queued_s": round(q.queued_s, 3),
            }
            for q in snapshot.queued_next
        ],
    }


def _builds(snapshot: ProcessSnapshot) -> list[dict[str, object]]:
    """The builds running now and the last one that ended (the dashboard's
    header lines): repository, tool, first request and last reply so far."""
    return [
        {
            "invocation": b.invocation,
            "repository": b.repository,
            "tool": b.client,
            "running": b.running,
            "started_at": round(b.started_at, 3),
            "ended_at": round(b.ended_at, 3),
            "executed": b.executed,
            "cache_hits": b.cache_hits,
            "failed": b.failed,
            "cancelled": b.cancelled,
        }
        for b in snapshot.builds
    ]


def _cache_notices(snapshot: ProcessSnapshot) -> list[str]:
    """What lre says about its cache: why upstream lookups keep missing, and
    overruns of max_bytes for the cache contract (neither makes lre
    unhealthy)."""
    return list(snapshot.cache_notices) + [
        f"store {row.name} holds {row.overrun_bytes} bytes beyond its max_bytes of "
        f"{row.max_bytes}: blobs lre told clients exist in the last {row.keep_told_s:.0f} s "
        f"(or inputs of running actions) may not be evicted; it keeps {row.min_free_bytes} "
        "bytes of the disk free and refuses new blobs below that"
        for row in snapshot.stores
        if row.overrun_bytes
    ]


#: What ``/status`` shows of each worker's ``MemoryControlRow``.
_MEMORY_ROW_FIELDS = (
    "worker",
    "frozen_now",
    "frozen",
    "thawed",
    "killed",
    "pressure_full_avg10",
    "sampling",
    "pressure_events",
)


def _memory(snapshot: ProcessSnapshot) -> dict[str, object]:
    """The memory control: whether memory is short, the frozen operations now,
    and frozen / thawed / killed (per worker) and retried (ladder requeues)
    since start (``retried``: the kills lre answered by running the action
    again one ladder step up, not those it gave up after); per worker also
    what wakes its control (``sampling``: a PSI
    trigger or the timer alone, and why) and the PSI events so far."""
    rows = snapshot.memory_control
    return {
        "short": [f"{r.worker}: {r.short_reason}" for r in rows if r.short_reason],
        "available_bytes": min((r.available_bytes for r in rows), default=None),
        "frozen_now": [a.operation for a in snapshot.inflight if a.frozen],
        "frozen": sum(r.frozen for r in rows),
        "thawed": sum(r.thawed for r in rows),
        "killed": sum(r.killed for r in rows),
        "retried": snapshot.ladder_requeues,
        "workers": [_picked(r, *_MEMORY_ROW_FIELDS) for r in rows],
    }


def _status_body(
    snapshot: ProcessSnapshot, protections_missing: tuple[str, ...] = ()
) -> tuple[int, str, bytes]:
    if snapshot.healthy:
        code, head = (
            200,
            {
                "status": "ok",
                "address": snapshot.address,
                "uptime_s": round(snapshot.uptime_s, 3),
                "running": snapshot.running,
                "queued": snapshot.queued,
            },
        )
    else:
        code, head = 503, {"status": "unavailable", "problems": list(snapshot.problems)}
    body = {
        **head,
        "queue": _queue(snapshot),
        "builds": _builds(snapshot),
        "containment": snapshot.containment,
        "protections_missing": list(protections_missing),
        "upstreams": _upstreams(snapshot),
        "cache": _cache_notices(snapshot),
        "memory": _memory(snapshot),
    }
    return code, _JSON, json.dumps(body).encode() + b"\n"


def _peer(stream: trio.SocketStream) -> str:
    try:
        name = stream.socket.getpeername()
    except OSError:
        return "?"
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
