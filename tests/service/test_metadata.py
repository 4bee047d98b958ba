"""request_metadata_from: the RequestMetadata header, read as the scheduler keeps it."""

from __future__ import annotations

from lre.proto import REQUEST_METADATA_KEY, re_pb2
from lre.scheduler import RequestInfo
from lre.service._metadata import REPOSITORY_KEY, request_metadata_from

SENT = re_pb2.RequestMetadata(
    tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="4.2.3"),
    action_id="a1",
    tool_invocation_id="inv-1",
    correlated_invocations_id="corr-1",
    action_mnemonic="CppCompile",
    target_id="//app:main",
    configuration_id="k8-fastbuild",
)


def test_every_field_arrives() -> None:
    raw = SENT.SerializeToString()
    got = request_metadata_from([("other", "x"), (REQUEST_METADATA_KEY, raw)])
    assert got == RequestInfo(
        tool_name="bazel",
        tool_version="4.2.3",
        action_id="a1",
        tool_invocation_id="inv-1",
        correlated_invocations_id="corr-1",
        action_mnemonic="CppCompile",
        target_id="//app:main",
        configuration_id="k8-fastbuild",
    )
    # grpc may hand a binary header over as a latin-1 str
    assert request_metadata_from([(REQUEST_METADATA_KEY, raw.decode("latin-1"))]) == got


def test_absent_or_malformed_headers_say_nothing() -> None:
    assert request_metadata_from(None) == RequestInfo()
    assert request_metadata_from([("x", "y")]) == RequestInfo()
    assert request_metadata_from([(REQUEST_METADATA_KEY, b"\xff\xff\xff")]) == RequestInfo()


def test_the_repository_header_arrives_with_or_without_request_metadata() -> None:
    raw = SENT.SerializeToString()
    got = request_metadata_from([(REPOSITORY_KEY, " proj-1a2b "), (REQUEST_METADATA_KEY, raw)])
    assert (got.repository, got.target_id) == ("proj-1a2b", "//app:main")
    assert request_metadata_from([(REPOSITORY_KEY, b"proj")]) == RequestInfo(repository="proj")
    # a malformed RequestMetadata does not lose the repository
    bad = request_metadata_from([(REQUEST_METADATA_KEY, b"\xff\xff\xff"), (REPOSITORY_KEY, "p")])
    assert bad == RequestInfo(repository="p")
