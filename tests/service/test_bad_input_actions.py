"""Bad action input: escaping symlinks, paths and working directories, bad
Directory names, gigantic argument lists.

lre does not serve Execute yet, so these drive the validators the worker
runs on every action (input tree, Command) with real stores and real
processes; each refusal is ``InvalidArgument`` naming the field and value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.cas import DirectoryReader, MemoryStore, write_message
from lre.cas._blob_io import write_bytes
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument
from lre.proto import re_pb2
from lre.worker.inputs._input_tree import fetch_input_tree
from lre.worker.process._command import prepare_command
from lre.worker.process._process import SpawnRequest, run_process


def command(**fields: object) -> re_pb2.Command:
    fields.setdefault("arguments", ["/bin/true"])
    return re_pb2.Command(**fields)  # type: ignore[arg-type]


def prepare(cmd: re_pb2.Command, root: Path) -> None:
    prepare_command(
        cmd,
        entrypoint=(),
        additional_environment={},
        platform={},
        timeout_s=10,
        input_root=root,
        default_path="/usr/bin:/bin",
    )


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"working_directory": "/tmp"}, "Command.working_directory: '/tmp' is absolute"),
        ({"working_directory": ".."}, "Command.working_directory: '..' points outside"),
        ({"working_directory": "a/../../b"}, "'a/../../b' points outside"),
        ({"working_directory": "a\0"}, "contains NUL"),
        ({"output_paths": ["/etc/passwd"]}, "Command.output_paths: '/etc/passwd'"),
        ({"output_paths": ["../x"]}, "Command.output_paths: '../x' points outside"),
        ({"output_paths": [""]}, "Command.output_paths: '' must be a non-empty"),
        ({"output_paths": ["."]}, "Command.output_paths: '.' names the input root"),
        ({"output_files": ["a/../../x"]}, "Command.output_files: 'a/../../x' points outside"),
        ({"output_directories": ["/abs"]}, "Command.output_directories: '/abs'"),
        (
            {"working_directory": "sub", "output_paths": ["../../x"]},
            "Command.output_paths: 'sub/../../x' points outside",
        ),
        ({"arguments": []}, "Command.arguments: empty"),
        ({"arguments": ["echo", "a\0b"]}, "Command.arguments[1]: contains NUL"),
        (
            {"environment_variables": [re_pb2.Command.EnvironmentVariable(name="A=B", value="")]},
            "Command.environment_variables: 'A=B'",
        ),
    ],
)
def test_command_paths_escaping_the_input_root(
    tmp_path: Path, fields: dict[str, object], shown: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        prepare(command(**fields), tmp_path)
    assert shown in caught.value.message


def test_paths_inside_the_root_are_accepted(tmp_path: Path) -> None:
    prepare(command(working_directory="a/b/..", output_paths=["../out", "x/./y"]), tmp_path)


async def tree(store: MemoryStore, *directories: re_pb2.Directory) -> re_pb2.Digest:
    """Store ``directories`` (the last is the root) and return the root's digest."""
    digest = None
    for directory in directories:
        digest = await write_message(store, directory)
    assert digest is not None
    return digest.to_proto()


@pytest.mark.parametrize(
    ("link", "target", "shown"),
    [
        ("l", "/etc/passwd", "absolute target '/etc/passwd'"),
        ("l", "..", "target '..' points outside"),
        ("l", "a/../../x", "target 'a/../../x' points outside"),
        ("l", "", "is empty or has NUL"),
        ("l", "x\0y", "is empty or has NUL"),
    ],
)
async def test_symlinks_escaping_the_input_root(link: str, target: str, shown: str) -> None:
    store = MemoryStore(max_bytes=1 << 20)
    root = await tree(
        store, re_pb2.Directory(symlinks=[re_pb2.SymlinkNode(name=link, target=target)])
    )
    with pytest.raises(InvalidArgument) as caught:
        await fetch_input_tree(DirectoryReader(store), Digest.from_proto(root))
    assert f"input symlink {link!r}" in caught.value.message and shown in caught.value.message


async def test_nested_symlink_climbing_out_is_refused() -> None:
    store = MemoryStore(max_bytes=1 << 20)
    inner = re_pb2.Directory(symlinks=[re_pb2.SymlinkNode(name="up", target="../../etc")])
    inner_digest = await write_message(store, inner)
    root = await tree(
        store,
        re_pb2.Directory(
            directories=[re_pb2.DirectoryNode(name="sub", digest=inner_digest.to_proto())]
        ),
    )
    with pytest.raises(InvalidArgument, match=r"input symlink 'sub/up'.*'\.\./\.\./etc'"):
        await fetch_input_tree(DirectoryReader(store), Digest.from_proto(root))


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("..", "file name '..' is not allowed"),
        ("a/b", "contains '/' or NUL"),
        ("a\0", "contains '/' or NUL"),
        ("", "empty name"),
    ],
)
async def test_input_directory_with_bad_names(name: str, shown: str) -> None:
    store = MemoryStore(max_bytes=1 << 20)
    empty = digest_of(b"").to_proto()
    root = await tree(store, re_pb2.Directory(files=[re_pb2.FileNode(name=name, digest=empty)]))
    with pytest.raises(InvalidArgument) as caught:
        await fetch_input_tree(DirectoryReader(store), Digest.from_proto(root))
    assert root.hash in caught.value.message and shown in caught.value.message


async def test_input_blob_that_is_not_a_directory() -> None:
    store = MemoryStore(max_bytes=1 << 20)
    garbage = b"\xff\xff\xff\xff"
    digest = digest_of(garbage)
    await write_message(store, re_pb2.Directory())  # something valid alongside
    await write_bytes(store, garbage)
    with pytest.raises(InvalidArgument, match="does not parse as a Directory"):
        await fetch_input_tree(DirectoryReader(store), digest)


async def test_gigantic_argument_list_is_invalid_argument(tmp_path: Path) -> None:
    argv = ["/bin/true", *(["x" * 1000] * 5000)]  # ~5 MB, above the kernel's ARG_MAX
    with pytest.raises(InvalidArgument, match=r"Command\.arguments"):
        await run_process(
            SpawnRequest(
                argv,
                cwd=tmp_path,
                env={"PATH": "/usr/bin:/bin"},
                stdout_path=tmp_path / "out",
                stderr_path=tmp_path / "err",
                timeout=10,
                kill_grace=1,
            )
        )
