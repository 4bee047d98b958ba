"""The handlers an interceptor made around the inner ones, kept per method.

An interceptor of ``grpc.aio`` is asked for a handler on every call, and
wrapping the inner handler anew each time (closures and a method-handler
tuple per call, per interceptor) costs the gRPC thread on every request.
What a wrapper does depends only on the method and the inner handler, so it
is made once: ``WrappedHandlers.get`` returns the one made for this method
path as long as the inner handler is the very object it was made around
(the inner interceptors keep theirs too, so it is), and makes a new one
otherwise. Only methods that have a handler reach it, so the number of
paths is the number of registered methods; past ``limit`` nothing more is
kept and wrappers are made per call as before.

Used from grpc.aio's event loop thread only (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["WrappedHandlers"]

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:  # the runtime class is not generic
    Handler = grpc.RpcMethodHandler


class WrappedHandlers:
    """Per method path: (inner handler, the wrapper made around it)."""

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._by_path: dict[str, tuple[Handler, Handler]] = {}

    def get(self, path: str, inner: Handler, wrap: Callable[[Handler], Handler]) -> Handler:
        """The wrapper of ``inner`` for ``path``: the kept one when it was made
        around this same ``inner``, else ``wrap(inner)`` (kept, while fewer
        than ``limit`` paths are). Raises what ``wrap`` raises."""
        kept = self._by_path.get(path)
        if kept is not None and kept[0] is inner:
            return kept[1]
        wrapped = wrap(inner)
        if kept is not None or len(self._by_path) < self._limit:
            self._by_path[path] = (inner, wrapped)
        return wrapped
