"""``InvocationSpans``: each build's first request and last reply, over every call.

A build's actions tell only part of its time: before the first Execute the
client asked for capabilities and uploaded inputs, after the last one it
downloads outputs. The one interceptor every call passes (``CallChecks``,
given this tracker as ``ServerOptions.spans``) tells it when a
call that names a tool invocation id (``RequestMetadata``) starts
(``opened``) and ends (``closed``); the tracker keeps per invocation the
first start, the last end, the calls still open, and the repository and
tool the calls named. So a build's duration is what its client waited on
lre for, from one figure, in every view.

Thread-safe (calls come on grpc's thread, readers on Trio's or a worker
thread); a call without an invocation id is not tracked. At most
``MAX_KEPT`` builds are kept: the oldest with no open call goes first.
Nothing here raises on a malformed header (it reads as no invocation). The
headers are read here, not through ``request_metadata_from``: only three
fields are needed, and every call pays for the reading (about 3 us).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from google.protobuf.message import DecodeError

from lre.proto import REQUEST_METADATA_KEY, re_pb2
from lre.service._metadata import _MAX_REPOSITORY, REPOSITORY_KEY
from lre.snapshot import BuildSpan

__all__ = ["InvocationSpans", "OpenCall"]


class OpenCall:
    """One invocation's span as the tracker keeps it (mutable, under its lock)."""

    __slots__ = ("changed", "first_at", "invocation", "last_at", "open_calls", "repository", "tool")

    def __init__(self, invocation: str, now: float) -> None:
        self.invocation = invocation
        self.first_at = now
        self.last_at = now
        self.open_calls = 0
        self.repository = ""
        self.tool = ""
        self.changed = True

    def frozen(self, at: float) -> BuildSpan:
        return BuildSpan(
            at=at,
            invocation=self.invocation,
            first_at=self.first_at,
            last_at=self.last_at,
            repository=self.repository,
            tool=self.tool,
            open_calls=self.open_calls,
        )


class InvocationSpans:
    """See the module docstring. ``clock`` gives wall-clock seconds."""

    MAX_KEPT = 64

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._spans: OrderedDict[str, OpenCall] = OrderedDict()

    def opened(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> OpenCall | None:
        """A call with ``metadata`` (``context.invocation_metadata()``) starts;
        its span, to hand to ``closed``, or None when it names no invocation."""
        raw: str | bytes = b""
        repository: str | bytes = ""
        for key, value in metadata or ():
            if key == REQUEST_METADATA_KEY:
                raw = value
            elif key == REPOSITORY_KEY:
                repository = value
        if not raw:
            return None
        message = re_pb2.RequestMetadata()
        try:
            message.ParseFromString(raw if isinstance(raw, bytes) else raw.encode("latin-1"))
        except DecodeError:
            return None
        invocation = message.tool_invocation_id
        if not invocation:
            return None
        now = self._clock()
        with self._lock:
            span = self._spans.get(invocation)
            if span is None:
                span = self._spans[invocation] = OpenCall(invocation, now)
                self._trim()
            span.open_calls += 1
            span.changed = True
            if repository and not span.repository:
                text = (
                    repository
                    if isinstance(repository, str)
                    else repository.decode("utf-8", "replace")
                )
                span.repository = text[:_MAX_REPOSITORY].strip()
            if not span.tool and message.tool_details.tool_name:
                tool = message.tool_details
                span.tool = f"{tool.tool_name} {tool.tool_version}".strip()
        return span

    def closed(self, span: OpenCall) -> None:
        """The call ``opened`` returned ``span`` for ended (its last reply)."""
        now = self._clock()
        with self._lock:
            span.open_calls -= 1
            if now > span.last_at:
                span.last_at = now
            span.changed = True

    def _trim(self) -> None:
        """(Lock held.) Forget the oldest idle builds beyond ``MAX_KEPT``."""
        spans = self._spans
        if len(spans) <= self.MAX_KEPT:
            return
        for invocation in [k for k, s in spans.items() if not s.open_calls]:
            if len(spans) <= self.MAX_KEPT:
                break
            del spans[invocation]

    def changed(self) -> list[BuildSpan]:
        """The spans that moved since the last call (for the history file)."""
        now = self._clock()
        with self._lock:
            out = []
            for span in self._spans.values():
                if span.changed:
                    span.changed = False
                    out.append(span.frozen(now))
            return out

    def current(self) -> dict[str, BuildSpan]:
        """Every kept span by invocation id, as it is now."""
        now = self._clock()
        with self._lock:
            return {k: s.frozen(now) for k, s in self._spans.items()}
