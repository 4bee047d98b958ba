"""Domain errors for answers and failures of an upstream REAPI server."""

from __future__ import annotations

from lre.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LreError,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    StatusCode,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)


class UpstreamUnavailable(Unavailable):
    """The upstream could not be reached (down, refused our credentials, or
    its circuit is open). Callers that can do without the upstream catch
    exactly this and carry on local-only."""


_BY_CODE: dict[int, type[LreError]] = {
    StatusCode.CANCELLED: Cancelled,
    StatusCode.INVALID_ARGUMENT: InvalidArgument,
    StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    StatusCode.NOT_FOUND: NotFound,
    StatusCode.ALREADY_EXISTS: AlreadyExists,
    StatusCode.PERMISSION_DENIED: PermissionDenied,
    StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    StatusCode.ABORTED: Aborted,
    StatusCode.OUT_OF_RANGE: OutOfRange,
    StatusCode.UNIMPLEMENTED: Unimplemented,
    StatusCode.INTERNAL: Internal,
    StatusCode.UNAVAILABLE: Unavailable,
    StatusCode.UNAUTHENTICATED: Unauthenticated,
}


def error_for_code(code: int, message: str) -> LreError:
    """The domain error for gRPC status ``code`` (Internal for UNKNOWN/DATA_LOSS)."""
    return _BY_CODE.get(code, Internal)(message)
