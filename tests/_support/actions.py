"""Actions, Commands and input trees built the way a client builds them.

Digests here are computed by the test itself with ``hashlib`` (not by lre's
digest code), so a test that compares them with what lre reports checks lre.
``build_action`` only builds; ``put_blobs`` puts what it built into a store
in-process, ``tests._support.reapi.Client.upload`` sends it over gRPC.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import duration_pb2

from lre.cas import BlobStore
from lre.cas._blob_io import write_bytes
from lre.digest import Digest
from lre.proto import re_pb2


def blob_digest(data: bytes) -> Digest:
    """The SHA-256 digest of ``data``."""
    return Digest(hashlib.sha256(data).hexdigest(), len(data))


def as_digest(digest: Digest | re_pb2.Digest) -> Digest:
    """``digest`` as lre's ``Digest``, unvalidated (tests send bad ones on purpose)."""
    if isinstance(digest, Digest):
        return digest
    return Digest(digest.hash, digest.size_bytes)


@dataclass(frozen=True)
class File:
    """A file of an input tree; plain ``bytes`` in a ``TreeSpec`` is a non-executable file."""

    content: bytes
    executable: bool = False


@dataclass(frozen=True)
class Link:
    """A symbolic link of an input tree."""

    target: str


#: An input tree: name -> ``bytes`` or ``File`` (a file), ``Link`` (a symlink),
#: a nested mapping (a directory) or ``None`` (an empty directory). A name may
#: be a path ("dir/sub/name"): the directories on the way are made.
TreeSpec = Mapping[str, Any]


def _nested(spec: TreeSpec) -> dict[str, Any]:
    """``spec`` with paths split into nested dicts (directories)."""
    root: dict[str, Any] = {}
    for path, entry in spec.items():
        *parents, name = path.split("/")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        if entry is None:
            node.setdefault(name, {})
        elif isinstance(entry, Mapping):
            node.setdefault(name, {}).update(_nested(entry))
        else:
            node[name] = entry
    return root


def build_tree(spec: TreeSpec) -> tuple[Digest, dict[Digest, bytes]]:
    """The root Directory digest of ``spec`` and every blob the tree needs
    (file contents and Directory messages, each list sorted by name as REAPI
    requires). Raises ``TypeError`` on an entry of another type."""
    blobs: dict[Digest, bytes] = {}

    def put(data: bytes) -> Digest:
        digest = blob_digest(data)
        blobs[digest] = data
        return digest

    def encode(node: Mapping[str, Any]) -> Digest:
        directory = re_pb2.Directory()
        for name in sorted(node):
            entry = node[name]
            if isinstance(entry, dict):
                directory.directories.add(name=name, digest=encode(entry).to_proto())
            elif isinstance(entry, Link):
                directory.symlinks.add(name=name, target=entry.target)
            elif isinstance(entry, File | bytes):
                file = entry if isinstance(entry, File) else File(entry)
                directory.files.add(
                    name=name, digest=put(file.content).to_proto(), is_executable=file.executable
                )
            else:
                raise TypeError(f"{name}: {entry!r} is not a file, link or directory")
        return put(directory.SerializeToString(deterministic=True))

    root = encode(_nested(spec))
    return root, blobs


def platform_of(properties: Mapping[str, str]) -> re_pb2.Platform:
    """A Platform with ``properties`` sorted by name."""
    return re_pb2.Platform(
        properties=[
            re_pb2.Platform.Property(name=k, value=v) for k, v in sorted(properties.items())
        ]
    )


@dataclass(frozen=True)
class BuiltAction:
    """An Action, its Command and every blob it needs: ``blobs`` holds the
    input tree's, then the Command's, then the Action's (in that order)."""

    action: re_pb2.Action
    command: re_pb2.Command
    digest: Digest
    blobs: dict[Digest, bytes]
    instance: str = ""

    @property
    def action_digest(self) -> re_pb2.Digest:
        """The Action's digest as REAPI requests carry it."""
        return self.digest.to_proto()

    @property
    def command_digest(self) -> Digest:
        return as_digest(self.action.command_digest)

    @property
    def request(self) -> re_pb2.ExecuteRequest:
        """An ExecuteRequest for this Action on ``instance``."""
        return re_pb2.ExecuteRequest(instance_name=self.instance, action_digest=self.action_digest)


def build_action(
    arguments: Sequence[str],
    *,
    inputs: TreeSpec | None = None,
    input_root: Digest | re_pb2.Digest | None = None,
    env: Mapping[str, str] | None = None,
    output_paths: Sequence[str] = (),
    output_files: Sequence[str] = (),
    output_directories: Sequence[str] = (),
    working_directory: str = "",
    action_platform: Mapping[str, str] | None = None,
    command_platform: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    do_not_cache: bool = False,
    salt: bytes = b"",
    instance: str = "",
) -> BuiltAction:
    """An Action running ``arguments`` on ``inputs`` (or on the tree already at
    ``input_root``, whose blobs are then not in ``blobs``). Environment
    variables and platform properties are sorted by name; output lists are
    kept in the order given. A platform left ``None`` is left unset."""
    blobs: dict[Digest, bytes] = {}
    if input_root is None:
        root, blobs = build_tree(inputs or {})
    else:
        root = as_digest(input_root)
    command = re_pb2.Command(
        arguments=arguments,
        environment_variables=[
            re_pb2.Command.EnvironmentVariable(name=k, value=v)
            for k, v in sorted((env or {}).items())
        ],
        output_paths=output_paths,
        output_files=output_files,
        output_directories=output_directories,
        working_directory=working_directory,
    )
    if command_platform is not None:
        command.platform.CopyFrom(platform_of(command_platform))
    command_bytes = command.SerializeToString(deterministic=True)
    action = re_pb2.Action(
        command_digest=blob_digest(command_bytes).to_proto(),
        input_root_digest=root.to_proto(),
        do_not_cache=do_not_cache,
        salt=salt,
    )
    if action_platform is not None:
        action.platform.CopyFrom(platform_of(action_platform))
    if timeout_s is not None:
        action.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s)))
    action_bytes = action.SerializeToString(deterministic=True)
    blobs[blob_digest(command_bytes)] = command_bytes
    action_digest = blob_digest(action_bytes)
    blobs[action_digest] = action_bytes
    return BuiltAction(action, command, action_digest, blobs, instance)


def shell_action(
    script: str,
    *,
    outputs: Sequence[str] = ("out.txt",),
    platform: Mapping[str, str] | None = None,
    inputs: Mapping[str, bytes] | None = None,
    salt: str = "",
    instance: str = "",
) -> BuiltAction:
    """``/bin/sh -c script`` with ``inputs`` as files of the input root,
    ``platform`` on both the Action and the Command, and ``salt`` in the
    environment variable SALT (so equal scripts can make distinct actions)."""
    return build_action(
        ["/bin/sh", "-c", script],
        inputs=inputs,
        env={"SALT": salt},
        output_paths=outputs,
        action_platform=platform or {},
        command_platform=platform,
        instance=instance,
    )


async def put_blobs(store: BlobStore, blobs: Mapping[Digest, bytes]) -> None:
    """Write every blob into ``store`` (``ResourceExhausted`` when it is full)."""
    for data in blobs.values():
        await write_bytes(store, data)


async def put_tree(store: BlobStore, spec: TreeSpec) -> Digest:
    """Write the tree ``spec`` into ``store``; the root Directory's digest."""
    root, blobs = build_tree(spec)
    await put_blobs(store, blobs)
    return root


async def put_action(store: BlobStore, built: BuiltAction) -> Digest:
    """Write an Action and all its blobs into ``store``; the Action's digest."""
    await put_blobs(store, built.blobs)
    return built.digest
