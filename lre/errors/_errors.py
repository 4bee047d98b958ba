"""The error hierarchy. See the package docstring."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar


class StatusCode(enum.IntEnum):
    """gRPC status codes (the numbers of ``google.rpc.Code``).

    Kept here so that layers below ``service`` need not import grpc.
    """

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class LreError(Exception):
    """Base of every error lre reports to a client.

    ``code`` is the gRPC status the client receives and ``message`` its text.
    """

    code: ClassVar[StatusCode] = StatusCode.UNKNOWN

    def __init_subclass__(cls, code: StatusCode | None = None) -> None:
        super().__init_subclass__()
        if code is not None:
            cls.code = code

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class Cancelled(LreError, code=StatusCode.CANCELLED): ...


class InvalidArgument(LreError, code=StatusCode.INVALID_ARGUMENT): ...


class DeadlineExceeded(LreError, code=StatusCode.DEADLINE_EXCEEDED): ...


class NotFound(LreError, code=StatusCode.NOT_FOUND): ...


class AlreadyExists(LreError, code=StatusCode.ALREADY_EXISTS): ...


class PermissionDenied(LreError, code=StatusCode.PERMISSION_DENIED): ...


class ResourceExhausted(LreError, code=StatusCode.RESOURCE_EXHAUSTED): ...


class FailedPrecondition(LreError, code=StatusCode.FAILED_PRECONDITION): ...


class Aborted(LreError, code=StatusCode.ABORTED): ...


class OutOfRange(LreError, code=StatusCode.OUT_OF_RANGE): ...


class Unimplemented(LreError, code=StatusCode.UNIMPLEMENTED): ...


class Internal(LreError, code=StatusCode.INTERNAL): ...


class Unavailable(LreError, code=StatusCode.UNAVAILABLE): ...


class Unauthenticated(LreError, code=StatusCode.UNAUTHENTICATED): ...


class CacheMiss(NotFound):
    """The action cache holds no (complete) result: an expected answer, not a
    client's mistake, so it is logged at DEBUG only."""


class MissingBlobs(FailedPrecondition):
    """Blobs an action needs are not in the CAS.

    Mapped to FAILED_PRECONDITION with a ``google.rpc.PreconditionFailure``
    holding one ``MISSING`` violation per subject (``blobs/{hash}/{size}``),
    which is what makes Bazel upload them again and retry.
    """

    def __init__(self, subjects: Sequence[str], message: str | None = None) -> None:
        self.subjects = tuple(subjects)
        text = message or (
            f"{len(self.subjects)} blob(s) missing from the CAS: "
            + ", ".join(self.subjects[:5])
            + (" ..." if len(self.subjects) > 5 else "")
        )
        super().__init__(text)


#: Each status code's own class, read off the classes above: the direct
#: subclasses of ``LreError`` (a refinement such as ``CacheMiss`` shares its
#: parent's code and is never the answer to a bare code).
_BY_CODE: dict[int, type[LreError]] = {
    error.code: error for error in LreError.__subclasses__() if error.code != StatusCode.UNKNOWN
}


def error_for_code(code: int, message: str) -> LreError:
    """The domain error for gRPC status ``code`` received from elsewhere (an
    upstream's answer); ``Internal`` for a code no class carries (OK, UNKNOWN,
    DATA_LOSS or a number outside the enum)."""
    return _BY_CODE.get(code, Internal)(message)
