"""The ``ServerCapabilities`` lre advertises for one instance."""

from __future__ import annotations

from lre.proto import re_pb2, semver_pb2
from lre.service._instances import InstanceBackends

LOW_API_VERSION = semver_pb2.SemVer(major=2, minor=0)
#: Highest REAPI version whose fields lre implements (compressors, v2.3).
HIGH_API_VERSION = semver_pb2.SemVer(major=2, minor=3)

_SHA256 = re_pb2.DigestFunction.SHA256
_ZSTD = re_pb2.Compressor.ZSTD


def server_capabilities(
    backends: InstanceBackends, *, max_batch_total_size_bytes: int
) -> re_pb2.ServerCapabilities:
    """Capabilities of an instance: SHA256, zstd, and execution iff it has a scheduler."""
    cache = re_pb2.CacheCapabilities(
        digest_functions=[_SHA256],
        action_cache_update_capabilities=re_pb2.ActionCacheUpdateCapabilities(
            update_enabled=backends.action_cache is not None and not backends.ac_read_only
        ),
        max_batch_total_size_bytes=max_batch_total_size_bytes,
        symlink_absolute_path_strategy=re_pb2.SymlinkAbsolutePathStrategy.DISALLOWED,
        supported_compressors=[_ZSTD],
        supported_batch_update_compressors=[_ZSTD],
    )
    capabilities = re_pb2.ServerCapabilities(
        cache_capabilities=cache,
        low_api_version=LOW_API_VERSION,
        high_api_version=HIGH_API_VERSION,
    )
    if backends.scheduler is not None:
        capabilities.execution_capabilities.CopyFrom(
            re_pb2.ExecutionCapabilities(
                digest_function=_SHA256, digest_functions=[_SHA256], exec_enabled=True
            )
        )
    return capabilities
