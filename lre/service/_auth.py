"""Bearer-token authentication of gRPC calls (``listener.auth_token_file``).

``BearerToken`` admits a call only when its metadata carries
``authorization: Bearer <token>`` with the listener's token; any other call
ends at once with UNAUTHENTICATED, before its request is parsed or a
handler runs (the listener's one interceptor, ``_call_checks.CallChecks``,
asks it first). ``bearer_token(listener)`` gives the token a listener's
config asks for (None without a token file).

The comparison runs in constant time: both tokens are hashed with SHA256
and the hashes compared with ``hmac.compare_digest``, so neither the
content nor the length of the real token leaks through timing. The token
never appears in a log line, a status message or a metric; a rejected peer
(host, without the port) is logged once, at WARNING, and counted.

``read_token_file`` refuses, with ``AuthTokenError`` naming the field and
the path, a file that cannot be read, is readable or writable by other
users, is empty after stripping whitespace, or holds characters a gRPC
header cannot carry.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import grpc
import grpc.aio

from lre.config import ListenerSpec

logger = logging.getLogger("lre.service.auth")

#: Metadata key of the credentials (gRPC keys are lower case).
AUTHORIZATION_KEY: Final = "authorization"
_SCHEME: Final = "bearer "
#: Distinct peers whose rejection is logged; later ones are only counted.
MAX_LOGGED_PEERS: Final = 1024


class AuthTokenError(ValueError):
    """The token file cannot be used; the message names the field and path."""


def read_token_file(path: str, *, field: str = "listener.auth_token_file") -> str:
    """The token in ``path``, whitespace stripped.

    Raises ``AuthTokenError`` when the file cannot be read, grants any
    permission to other users (it must be e.g. mode 0600 or 0640), is empty
    after stripping, or contains anything but printable ASCII.
    """
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            raw = f.read(1 << 16)
    except OSError as exc:
        raise AuthTokenError(f"{field}: cannot read {path!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise AuthTokenError(f"{field}: {path!r} is not a regular file")
    if mode & 0o007:
        raise AuthTokenError(
            f"{field}: {path!r} is accessible to other users (mode "
            f"{stat.S_IMODE(mode):04o}); run `chmod 600 {path}`"
        )
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = None
    if token is None or not all(" " < ch < "\x7f" for ch in token):
        raise AuthTokenError(
            f"{field}: {path!r} holds characters a gRPC header cannot carry "
            "(use printable ASCII without spaces)"
        )
    if not token:
        raise AuthTokenError(f"{field}: {path!r} is empty")
    return token


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii", "replace")).digest()


def _peer_host(peer: str) -> str:
    """``ipv4:127.0.0.1:5555`` -> ``ipv4:127.0.0.1``; unix peers unchanged."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer


@dataclass(frozen=True, slots=True)
class AuthStatistics:
    """Calls admitted and rejected so far, and distinct peers rejected."""

    admitted: int
    rejected: int
    rejected_peers: int


class BearerToken:
    """Refuses every call without the right bearer token (see the module docstring).

    Used on grpc's asyncio thread only, so its counters need no lock.
    """

    def __init__(self, token: str) -> None:
        if not token:
            raise AuthTokenError("auth token: empty")
        self._token_hash = _hash(token)
        self._logged_peers: set[str] = set()
        self._admitted = 0
        self._rejected = 0

    @classmethod
    def from_file(cls, path: str) -> BearerToken:
        """Read the token with ``read_token_file`` (``AuthTokenError`` on failure)."""
        return cls(read_token_file(path))

    def statistics(self) -> AuthStatistics:
        return AuthStatistics(self._admitted, self._rejected, len(self._logged_peers))

    def _problem(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
        """Why ``metadata`` is refused, or None when it carries the token."""
        offered = False
        for key, value in metadata or ():
            if key != AUTHORIZATION_KEY or not isinstance(value, str):
                continue
            if value[: len(_SCHEME)].lower() != _SCHEME:
                continue
            offered = True
            if hmac.compare_digest(_hash(value[len(_SCHEME) :].strip()), self._token_hash):
                return None
        if not offered:
            return "no 'authorization: Bearer <token>' metadata"
        return "the bearer token is wrong"

    def refusal(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """None when the call carries the token (it is admitted), else the
        handler that ends it with UNAUTHENTICATED."""
        problem = self._problem(handler_call_details.invocation_metadata)
        if problem is None:
            self._admitted += 1
            return None
        self._rejected += 1
        method = handler_call_details.method
        if isinstance(method, bytes):
            method = method.decode("utf-8", "replace")
        return self._reject_handler(method[:200], problem)

    def _reject_handler(self, method: str, problem: str) -> grpc.RpcMethodHandler[Any, Any]:
        """A handler that ends the call with UNAUTHENTICATED, reading nothing.

        It is registered as stream-stream with raw (unparsed) requests,
        which fits a call of any kind: grpc never parses the request and
        the status reaches unary and streaming clients alike.
        """
        logged = self._logged_peers

        async def reject(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            peer = _peer_host(context.peer() or "unknown")
            if peer not in logged and len(logged) < MAX_LOGGED_PEERS:
                logged.add(peer)
                logger.warning(
                    "rejected call %s from %s: %s (UNAUTHENTICATED); "
                    "further rejections of this peer are not logged",
                    method,
                    peer,
                    problem,
                )
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{problem}; this server requires 'authorization: Bearer <token>'",
            )

        return grpc.stream_stream_rpc_method_handler(reject)


def bearer_token(listener: ListenerSpec) -> BearerToken | None:
    """The bearer token ``listener`` asks for (None without a token file).

    Raises ``AuthTokenError`` as ``read_token_file`` does.
    """
    if not listener.auth_token_file:
        return None
    return BearerToken.from_file(listener.auth_token_file)
