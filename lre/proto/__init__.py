"""Generated protocol buffer modules, under short names.

Everything else in lre imports messages from here, never from the generated
paths, so that a regeneration or a move stays a one-file change::

    from lre.proto import re_pb2, bs_pb2
    re_pb2.Digest(hash=..., size_bytes=...)

``google.rpc`` and ``google.longrunning`` messages come from
googleapis-common-protos and are re-exported here for the same reason.
``REQUEST_METADATA_KEY`` is the one wire name the protocol defines outside
its messages (the header carrying ``RequestMetadata``).
"""

from typing import Final

from google.longrunning import operations_proto_pb2 as operations_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from lre.proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from lre.proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from lre.proto.build.bazel.semver import semver_pb2
from lre.proto.google.bytestream import bytestream_pb2 as bs_pb2
from lre.proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from lre.proto.lre.v1 import lre_pb2

#: The header Bazel and Buck2 send with every call, a serialized
#: ``RequestMetadata`` (binary: base64 on the wire; grpc hands it over decoded).
REQUEST_METADATA_KEY: Final = "build.bazel.remote.execution.v2.requestmetadata-bin"

__all__ = [
    "REQUEST_METADATA_KEY",
    "bs_grpc",
    "bs_pb2",
    "code_pb2",
    "error_details_pb2",
    "lre_pb2",
    "operations_pb2",
    "re_grpc",
    "re_pb2",
    "semver_pb2",
    "status_pb2",
]
