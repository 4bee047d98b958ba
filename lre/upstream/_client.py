"""``UpstreamClient``: channels, headers, retries, concurrency and health for
one upstream REAPI server, used by ``GrpcStore``, ``GrpcActionCache`` and the
forwarding scheduler.

- Endpoints ``grpc://host:port`` (plaintext) or ``grpcs://host:port`` (TLS,
  CA and client certificate from ``TlsClientSpec``). Endpoints are tried in
  order: a retry after UNAVAILABLE moves to the next one.
- ``connections_per_endpoint`` channels per endpoint (each with its own
  connection), used round-robin.
- ``headers`` are sent as call metadata on every call (keys lower-cased,
  empty values dropped).
- Retries: UNAVAILABLE and RESOURCE_EXHAUSTED are retried up to
  ``retry.max_retries`` times after ``retry.delay`` doubling to
  ``retry.max_delay``; not while the circuit is open.
- At most ``max_concurrent_requests`` calls (streams count for their whole
  life) are in flight; others wait in Trio.
- Health (``UpstreamHealth``): failing to reach the upstream opens a
  circuit and raises ``UpstreamUnavailable``; see ``_health``.

All methods are called from Trio; grpc.aio runs on ``UpstreamLoop``'s
thread. Failure: any other gRPC status becomes the matching
``lre.errors`` class with a message naming the upstream and the call.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio
import trio
from google.protobuf.message import Message

from lre.config import EndpointSpec, RetrySpec
from lre.errors import InvalidArgument, LreError, error_for_code
from lre.proto import re_grpc, re_pb2
from lre.upstream._errors import UpstreamUnavailable
from lre.upstream._health import UpstreamHealth, UpstreamStatistics
from lre.upstream._loop import UpstreamLoop

T = TypeVar("T")

Metadata = tuple[tuple[str, str], ...]

_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
_UNREACHABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)

#: The batch limit assumed when the upstream advertises none (as Buck2 does).
DEFAULT_BATCH_LIMIT = 4_000_000


class Connection:
    """One grpc.aio channel and the stubs made on it (asyncio thread only)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self._stubs: dict[type[Any], Any] = {}

    def stub(self, stub_type: type[Any]) -> Any:
        stub = self._stubs.get(stub_type)
        if stub is None:
            stub = self._stubs[stub_type] = stub_type(self.channel)
        return stub


def _read_file(path: str, field: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise InvalidArgument(f"{field}: cannot read {path!r}: {error.strerror}") from None


def parse_endpoint(endpoint: EndpointSpec) -> tuple[str, grpc.ChannelCredentials | None]:
    """``(target, credentials)`` for an endpoint; credentials None = plaintext.

    Raises ``InvalidArgument`` naming the address for an unknown scheme and
    naming the file for an unreadable TLS file.
    """
    address = endpoint.address
    if address.startswith("grpc://"):
        return address.removeprefix("grpc://"), None
    if address.startswith("grpcs://"):
        tls = endpoint.tls
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read_file(tls.ca_file, "tls.ca_file"),
            private_key=_read_file(tls.key_file, "tls.key_file"),
            certificate_chain=_read_file(tls.cert_file, "tls.cert_file"),
        )
        return address.removeprefix("grpcs://"), credentials
    raise InvalidArgument(
        f"endpoint address: {address!r} must start with grpc:// (plaintext) or grpcs:// (TLS)"
    )


def metadata_of(headers: Mapping[str, str]) -> Metadata:
    """Call metadata from configured headers: keys lower-cased, values
    stripped, headers whose value is empty dropped."""
    items = []
    for key, value in headers.items():
        value = value.strip()
        if value:
            items.append((key.strip().lower(), value))
    return tuple(items)


class UpstreamClient:
    """See the module docstring. ``aclose`` closes the channels and the loop."""

    def __init__(
        self,
        endpoints: Sequence[EndpointSpec],
        *,
        name: str = "upstream",
        headers: Mapping[str, str] | None = None,
        retry: RetrySpec | None = None,
        connections_per_endpoint: int = 1,
        max_concurrent_requests: int = 64,
        call_timeout_s: float = 60.0,
        max_message_bytes: int = 64 << 20,
        loop: UpstreamLoop | None = None,
    ) -> None:
        if not endpoints:
            raise InvalidArgument(f"upstream {name}: endpoints: at least one is required")
        if connections_per_endpoint < 1:
            raise InvalidArgument(
                f"upstream {name}: connections_per_endpoint: {connections_per_endpoint} "
                "must be at least 1"
            )
        if max_concurrent_requests < 1:
            raise InvalidArgument(
                f"upstream {name}: max_concurrent_requests: {max_concurrent_requests} "
                "must be at least 1"
            )
        self.name = name
        self.targets = [parse_endpoint(e) for e in endpoints]
        self.metadata = metadata_of(headers or {})
        self.retry = retry or RetrySpec()
        self.connections_per_endpoint = connections_per_endpoint
        self.call_timeout_s = call_timeout_s
        self.max_message_bytes = max_message_bytes
        self.limiter = trio.CapacityLimiter(max_concurrent_requests)
        self.loop = loop or UpstreamLoop(f"lre-upstream-{name}")
        self.health = UpstreamHealth(name, endpoints[0].address)
        self._pools: list[list[Connection]] = [[] for _ in self.targets]
        self._round_robin = itertools.count()
        self._capabilities: dict[str, re_pb2.ServerCapabilities] = {}

    # ------------------------------------------------------------ channels

    def _options(self, index: int) -> list[tuple[str, Any]]:
        return [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.min_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", 5_000),
            # Each pooled channel gets its own connection.
            ("grpc.use_local_subchannel_pool", 1),
            ("lre.channel_index", index),
        ]

    async def connection(self, attempt: int = 0) -> Connection:
        """A pooled connection: endpoint ``attempt`` modulo the endpoints,
        channel round-robin within it (channels are created on first use)."""
        endpoint = attempt % len(self.targets)
        pool = self._pools[endpoint]
        if len(pool) < self.connections_per_endpoint:
            target, credentials = self.targets[endpoint]
            options = self._options(len(pool))

            async def create() -> Connection:
                if credentials is None:
                    channel = grpc.aio.insecure_channel(target, options=options)
                else:
                    channel = grpc.aio.secure_channel(target, credentials, options=options)
                return Connection(channel)

            connection = await self.loop.run(create)
            if len(pool) < self.connections_per_endpoint:
                pool.append(connection)
                return connection
            await self.loop.run(lambda: connection.channel.close(None))
        return pool[next(self._round_robin) % len(pool)]

    # ------------------------------------------------------------ calls

    def error_of(self, what: str, error: grpc.aio.AioRpcError) -> LreError:
        """The domain error for a failed call; records health."""
        code = error.code()
        text = f"upstream {self.name}: {what}: {code.name}: {error.details() or ''}".rstrip()
        if code in _UNREACHABLE:
            self.health.record_failure(f"{what}: {code.name}: {error.details() or ''}".strip())
            return UpstreamUnavailable(text)
        self.health.record_success()  # it answered
        return error_for_code(code.value[0], text)

    def check_circuit(self, what: str) -> None:
        """Raise ``UpstreamUnavailable`` at once while the circuit is open."""
        if self.health.circuit_open():
            stats = self.health.statistics()
            raise UpstreamUnavailable(
                f"upstream {self.name}: {what}: not tried, the upstream is unreachable "
                f"({stats.last_error}); next try in {self.health.retry_in():.1f} s"
            )

    async def attempt(
        self,
        what: str,
        invoke: Callable[[Connection, Metadata, float], Awaitable[T]],
        *,
        timeout_s: float | None = None,
    ) -> T:
        """Run ``invoke(connection, metadata, timeout)`` on the asyncio thread
        with retries and health, without taking a concurrency slot (the
        caller holds one, see ``limiter``)."""
        timeout = self.call_timeout_s if timeout_s is None else timeout_s
        attempt = 0
        while True:
            self.check_circuit(what)
            connection = await self.connection(attempt)
            try:
                call = functools.partial(invoke, connection, self.metadata, timeout)
                value = await self.loop.run(call)
            except grpc.aio.AioRpcError as error:
                if (
                    error.code() in _RETRYABLE
                    and attempt < self.retry.max_retries
                    and not self.health.circuit_open()
                ):
                    self.health.retries += 1
                    delay = min(float(self.retry.max_delay), float(self.retry.delay) * 2**attempt)
                    attempt += 1
                    await trio.sleep(delay)
                    continue
                raise self.error_of(what, error) from None
            self.health.record_success()
            return value

    async def call(self, stub_type: type[Any], method: str, request: Message) -> Any:
        """One unary RPC ``stub_type(channel).method(request)`` inside one
        concurrency slot, with the retries and health of ``attempt``; the
        answer is the call's response message. Failure: the domain error of
        the status (``UpstreamUnavailable`` when the upstream is unreachable)."""

        async def invoke(connection: Connection, metadata: Metadata, timeout: float) -> Any:
            rpc = getattr(connection.stub(stub_type), method)
            return await rpc(request, metadata=metadata, timeout=timeout)

        async with self.limiter:
            return await self.attempt(method, invoke)

    async def step(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        """One step of a stream already open (no retry); errors mapped."""
        try:
            return await self.loop.run(fn)
        except grpc.aio.AioRpcError as error:
            raise self.error_of(what, error) from None

    async def capabilities(self, instance_name: str) -> re_pb2.ServerCapabilities:
        """GetCapabilities for ``instance_name`` (cached after the first answer)."""
        cached = self._capabilities.get(instance_name)
        if cached is not None:
            return cached
        request = re_pb2.GetCapabilitiesRequest(instance_name=instance_name)
        answer: re_pb2.ServerCapabilities = await self.call(
            re_grpc.CapabilitiesStub, "GetCapabilities", request
        )
        self._capabilities[instance_name] = answer
        return answer

    async def batch_limit(self, instance_name: str) -> int:
        """The upstream's ``max_batch_total_size_bytes`` (DEFAULT_BATCH_LIMIT when
        it advertises 0), capped by our own message limit."""
        answer = await self.capabilities(instance_name)
        advertised = answer.cache_capabilities.max_batch_total_size_bytes
        limit = advertised if advertised > 0 else DEFAULT_BATCH_LIMIT
        return min(limit, self.max_message_bytes // 2)

    def statistics(self) -> UpstreamStatistics:
        return self.health.statistics()

    async def aclose(self) -> None:
        """Close every channel and stop the asyncio thread."""
        pools, self._pools = self._pools, [[] for _ in self.targets]
        connections = [c for pool in pools for c in pool]
        if connections:

            async def close_all() -> None:
                for connection in connections:
                    await connection.channel.close(None)

            with trio.CancelScope(shield=True):
                await self.loop.run(close_all)
        await self.loop.aclose()
