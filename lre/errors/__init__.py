"""Domain errors of lre, each carrying the gRPC status code it maps to.

Code anywhere in lre raises these; ``lre.service`` turns them into gRPC
statuses in exactly one place (``lre.service.rpc_status_of``, which the
``unary_rpc`` / ``stream_rpc`` decorators and ``abort_with`` apply). Messages are meant for
the client: name the field and the value that was wrong, never internal
details such as paths of lre's own directories or tracebacks.
``error_for_code`` goes the other way, for a status received from an
upstream server: the class carrying that code.
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
    error_for_code,
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
    "error_for_code",
    "out_of_descriptors",
]
