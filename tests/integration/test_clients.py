"""Requests shaped like the real clients' (see shared notes reapi-clients.md):

- Buck2: no digest_function anywhere, platform only in ``Command.platform``,
  ``output_paths``, BatchUpdateBlobs for small blobs and ByteStream for those
  above the advertised batch size, no WaitExecution; the result must carry
  ``execution_metadata`` and ``output_directories[].tree_digest``, and the Tree
  is read from the CAS by digest (never GetTree).
- Bazel: digest_function=SHA256 on every request, the RequestMetadata header,
  ByteStream uploads only, platform on both Action and Command, legacy
  ``output_files``/``output_directories`` next to ``output_paths``.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence

import grpc
import pytest

from lre.proto import re_pb2
from tests._support.actions import File, Link, TreeSpec, build_tree, platform_of
from tests._support.processes import require_tool
from tests._support.reapi import Client, digest, metadata_of, response_of, tree_files

OK = grpc.StatusCode.OK.value[0]
SHA256 = re_pb2.DigestFunction.SHA256


# ------------------------------------------------------------------ Buck2


class Buck2:
    """The calls Buck2's OSS RE client makes, in its order and shapes."""

    def __init__(self, client: Client) -> None:
        self.client = client
        caps = client.capabilities.GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name=client.instance), timeout=10
        )
        self.batch = caps.cache_capabilities.max_batch_total_size_bytes or 4_000_000
        self.writes: list[str] = []

    def upload(self, blobs: Sequence[bytes]) -> None:
        unique = {digest(blob).hash: blob for blob in blobs}
        missing: set[str] = set()
        hashes = list(unique)
        for start in range(0, len(hashes), 100):  # FindMissingBlobs in batches of 100
            found = self.client.missing([digest(unique[h]) for h in hashes[start : start + 100]])
            missing.update(d.hash for d in found)
        small = [unique[h] for h in missing if len(unique[h]) < self.batch]
        large = [unique[h] for h in missing if len(unique[h]) >= self.batch]
        assert large, "the test needs a blob above the batch size"
        self.client.upload(small)
        for blob in large:
            # WriteRequests of exactly the batch size, on {instance}/uploads/{uuid}/blobs/...
            self.client.write(blob, chunk=self.batch)
            self.writes.append(digest(blob).hash)

    def download(self, d: re_pb2.Digest) -> bytes:
        if d.size_bytes == 0:
            return b""
        if d.size_bytes < self.batch:
            (data,) = self.client.read_batch([d])
            return data
        return self.client.read(d)


def test_buck2_shaped_action(client: Client) -> None:
    buck2 = Buck2(client)
    big = os.urandom(buck2.batch + 123_457)
    inputs: TreeSpec = {
        "proj/data/big.bin": big,
        "proj/tools/gen.sh": File(
            b"#!/bin/sh\nset -e\nmkdir -p out/gen/nested\n"
            b"cp data/big.bin out/gen/big.copy\n"
            b"sha256sum data/big.bin | cut -d' ' -f1 > out/big.sha\n"
            b"printf '%s' \"$GREETING\" > out/gen/nested/greeting\n"
            b"ln -s big.copy out/gen/link\n",
            executable=True,
        ),
    }
    root, blobs = build_tree(inputs)
    command = re_pb2.Command(
        arguments=["tools/gen.sh"],
        # Buck2 sends the action's variables but never PATH.
        environment_variables=[re_pb2.Command.EnvironmentVariable(name="GREETING", value="hi")],
        output_paths=["out/big.sha", "out/gen"],
        working_directory="proj",
        platform=platform_of({"OSFamily": "linux"}),
    )
    action = re_pb2.Action(
        command_digest=digest(command.SerializeToString()),
        input_root_digest=root.to_proto(),
        salt=uuid.uuid4().bytes,
    )
    assert not action.HasField("platform")
    action_bytes = action.SerializeToString()
    buck2.upload([*blobs.values(), command.SerializeToString(), action_bytes])
    assert buck2.writes == [digest(big).hash]
    assert client.missing([digest(b) for b in blobs.values()]) == []

    # Buck2 asks the action cache first, then Executes skipping the lookup.
    with pytest.raises(grpc.RpcError) as raised:
        client.action_cache.GetActionResult(
            re_pb2.GetActionResultRequest(
                instance_name=client.instance, action_digest=digest(action_bytes)
            ),
            timeout=10,
        )
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    operations = client.execute(
        digest(action_bytes),
        skip_cache_lookup=True,
        execution_policy=re_pb2.ExecutionPolicy(priority=0),
        results_cache_policy=re_pb2.ResultsCachePolicy(priority=0),
    )
    for operation in operations:
        metadata = metadata_of(operation)
        assert metadata.action_digest == digest(action_bytes)
    response = response_of(operations[-1])  # the stream ended done: no WaitExecution
    assert response.status.code == OK, response.status
    assert response.HasField("result")
    result = response.result
    assert result.exit_code == 0, buck2.download(result.stderr_digest)

    # What Buck2's convert_action_result insists on.
    assert result.HasField("execution_metadata")
    assert result.execution_metadata.worker == "local"
    assert result.execution_metadata.HasField("worker_completed_timestamp")
    (sha,) = result.output_files
    assert sha.path == "out/big.sha" and sha.HasField("digest")
    assert buck2.download(sha.digest) == hashlib.sha256(big).hexdigest().encode() + b"\n"
    (gen,) = result.output_directories
    assert gen.path == "out/gen" and gen.HasField("tree_digest")

    # The Tree by its digest, from the CAS.
    tree = re_pb2.Tree.FromString(buck2.download(gen.tree_digest))
    files = tree_files(tree)
    assert sorted(files) == ["big.copy", "nested/greeting"]
    assert files["big.copy"].digest == digest(big)
    assert buck2.download(files["big.copy"].digest) == big
    assert buck2.download(files["nested/greeting"].digest) == b"hi"
    assert [(s.name, s.target) for s in tree.root.symlinks] == [("link", "big.copy")]

    # A later build finds it in the action cache, metadata included.
    cached = client.action_cache.GetActionResult(
        re_pb2.GetActionResultRequest(
            instance_name=client.instance, action_digest=digest(action_bytes)
        ),
        timeout=10,
    )
    assert cached == result


# ------------------------------------------------------------------ Bazel

LIB_C = b"""\
#include "lib.h"
int triple(int x) { return 3 * x; }
"""
LIB_H = b"int triple(int x);\n"


def request_metadata(action_digest: re_pb2.Digest) -> list[tuple[str, bytes]]:
    meta = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="7.4.1"),
        action_id=action_digest.hash,
        tool_invocation_id=str(uuid.uuid4()),
        correlated_invocations_id=str(uuid.uuid4()),
        action_mnemonic="CppCompile",
        target_id="//pkg:lib",
        configuration_id="9f2a6c0b1d",
    )
    return [("build.bazel.remote.execution.v2.requestmetadata-bin", meta.SerializeToString())]


def test_bazel_shaped_action(client: Client) -> None:
    require_tool("gcc")
    caps = client.capabilities.GetCapabilities(
        re_pb2.GetCapabilitiesRequest(instance_name=client.instance), timeout=10
    )
    # Bazel's compatibility checks.
    assert caps.execution_capabilities.exec_enabled
    assert SHA256 in caps.execution_capabilities.digest_functions
    assert SHA256 in caps.cache_capabilities.digest_functions
    assert (caps.low_api_version.major, caps.low_api_version.minor) <= (2, 0)
    assert (caps.high_api_version.major, caps.high_api_version.minor) >= (2, 2)

    root, blobs = build_tree(
        {
            "pkg/lib.c": LIB_C,
            "pkg/lib.h": LIB_H,
            "external/tool/README": b"unused input",
            "pkg/alias.h": Link("lib.h"),
        }
    )
    properties = platform_of({"OSFamily": "Linux"})
    command = re_pb2.Command(
        arguments=[
            "/bin/sh",
            "-c",
            "gcc -c -Ipkg -o bazel-out/k8/pkg/lib.o pkg/lib.c"
            " && mkdir -p bazel-out/k8/pkg/gen/sub"
            " && printf generated > bazel-out/k8/pkg/gen/sub/g.txt"
            " && ln -s lib.o bazel-out/k8/pkg/lib.link"
            " && echo compiled",
        ],
        environment_variables=[
            re_pb2.Command.EnvironmentVariable(name="PATH", value="/usr/bin:/bin"),
            re_pb2.Command.EnvironmentVariable(name="PWD", value="/proc/self/cwd"),
        ],
        output_files=["bazel-out/k8/pkg/lib.link", "bazel-out/k8/pkg/lib.o"],
        output_directories=["bazel-out/k8/pkg/gen"],
        output_paths=[
            "bazel-out/k8/pkg/gen",
            "bazel-out/k8/pkg/lib.link",
            "bazel-out/k8/pkg/lib.o",
        ],
        platform=properties,
    )
    command_bytes = command.SerializeToString()
    action = re_pb2.Action(
        command_digest=digest(command_bytes),
        input_root_digest=root.to_proto(),
        platform=properties,
        salt=uuid.uuid4().bytes,
    )
    action_bytes = action.SerializeToString()
    action_digest = digest(action_bytes)
    headers = request_metadata(action_digest)

    # Bazel: FindMissingBlobs, then one ByteStream Write per missing blob (no batches).
    everything = [*blobs.values(), command_bytes, action_bytes]
    missing = client.cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(
            instance_name=client.instance,
            blob_digests=[digest(b) for b in everything],
            digest_function=SHA256,
        ),
        metadata=headers,
        timeout=10,
    ).missing_blob_digests
    assert len(missing) == len({digest(b).hash for b in everything})
    by_hash = {digest(b).hash: b for b in everything}
    for d in missing:
        client.write(by_hash[d.hash], chunk=64 << 10)

    stream = client.execution.Execute(
        re_pb2.ExecuteRequest(
            instance_name=client.instance,
            action_digest=action_digest,
            digest_function=SHA256,
        ),
        metadata=headers,
        timeout=60,
    )
    operations = list(stream)
    assert all(metadata_of(op).digest_function == SHA256 for op in operations)
    response = response_of(operations[-1])
    assert response.status.code == OK, response.status
    result = response.result
    assert result.exit_code == 0, client.stderr(result)
    assert client.stdout(result) == b"compiled\n"

    # Legacy and new fields both describe the outputs.
    (obj,) = result.output_files
    assert obj.path == "bazel-out/k8/pkg/lib.o"
    assert client.read(obj.digest)[:4] == b"\x7fELF"
    (gen,) = result.output_directories
    assert gen.path == "bazel-out/k8/pkg/gen"
    tree = re_pb2.Tree.FromString(client.read(gen.tree_digest))
    assert client.read(tree_files(tree)["sub/g.txt"].digest) == b"generated"
    link = [("bazel-out/k8/pkg/lib.link", "lib.o")]
    assert [(s.path, s.target) for s in result.output_symlinks] == link
    assert [(s.path, s.target) for s in result.output_file_symlinks] == link

    # Bazel re-reads the result with inlined stdout.
    cached = client.action_cache.GetActionResult(
        re_pb2.GetActionResultRequest(
            instance_name=client.instance,
            action_digest=action_digest,
            inline_stdout=True,
            inline_stderr=True,
            digest_function=SHA256,
        ),
        metadata=headers,
        timeout=10,
    )
    assert cached.stdout_raw == b"compiled\n"
    assert cached.execution_metadata == result.execution_metadata
    assert list(cached.output_files) == list(result.output_files)


def test_request_metadata_on_a_failing_action(client: Client) -> None:
    prepared = client.prepare(["/bin/sh", "-c", "echo 'error: no' >&2; exit 1"])
    operations = client.execution.Execute(
        client.execute_request(prepared, digest_function=SHA256),
        metadata=request_metadata(prepared.action_digest),
        timeout=60,
    )
    response = response_of(list(operations)[-1])
    assert response.status.code == OK
    assert response.result.exit_code == 1
    assert client.stderr(response.result) == b"error: no\n"
