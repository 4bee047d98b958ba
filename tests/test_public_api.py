"""Pins the public surface (``__all__``) of each lre package.

A change to a package's public names must show up here as a deliberate edit.
Adding a package is one entry in PUBLIC_API.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC_API: dict[str, set[str]] = {
    "lre.proto": {
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
    },
    "lre.errors": {
        "Aborted",
        "AlreadyExists",
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
    },
    "lre.digest": {
        "EMPTY_DIGEST",
        "MAX_BLOB_SIZE",
        "SUPPORTED_DIGEST_FUNCTIONS",
        "Digest",
        "DigestFunction",
        "digest_of",
        "resolve_digest_function",
    },
}


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{package} has no __all__"
    assert len(exported) == len(set(exported)), f"{package}.__all__ lists a name twice"
    assert set(exported) == PUBLIC_API[package]


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_every_public_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_public_names_are_not_private(package: str) -> None:
    module = importlib.import_module(package)
    assert not [name for name in module.__all__ if name.startswith("_")]
