"""Real commands through the whole stack: a client uploads inputs over gRPC,
Executes, and reads every output back from lre's CAS.

One lre per module (see conftest); each action is salted so none of them is
answered from another test's cache entry.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import grpc
import pytest

from lre.proto import operations_pb2, re_pb2
from tests._support.actions import File
from tests._support.lre_as import SETUPS, require_setup
from tests._support.processes import processes_with, require_tool, wait_until
from tests._support.reapi import Client, Stage, digest, metadata_of, response_of, tree_files

from .test_hostile_clients import lre_as

OK = grpc.StatusCode.OK.value[0]
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]

#: lre's default PATH for Commands that set none (LocalWorkerSpec.default_path).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

C_SOURCE = b"""\
int square(int x) { return x * x; }
int answer(void) { return square(6) + 6; }
"""


def test_gcc_compiles_a_c_file(client: Client, tmp_path: Path) -> None:
    require_tool("gcc")
    response = client.run(
        ["gcc", "-c", "-o", "out/x.o", "src/x.c"],
        inputs={"src/x.c": C_SOURCE},
        output_paths=["out/x.o"],
    )
    assert response.status.code == OK, response.status
    result = response.result
    assert result.exit_code == 0, client.stderr(result)
    assert [f.path for f in result.output_files] == ["out/x.o"]
    (object_file,) = result.output_files
    data = client.read(object_file.digest)
    assert digest(data) == object_file.digest
    assert data[:4] == b"\x7fELF"
    # The same compiler run here gives the same bytes.
    (tmp_path / "src").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "src/x.c").write_bytes(C_SOURCE)
    subprocess.run(["gcc", "-c", "-o", "out/x.o", "src/x.c"], cwd=tmp_path, check=True)
    assert (tmp_path / "out/x.o").read_bytes() == data


def test_shell_pipeline(client: Client) -> None:
    response = client.run(
        [
            "/bin/sh",
            "-c",
            "sort in/words | uniq -c | sort -rn | head -n 2 > out/top;"
            " tr a-z A-Z < in/words | tr -d '\\n'",
        ],
        inputs={"in/words": b"pear\napple\nfig\napple\npear\napple\n"},
        output_paths=["out/top"],
    )
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0)
    assert client.stdout(result) == b"PEARAPPLEFIGAPPLEPEARAPPLE"
    (top,) = result.output_files
    assert top.path == "out/top"
    assert client.read(top.digest) == b"      3 apple\n      2 pear\n"


def test_outputs_of_every_kind(client: Client) -> None:
    script = (
        "mkdir -p out/dir/sub/deep out/dir/empty;"
        " printf regular > out/file;"
        " printf '#!/bin/sh\\necho tool\\n' > out/tool; chmod 755 out/tool;"
        " printf deep > out/dir/sub/deep/f; printf g > out/dir/g; chmod +x out/dir/g;"
        " ln -s file out/link"
    )
    response = client.run(
        ["/bin/sh", "-c", script],
        output_paths=["out/dir", "out/file", "out/link", "out/missing", "out/tool"],
    )
    assert response.status.code == OK, response.status
    result = response.result
    assert result.exit_code == 0, client.stderr(result)

    files = {f.path: f for f in result.output_files}
    assert sorted(files) == ["out/file", "out/tool"]  # out/missing is omitted
    assert client.read(files["out/file"].digest) == b"regular"
    assert not files["out/file"].is_executable
    assert client.read(files["out/tool"].digest) == b"#!/bin/sh\necho tool\n"
    assert files["out/tool"].is_executable

    assert [(s.path, s.target) for s in result.output_symlinks] == [("out/link", "file")]
    assert [(s.path, s.target) for s in result.output_file_symlinks] == [("out/link", "file")]

    (directory,) = result.output_directories
    assert directory.path == "out/dir"
    tree = re_pb2.Tree.FromString(client.read(directory.tree_digest))
    assert digest(tree.SerializeToString()) == directory.tree_digest
    assert [d.name for d in tree.root.directories] == ["empty", "sub"]
    files_in_tree = tree_files(tree)
    assert sorted(files_in_tree) == ["g", "sub/deep/f"]
    assert client.read(files_in_tree["sub/deep/f"].digest) == b"deep"
    assert client.read(files_in_tree["g"].digest) == b"g"
    assert files_in_tree["g"].is_executable
    assert not files_in_tree["sub/deep/f"].is_executable
    # Every child directory of the tree is in it (empty, sub, sub/deep).
    assert len(tree.children) == 3


def test_working_directory(client: Client) -> None:
    response = client.run(
        ["/bin/sh", "-c", "pwd > out/pwd; cat data.txt; ls"],
        inputs={"pkg/data.txt": b"inside pkg\n", "top.txt": b"top"},
        working_directory="pkg",
        output_paths=["out/pwd"],
    )
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0), client.stderr(result)
    # lre created the parent of the output path, relative to the working directory.
    assert client.stdout(result) == b"inside pkg\ndata.txt\nout\n"
    (pwd,) = result.output_files
    # Output paths are relative to the working directory.
    assert pwd.path == "out/pwd"
    assert client.read(pwd.digest).decode().rstrip("\n").endswith("/pkg")


def environment_of(stdout: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.decode().splitlines())


def test_environment_is_exactly_the_commands(client: Client) -> None:
    variables = {"A_VAR": "1", "EMPTY": "", "WITH_SPACE": "a b  c", "LANG": "C"}
    response = client.run(["env"], env=variables)
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0)
    env = environment_of(client.stdout(result))
    # The jobserver (on by default) advertises its pool and the action's
    # private temporary directory is named; nothing else is added.
    makeflags = env.pop("MAKEFLAGS")
    assert env.pop("CARGO_MAKEFLAGS") == makeflags
    assert "--jobserver-auth=" in makeflags
    tmp = {env.pop(name) for name in ("TMPDIR", "TMP", "TEMP")}
    assert len(tmp) == 1 and next(iter(tmp)).endswith("/tmp")
    assert env == {**variables, "PATH": DEFAULT_PATH}

    # A PATH of the Command's own is kept as it is.
    response = client.run(["/usr/bin/env"], env={"PATH": "/bin"})
    env = environment_of(client.stdout(response.result))
    added = ("MAKEFLAGS", "CARGO_MAKEFLAGS", "TMPDIR", "TMP", "TEMP")
    assert {k: v for k, v in env.items() if k not in added} == {"PATH": "/bin"}


def test_non_zero_exit_is_a_result(client: Client) -> None:
    response = client.run(["/bin/sh", "-c", "echo out; echo 'it broke' >&2; exit 3"])
    assert response.status.code == OK, response.status
    result = response.result
    assert result.exit_code == 3
    assert client.stdout(result) == b"out\n"
    assert client.stderr(result) == b"it broke\n"
    assert result.HasField("execution_metadata")


def test_timeout_keeps_partial_output(client: Client, marker: str) -> None:
    started = time.monotonic()
    response = client.run(
        ["/bin/sh", "-c", f"echo partial; echo err-so-far >&2; sleep {marker}"],
        timeout_s=1,
    )
    assert time.monotonic() - started < 20
    assert response.status.code == DEADLINE_EXCEEDED, response.status
    assert client.stdout(response.result) == b"partial\n"
    assert client.stderr(response.result) == b"err-so-far\n"
    # SIGKILLed with its group; it may take a moment to finish exiting.
    assert wait_until(lambda: not processes_with(marker), seconds=5), processes_with(marker)


def test_cancelling_the_execute_stream_kills_the_action(client: Client, marker: str) -> None:
    call = client.execution.Execute(
        client.execute_request(client.prepare(["/bin/sh", "-c", f"sleep {marker}; echo done"])),
        timeout=60,
    )
    name = ""
    for operation in call:
        name = operation.name
        if metadata_of(operation).stage == Stage.EXECUTING:
            break
    assert wait_until(lambda: processes_with(marker)), "the action never started"
    call.cancel()
    assert wait_until(lambda: not processes_with(marker)), processes_with(marker)

    # The operation ended as cancelled (Operations.GetOperation still knows it).
    def finished() -> operations_pb2.Operation:
        got: operations_pb2.Operation = client.operations.GetOperation(
            operations_pb2.GetOperationRequest(name=name), timeout=10
        )
        return got

    assert wait_until(lambda: finished().done)
    assert response_of(finished()).status.code == grpc.StatusCode.CANCELLED.value[0]


def test_background_children_do_not_survive(client: Client, marker: str) -> None:
    # Each one leaves the action's process group in its own way and says so
    # before it sleeps; the action's PID namespace hides their host pids, so
    # they are found by the marker in their command line.
    children = [
        "sh -c 'echo started; exec sleep {m}' &",
        "setsid sh -c 'echo started; exec sleep {m}' &",
        "sh -c \"setsid sh -c 'echo started; exec sleep {m}' &\";",
    ]
    script = " ".join(c.format(m=marker) for c in children) + " sleep 0.2; exit 0"
    response = client.run(["/bin/sh", "-c", script])
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0)
    assert client.stdout(result).split() == [b"started"] * 3, client.stdout(result)
    # A process SIGKILLed a moment ago may still be exiting (state R, empty
    # cmdline); it must be gone or a zombie (waiting for init) shortly after.
    assert wait_until(lambda: processes_with(marker) == [], seconds=5), processes_with(marker)


def test_executable_input_and_nested_inputs(client: Client) -> None:
    response = client.run(
        ["./bin/tool", "a/b/c.txt"],
        inputs={
            "bin/tool": File(b'#!/bin/sh\ncat "$1"\necho ran\n', executable=True),
            "a/b/c.txt": b"nested input\n",
        },
    )
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0), client.stderr(result)
    assert client.stdout(result) == b"nested input\nran\n"


def test_large_stdout_is_kept_whole(client: Client) -> None:
    response = client.run(["/bin/sh", "-c", "yes 0123456789abcdef | head -c 5000000"])
    assert (response.status.code, response.result.exit_code) == (OK, 0)
    assert response.result.stdout_digest.size_bytes == 5_000_000
    assert client.stdout(response.result) == (b"0123456789abcdef\n" * 294_118)[:5_000_000]


def test_inputs_named_as_outputs(client: Client) -> None:
    content = b"input reported as output " + uuid.uuid4().hex.encode()
    inputs = {"in/f": content, "in/tool": File(b"#!/bin/sh\n", executable=True)}
    response = client.run(
        ["/bin/sh", "-c", "cp -l in/f out/linked"],
        inputs=inputs,
        output_paths=["in", "in/f", "out/linked"],
    )
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0), client.stderr(result)
    assert [(f.path, f.digest) for f in result.output_files] == [
        ("in/f", digest(content)),
        ("out/linked", digest(content)),
    ]
    (directory,) = result.output_directories
    tree = re_pb2.Tree.FromString(client.read(directory.tree_digest))
    files = tree_files(tree)
    assert sorted(files) == ["f", "tool"] and files["tool"].is_executable
    # Moving outputs into the CAS left the inputs intact for the next action.
    assert client.read(digest(content)) == content
    later = client.run(["/bin/sh", "-c", "cat in/f; stat -c %a in/f in/tool"], inputs=inputs)
    assert client.stdout(later.result) == content + b"444\n555\n"


def directory_files(client: Client, result: re_pb2.ActionResult) -> dict[str, re_pb2.FileNode]:
    """The files of the result's one output directory, by path."""
    (directory,) = result.output_directories
    return tree_files(re_pb2.Tree.FromString(client.read(directory.tree_digest)))


def test_an_input_removed_inside_an_output_directory_is_absent(client: Client) -> None:
    inputs = {"in/f": b"kept", "in/tool": File(b"#!/bin/sh\n", executable=True), "in/sub/g": b"g"}
    response = client.run(
        ["/bin/sh", "-c", "rm in/tool in/sub/g && echo new > in/sub/new"],
        inputs=inputs,
        output_paths=["in", "in/tool"],
    )
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0), client.stderr(result)
    assert not result.output_files  # in/tool is gone
    files = directory_files(client, result)
    assert sorted(files) == ["f", "sub/new"]
    assert client.read(files["f"].digest) == b"kept"


#: Inputs whose subdirectory ``in/sub`` an action removes (and makes again).
REMOVABLE_INPUTS = {"in/f": b"kept", "in/sub/old": b"old", "in/sub/deeper/x": b"x"}


def remade_directory_files(client: Client) -> dict[str, re_pb2.FileNode]:
    """Output ``in`` of an action that removed ``in/sub`` and made it again."""
    response = client.run(
        ["/bin/sh", "-c", "rm -rf in/sub && mkdir in/sub && echo new > in/sub/new"],
        inputs=REMOVABLE_INPUTS,
        output_paths=["in"],
    )
    result = response.result
    assert (response.status.code, result.exit_code) == (OK, 0), client.stderr(result)
    files = directory_files(client, result)
    assert sorted(files) == ["f", "sub/new"]
    assert client.read(files["sub/new"].digest) == b"new\n"
    return files


def test_a_directory_removed_and_made_again_holds_only_its_new_entries(client: Client) -> None:
    remade_directory_files(client)


def test_inputs_inside_an_output_directory_of_an_unprivileged_lre() -> None:
    # The userns backend's overlay (mounted in a user namespace, as nobody):
    # whiteouts only, and outputs read by an lre that cannot read trusted.*.
    with lre_as("nobody", "userns") as addresses, Client(addresses["grpc"]) as client:
        inputs = {"in/f": b"kept", "in/tool": b"tool", "in/sub/g": b"g"}
        response = client.run(
            ["/bin/sh", "-c", "rm in/tool && echo new > in/sub/new"],
            inputs=inputs,
            output_paths=["in", "in/f"],
        )
        result = response.result
        assert (response.status.code, result.exit_code) == (OK, 0), client.stderr(result)
        assert [f.path for f in result.output_files] == ["in/f"]
        files = directory_files(client, result)
        assert sorted(files) == ["f", "sub/g", "sub/new"]
        # Untouched inputs were copied from the staged tree, never moved.
        again = client.run(["/bin/cat", "in/f", "in/sub/g"], inputs=inputs)
        assert client.stdout(again.result) == b"keptg"


#: Every setup whose overlay is mounted inside a user namespace.
USERNS_SETUPS = [setup for setup in SETUPS if setup[0] == "userns"]


@pytest.mark.parametrize(
    ("containment", "identity"), USERNS_SETUPS, ids=[f"{c}-{i}" for c, i in USERNS_SETUPS]
)
def test_input_directories_removed_in_a_user_namespaces_overlay(
    containment: str, identity: str
) -> None:
    # Mounted inside a user namespace, the overlay can keep its marks only in
    # user.overlay.* (userxattr): removing a directory that holds inputs, or
    # making it again, needs an opaque directory.
    require_setup(containment, identity)
    with lre_as(identity, containment) as addresses, Client(addresses["grpc"]) as client:
        removed = client.run(
            ["/bin/sh", "-c", "rm -rf in/sub && ls -A in"],
            inputs=REMOVABLE_INPUTS,
            output_paths=["in"],
        )
        result = removed.result
        assert (removed.status.code, result.exit_code) == (OK, 0), client.stderr(result)
        assert client.stdout(result) == b"f\n"
        files = directory_files(client, result)
        assert sorted(files) == ["f"]
        files = remade_directory_files(client)
        assert client.read(files["f"].digest) == b"kept"


@pytest.mark.parametrize(
    ("script", "path", "target"),
    [
        ("ln -s ../../../etc/passwd out/esc", "out/esc", "../../../etc/passwd"),
        ("mkdir -p out/sub; ln -s ../../../.. out/sub/esc", "out/sub/esc", "../../../.."),
        ("ln -s /etc/passwd out/esc", "out/esc", "/etc/passwd"),
    ],
)
def test_output_symlinks_leaving_the_input_root_are_refused(
    client: Client, script: str, path: str, target: str
) -> None:
    output = "out" if "sub" in path else path
    response = client.run(["/bin/sh", "-c", script], output_paths=[output])
    assert response.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert f"output {path!r}" in response.status.message
    assert repr(target) in response.status.message
    assert "symlink_policy is reject" in response.status.message


def test_over_long_timeout_is_refused_naming_the_maximum(client: Client) -> None:
    response = client.run(["true"], timeout_s=7200)
    assert response.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "Action.timeout" in response.status.message
    assert "7200 s" in response.status.message and "3600 s" in response.status.message


def test_an_action_writing_an_input_does_not_alter_the_cas(client: Client) -> None:
    content = b"pristine input " + uuid.uuid4().hex.encode()
    response = client.run(
        ["/bin/sh", "-c", "chmod u+w in/f; printf EVIL | dd of=in/f conv=notrunc; cat in/f"],
        inputs={"in/f": content},
    )
    assert (response.status.code, response.result.exit_code) == (OK, 0), response.status
    # The action saw its own write (a copy in its view) ...
    assert client.stdout(response.result) == b"EVIL" + content[4:]
    # ... and the CAS still serves, and later actions still get, the pristine
    # bytes: the staged input is never writable in place.
    assert client.missing([digest(content)]) == []
    assert client.read(digest(content)) == content
    later = client.run(["cat", "in/f"], inputs={"in/f": content})
    assert client.stdout(later.result) == content


def test_an_action_chmodding_an_input_does_not_change_later_actions(client: Client) -> None:
    content = b"plain data " + uuid.uuid4().hex.encode()
    response = client.run(["chmod", "755", "in/f"], inputs={"in/f": content})
    assert (response.status.code, response.result.exit_code) == (OK, 0)
    assert client.missing([digest(content)]) == []
    later = client.run(["stat", "-c", "%a", "in/f"], inputs={"in/f": content})
    assert client.stdout(later.result) == b"444\n"
