"""Hostile outputs and requests through a whole lre: each ends its own action
only.

Every test here is the attack written as a build would make it: an action
that leaves an odd name, a deep tree, a sparse giant, or a client that sends
a deep or shared input tree. After each, the same lre must still run an
ordinary action (``still_serving``), and every blob a result names must hash
to its digest.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import grpc
import pytest

from lre.proto import re_pb2
from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.reapi import Client, digest, response_of
from tests._support.servers import ServerThread

from .test_hostile_clients import lre_as

OK = grpc.StatusCode.OK.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


def still_serving(client: Client) -> None:
    """lre runs an ordinary action after the attack and returns its output."""
    response = client.run(
        ["/bin/sh", "-c", "echo fine > out.txt"], output_paths=["out.txt"], timeout_s=60
    )
    assert response.status.code == OK, response.status
    (out,) = response.result.output_files
    assert client.read(out.digest) == b"fine\n"


def sh(client: Client, script: str, outputs: list[str], **action: object) -> re_pb2.ExecuteResponse:
    return client.run(["/bin/sh", "-c", script], output_paths=outputs, **action)


# ------------------------------------------------------------------ names


def test_a_non_utf8_file_name_in_an_output_directory_fails_that_action_only(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="lre"):
        response = sh(client, "mkdir -p out/d && echo x > \"out/d/a$(printf '\\377')b\"", ["out/d"])
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "out/d/a\\xffb" in response.status.message
    assert "UTF-8" in response.status.message
    # Logged once, by the worker, with the path escaped.
    lines = [r.getMessage() for r in caplog.records if "out/d/a\\xffb" in r.getMessage()]
    assert len(lines) == 1, lines
    still_serving(client)


def test_a_non_utf8_symlink_target_fails_that_action_only(client: Client) -> None:
    response = sh(client, "mkdir -p out/d && ln -s \"t$(printf '\\377')\" out/d/link", ["out/d"])
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "out/d/link" in response.status.message
    assert "t\\xff" in response.status.message
    still_serving(client)


def test_a_non_utf8_output_symlink_target_fails_that_action_only(client: Client) -> None:
    response = sh(client, "ln -s \"x$(printf '\\376')y\" out.lnk", ["out.lnk"])
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "x\\xfey" in response.status.message
    still_serving(client)


def _wire(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (payload under 128 bytes)."""
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


def test_an_input_name_that_is_not_utf8_is_refused_naming_it(client: Client) -> None:
    # Directory.files[0] = FileNode(name=b"a\xffb", digest=<empty blob>):
    # written by hand, as protobuf refuses to build it.
    empty = digest(b"")
    node = _wire(1, b"a\xffb") + _wire(2, empty.SerializeToString())
    root_bytes = _wire(1, node)
    client.upload([root_bytes])
    response = client.run(["/bin/true"], input_root=digest(root_bytes))
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "a\\xffb" in response.status.message
    assert "UTF-8" in response.status.message
    still_serving(client)


def test_a_command_output_path_that_is_not_utf8_is_refused(client: Client) -> None:
    prepared = client.prepare(["/bin/true"], upload=False)
    command_bytes = prepared.command.SerializeToString(deterministic=True) + _wire(
        7, b"out\xfe"
    )  # Command.output_paths
    action = re_pb2.Action()
    action.CopyFrom(prepared.action)
    action.command_digest.CopyFrom(digest(command_bytes))
    action_bytes = action.SerializeToString(deterministic=True)
    client.upload([command_bytes, action_bytes])
    operations = client.execute(digest(action_bytes))
    final = operations[-1]
    status = final.error if final.HasField("error") else response_of(final).status
    assert status.code == INVALID_ARGUMENT, status
    assert "UTF-8" in status.message
    still_serving(client)


# ------------------------------------------------------------------ trees


def _chain(depth: int) -> tuple[re_pb2.Digest, list[bytes]]:
    """A chain of ``depth`` directories, each holding the next as "d"."""
    blobs = [b""]
    child = digest(b"")
    for _ in range(depth - 1):
        data = re_pb2.Directory(
            directories=[re_pb2.DirectoryNode(name="d", digest=child)]
        ).SerializeToString(deterministic=True)
        blobs.append(data)
        child = digest(data)
    return child, blobs


def _doubling(levels: int) -> tuple[re_pb2.Digest, list[bytes]]:
    """``levels`` levels of a Directory naming the next one twice: 2**(levels+1)-1
    directories once expanded, ``levels`` + 1 distinct messages."""
    blobs = [b""]
    child = digest(b"")
    for _ in range(levels):
        data = re_pb2.Directory(
            directories=[
                re_pb2.DirectoryNode(name="a", digest=child),
                re_pb2.DirectoryNode(name="b", digest=child),
            ]
        ).SerializeToString(deterministic=True)
        blobs.append(data)
        child = digest(data)
    return child, blobs


def test_an_input_tree_1100_deep_is_refused_naming_the_limit(client: Client) -> None:
    root, blobs = _chain(1100)
    client.upload(blobs)
    response = client.run(["/bin/true"], input_root=root)
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "max_tree_depth" in response.status.message
    still_serving(client)


def test_a_shared_subtree_dag_of_262143_directories_is_refused(client: Client) -> None:
    root, blobs = _doubling(17)
    assert sum(len(b) for b in blobs) < 4000  # a few KB of messages
    client.upload(blobs)
    response = client.run(["/bin/true"], input_root=root)
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "max_tree_directories" in response.status.message
    still_serving(client)


def test_an_output_directory_1100_deep_fails_that_action_only(client: Client) -> None:
    script = (
        "cd out && i=0; while [ $i -lt 1100 ]; do mkdir d && cd d; i=$((i+1)); done; echo x > f"
    )
    response = sh(client, "mkdir out && " + script, ["out"])
    assert response.status.code == INVALID_ARGUMENT, response.status
    assert "max_tree_depth" in response.status.message
    still_serving(client)


# ------------------------------------------------------------------ sizes

TIB = 1 << 40


def test_a_sparse_terabyte_output_file_is_refused_without_reading_it(client: Client) -> None:
    response = sh(client, f"truncate -s {TIB} big && echo small > small", ["big", "small"])
    assert response.status.code == RESOURCE_EXHAUSTED, response.status
    assert "big" in response.status.message
    assert "max_output_bytes" in response.status.message
    still_serving(client)


def test_a_sparse_terabyte_stdout_is_refused_without_reading_it(client: Client) -> None:
    # stdout is a regular file lre opened; truncating it up makes it a
    # terabyte of holes.
    response = sh(
        client,
        f"truncate -s {TIB} /dev/stdout",
        [],
    )
    assert response.status.code == RESOURCE_EXHAUSTED, response.status
    assert "stdout" in response.status.message
    assert "max_output_bytes" in response.status.message
    still_serving(client)


AS_NOBODY = "setpriv --reuid=nobody --regid=nogroup --clear-groups"


@pytest.mark.parametrize(
    ("attack", "code", "named"),
    [
        ("mkdir out/d && echo x > \"out/d/a$(printf '\\377')b\"", INVALID_ARGUMENT, "a\\xffb"),
        (f"truncate -s {TIB} out/big", RESOURCE_EXHAUSTED, "out/big"),
        (
            "p=out; i=0; while [ $i -lt 300 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p",
            INVALID_ARGUMENT,
            "max_tree_depth",
        ),
    ],
    ids=["non-utf8-name", "sparse-terabyte", "deep"],
)
def test_the_same_attacks_as_an_unprivileged_user(
    client: Client, attack: str, code: int, named: str
) -> None:
    # The action drops to nobody before it makes its outputs: files lre does
    # not own are copied, never moved, and judged the same way.
    if not _can_become_nobody():
        pytest.fail("setpriv to nobody is needed (run as root)")
    script = f"mkdir -m 777 out && {AS_NOBODY} sh -c {_quote(attack)}"
    response = sh(client, script, ["out"])
    assert response.status.code == code, (response.status, client.stderr(response.result))
    assert named in response.status.message
    still_serving(client)


#: (attack script, outputs, status code, what the message must name): each
#: one of the cases above, made in the action of an lre that is itself
#: unprivileged.
_UNPRIVILEGED_ATTACKS = [
    (
        "mkdir -p out/d && echo x > \"out/d/a$(printf '\\377')b\"",
        ["out"],
        INVALID_ARGUMENT,
        "a\\xffb",
    ),
    ("ln -s \"x$(printf '\\376')y\" out.lnk", ["out.lnk"], INVALID_ARGUMENT, "x\\xfey"),
    (f"truncate -s {TIB} big", ["big"], RESOURCE_EXHAUSTED, "max_output_bytes"),
    (f"truncate -s {TIB} /dev/stdout", [], RESOURCE_EXHAUSTED, "stdout"),
    (
        "mkdir out && cd out && i=0; while [ $i -lt 1100 ]; do mkdir d && cd d; i=$((i+1)); done",
        ["out"],
        INVALID_ARGUMENT,
        "max_tree_depth",
    ),
    # Left in the action directory, not an output: only clean-up meets it.
    (
        "mkdir -p junk/x && chmod 000 junk/x && i=0; cd junk; "
        "while [ $i -lt 1100 ]; do mkdir d && cd d; i=$((i+1)); done; chmod 000 .",
        [],
        OK,
        "",
    ),
]


@pytest.mark.parametrize("containment", ["userns", "portable"])
def test_the_same_attacks_on_an_unprivileged_lre(containment: str) -> None:
    # lre itself runs as nobody (no cgroups, no CAP_SYS_ADMIN, a user
    # namespace per action under userns): every case still ends its own
    # action only, and the shared-subtree DAG and the deep input tree are
    # refused by the same default limits.
    if not _can_become_nobody():
        pytest.fail("starting lre as nobody needs root")
    with lre_as("nobody", containment) as addresses, Client(addresses["grpc"]) as client:
        for script, outputs, code, named in _UNPRIVILEGED_ATTACKS:
            response = sh(client, script, outputs, timeout_s=120)
            assert response.status.code == code, (script, response.status)
            assert named in response.status.message, (script, response.status)
            still_serving(client)
        for root, blobs, key in (
            (*_chain(1100), "max_tree_depth"),
            (*_doubling(17), "max_tree_directories"),
        ):
            client.upload(blobs)
            response = client.run(["/bin/true"], input_root=root)
            assert response.status.code == INVALID_ARGUMENT, response.status
            assert key in response.status.message
        still_serving(client)


def _can_become_nobody() -> bool:
    return os.geteuid() == 0


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# ------------------------------------------------------------------ storage errors


@pytest.fixture(scope="module")
def small_cas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """An lre whose CAS holds 4 MiB while its output limit lets more through."""
    root = tmp_path_factory.mktemp("small")
    text = app_config_text(
        root,
        extra_worker=WORKER_EXTRA + ', limits: { max_output_bytes: "64MiB" }',
    ).replace('max_bytes: "1GiB"', 'max_bytes: "4MiB"')
    server = ServerThread(root, text)
    server.start()
    assert server.ready is not None
    remote = Client(server.ready.grpc_addresses[0])
    try:
        yield remote
    finally:
        remote.close()
        server.stop()


def test_an_output_larger_than_the_cas_fails_that_action_only(small_cas: Client) -> None:
    response = sh(
        small_cas,
        "head -c 8388608 /dev/urandom > big && echo a > a && echo b > b",
        ["a", "b", "big"],
    )
    assert response.status.code == RESOURCE_EXHAUSTED, response.status
    assert "big" in response.status.message
    assert "8388608" in response.status.message
    still_serving(small_cas)
