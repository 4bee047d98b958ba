"""lre's REAPI, SemVer and ByteStream protos against an independent generated copy.

The reference is buildgrid-common's generated code, read in a separate
interpreter (see ``_descriptors``). Every message, enum and service both sides
define must agree on field numbers, types, labels, type names, oneofs and enum
values; fields only one side has are pinned below with the REAPI version that
introduced them, so any new difference fails until someone looks at it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from lre.proto import bs_pb2, re_pb2, semver_pb2
from tests.proto import _descriptors

RE = "build.bazel.remote.execution.v2"

#: Fields and types we define that buildgrid-common 0.5.2 does not: the reference
#: predates these REAPI releases (version of first appearance in brackets).
ONLY_OURS_BECAUSE_REFERENCE_IS_OLDER = {
    f"{RE}.BatchReadBlobsRequest.acceptable_compressors": "2.3",
    f"{RE}.BatchReadBlobsRequest.digest_function": "2.5",
    f"{RE}.BatchReadBlobsResponse.Response.compressor": "2.3",
    f"{RE}.BatchUpdateBlobsRequest.digest_function": "2.5",
    f"{RE}.BatchUpdateBlobsRequest.Request.compressor": "2.3",
    f"{RE}.CacheCapabilities.supported_batch_update_compressors": "2.3",
    f"{RE}.CacheCapabilities.supported_compressors": "2.3",
    f"{RE}.Command.output_directory_format": "2.8",
    f"{RE}.Command.OutputDirectoryFormat": "2.8",
    f"{RE}.Compressor": "2.3",
    f"{RE}.Compressor.Value": "2.3",
    f"{RE}.DigestFunction.Value.BLAKE3": "2.8",
    f"{RE}.DigestFunction.Value.SHA256TREE": "2.5",
    f"{RE}.ExecuteOperationMetadata.digest_function": "2.11",
    f"{RE}.ExecuteOperationMetadata.partial_execution_metadata": "2.6",
    f"{RE}.ExecuteRequest.digest_function": "2.5",
    f"{RE}.ExecuteRequest.inline_output_files": "2.9",
    f"{RE}.ExecuteRequest.inline_stderr": "2.9",
    f"{RE}.ExecuteRequest.inline_stdout": "2.9",
    f"{RE}.ExecutedActionMetadata.virtual_execution_duration": "2.3",
    f"{RE}.ExecutionCapabilities.digest_functions": "2.7",
    f"{RE}.FindMissingBlobsRequest.digest_function": "2.5",
    f"{RE}.GetActionResultRequest.digest_function": "2.5",
    f"{RE}.GetTreeRequest.digest_function": "2.5",
    f"{RE}.OutputDirectory.is_topologically_sorted": "2.4",
    f"{RE}.OutputDirectory.root_directory_digest": "2.8",
    f"{RE}.RequestMetadata.action_mnemonic": "2.3",
    f"{RE}.RequestMetadata.configuration_id": "2.3",
    f"{RE}.RequestMetadata.target_id": "2.3",
    f"{RE}.UpdateActionResultRequest.digest_function": "2.5",
}

#: Same number, type and label, renamed by a later REAPI release (wire-compatible).
RENAMED_SINCE_REFERENCE = {
    f"{RE}.CacheCapabilities.digest_function -> digest_functions",  # 2.3
}


@pytest.fixture(scope="module")
def reference() -> dict[str, object]:
    """The reference's flattened descriptors and serialized files, from a subprocess."""
    script = Path(_descriptors.__file__)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,  # keeps the repository (and googleapis' google.*) out of the way
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def _our_files() -> list[descriptor_pb2.FileDescriptorProto]:
    return [
        _descriptors.parse_file(m.DESCRIPTOR.serialized_pb) for m in (re_pb2, semver_pb2, bs_pb2)
    ]


def _compare(
    files: list[descriptor_pb2.FileDescriptorProto], reference: dict[str, object]
) -> _descriptors.Comparison:
    flat = reference["flat"]
    assert isinstance(flat, dict)
    return _descriptors.compare(_descriptors.flatten(files), flat)


def test_reference_covers_the_same_files(reference: dict[str, object]) -> None:
    files = reference["files"]
    assert isinstance(files, dict)
    # Ours are registered under lre/proto/ so they never collide with another copy.
    assert sorted(f"lre/proto/{name}" for name in files) == sorted(f.name for f in _our_files())


def test_every_shared_name_agrees(reference: dict[str, object]) -> None:
    result = _compare(_our_files(), reference)
    assert result.mismatches == []


def test_enough_is_shared_for_the_comparison_to_mean_something(
    reference: dict[str, object],
) -> None:
    ours = _descriptors.flatten(_our_files())
    flat = reference["flat"]
    assert isinstance(flat, dict)
    shared = set(ours) & set(flat)
    for name in (
        f"{RE}.Action",
        f"{RE}.Command",
        f"{RE}.ActionResult",
        f"{RE}.Execution",
        f"{RE}.ContentAddressableStorage",
        f"{RE}.DigestFunction.Value",
        "build.bazel.semver.SemVer",
        "google.bytestream.ByteStream",
        "google.bytestream.WriteRequest",
        "google.bytestream.ReadRequest",
        "google.bytestream.QueryWriteStatusResponse",
    ):
        assert name in shared
    assert len(shared) >= 60


def test_one_sided_differences_are_only_the_known_newer_fields(
    reference: dict[str, object],
) -> None:
    """The reference is older: it may lack fields, but must define none we lack."""
    result = _compare(_our_files(), reference)
    assert result.only_reference == []
    assert sorted(result.only_ours) == sorted(ONLY_OURS_BECAUSE_REFERENCE_IS_OLDER)
    assert set(result.renamed) == RENAMED_SINCE_REFERENCE


def test_reserved_numbers_stay_reserved(reference: dict[str, object]) -> None:
    flat = reference["flat"]
    assert isinstance(flat, dict)
    action = flat[f"{RE}.Action"]
    assert isinstance(action, dict)
    assert action["reserved_ranges"], "the reference reserves Action fields 3-5 and 8"
    result = _compare(_our_files(), reference)
    assert not [m for m in result.mismatches if "reserve" in m]


# --- the comparison itself must be able to fail ---------------------------------------


def _altered(
    message: str, field: str, **changes: object
) -> list[descriptor_pb2.FileDescriptorProto]:
    """Our files, with one field of one top-level REAPI message changed in a copy."""
    files = _our_files()
    reapi = next(f for f in files if f.package == RE)
    msg = next(m for m in reapi.message_type if m.name == message)
    fld = next(f for f in msg.field if f.name == field)
    for key, value in changes.items():
        setattr(fld, key, value)
    return files


def test_a_single_wrong_field_number_is_reported(reference: dict[str, object]) -> None:
    result = _compare(_altered("Digest", "size_bytes", number=3), reference)
    assert result.mismatches == [f"{RE}.Digest.size_bytes: number is 3, reference has 2"]


def test_a_wrong_field_type_is_reported(reference: dict[str, object]) -> None:
    result = _compare(
        _altered("Digest", "size_bytes", type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32),
        reference,
    )
    assert result.mismatches == [
        f"{RE}.Digest.size_bytes: type is 'TYPE_INT32', reference has 'TYPE_INT64'"
    ]


def test_a_field_on_a_reserved_number_is_reported(reference: dict[str, object]) -> None:
    files = _our_files()
    reapi = next(f for f in files if f.package == RE)
    action = next(m for m in reapi.message_type if m.name == "Action")
    del action.reserved_range[:]
    action.field.add(
        name="sneaky",
        number=4,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    result = _compare(files, reference)
    assert f"{RE}.Action.sneaky: number 4 is reserved in the reference" in result.mismatches
    assert f"{RE}.Action: reference reserves 3, we do not" in result.mismatches


def test_a_wrong_enum_value_is_reported(reference: dict[str, object]) -> None:
    files = _our_files()
    reapi = next(f for f in files if f.package == RE)
    digest_function = next(m for m in reapi.message_type if m.name == "DigestFunction")
    value = next(v for v in digest_function.enum_type[0].value if v.name == "SHA1")
    value.number = 42
    result = _compare(files, reference)
    assert result.mismatches == [f"{RE}.DigestFunction.Value.SHA1: value is 42, reference has 2"]


def test_a_wrong_bytestream_field_is_reported(reference: dict[str, object]) -> None:
    files = _our_files()
    bytestream = next(f for f in files if f.package == "google.bytestream")
    write = next(m for m in bytestream.message_type if m.name == "WriteRequest")
    next(f for f in write.field if f.name == "data").number = 4
    result = _compare(files, reference)
    assert result.mismatches == [
        "google.bytestream.WriteRequest.data: number is 4, reference has 10"
    ]
