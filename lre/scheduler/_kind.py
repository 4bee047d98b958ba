"""What identifies a kind of action, for learned reservations.

One rule for the whole of lre: ``lre.scheduler._kind_rule.kind_key``
(described in docs/resource-control.md). This adapter applies it to what the
scheduler holds: the client's ``RequestMetadata`` and ``x-lre-repository``
header, the instance name and the action's Command.
"""

from __future__ import annotations

from lre.proto import re_pb2
from lre.scheduler._kind_rule import KindKey, repository_label
from lre.scheduler._kind_rule import kind_key as kind_key_of
from lre.scheduler._model import RequestInfo


def command_outputs(command: re_pb2.Command) -> list[str]:
    """The Command's output paths (``output_paths``, else the older
    ``output_files`` and ``output_directories``)."""
    if command.output_paths:
        return list(command.output_paths)
    return [*command.output_files, *command.output_directories]


def kind_key(info: RequestInfo, command: re_pb2.Command, instance_name: str = "") -> KindKey:
    """``[repo] bazel:{mnemonic}:{target} -> {output}`` when the client sent
    Bazel's fields, else ``[repo] cmd:{program}:{16 hex}``, a fingerprint of
    the command's shape (file names and values abstracted, so every compile
    of one kind lands on one key). The repository is the client's
    ``x-lre-repository`` header, else ``instance_name``."""
    return kind_key_of(
        info.action_mnemonic,
        info.target_id,
        command.arguments,
        repository=repository_label(info.repository, instance_name),
        outputs=command_outputs(command),
    )
