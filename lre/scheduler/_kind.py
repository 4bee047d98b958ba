"""What identifies a kind of action, for learned reservations.

One rule for the whole of lre: ``lre.scheduler._learner.kind_key`` (described
in docs/resource-control.md). This adapter applies it to what the scheduler
holds: the client's ``RequestMetadata`` and the action's Command.
"""

from __future__ import annotations

from lre.proto import re_pb2
from lre.scheduler._learner import kind_key as kind_key_of
from lre.scheduler._model import RequestInfo


def kind_key(info: RequestInfo, command: re_pb2.Command) -> str:
    """``bazel:{mnemonic}:{target}`` when the client sent them (Bazel), else
    ``cmd:{program}:{16 hex}``, a fingerprint of the command's shape with
    file names and values abstracted, so every compile of the same kind
    lands on one key."""
    return kind_key_of(info.action_mnemonic, info.target_id, command.arguments)
