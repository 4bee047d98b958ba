"""Domain errors of lre, each carrying the gRPC status code it maps to.

Code anywhere in lre raises these; ``lre.service`` turns them into gRPC
statuses in exactly one place (``lre.service.rpc_status_of``, which the
``unary_rpc`` / ``stream_rpc`` decorators and ``abort_with`` apply). Messages are meant for
the client: name the field and the value that was wrong, never internal
details such as paths of lre's own directories or tracebacks.
"""

from lre.errors._descriptors import descriptors_exhausted, out_of_descriptors
from lre.errors._errors import (
    Aborted,
    AlreadyExists,
    CacheMiss,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LreError,
    MissingBlobs,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    StatusCode,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

__all__ = [
    "Aborted",
    "AlreadyExists",
    "CacheMiss",
    "Cancelled",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "LreError",
    "MissingBlobs",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "StatusCode",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "descriptors_exhausted",
    "out_of_descriptors",
]
