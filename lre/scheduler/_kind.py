"""What identifies a kind of action, for learned reservations."""

from __future__ import annotations

import hashlib
import os

from lre.proto import re_pb2
from lre.scheduler._model import RequestInfo


def kind_key(info: RequestInfo, command: re_pb2.Command) -> str:
    """``m:{mnemonic}|t:{target}`` when the client sent them (Bazel), else a
    fingerprint of the command's shape: the program's base name and the flags
    it passes, with file names and values left out, so every compile of the
    same kind lands on one key."""
    if info.action_mnemonic or info.target_id:
        return f"m:{info.action_mnemonic}|t:{info.target_id}"
    args = list(command.arguments)
    program = os.path.basename(args[0]) if args else ""
    flags = sorted({_flag_shape(arg) for arg in args[1:] if arg.startswith("-")})
    digest = hashlib.sha256("\0".join(flags).encode()).hexdigest()[:16]
    return f"c:{program}|{digest}"


def _flag_shape(arg: str) -> str:
    name, _, _ = arg.partition("=")
    # "-Ifoo/bar", "-DNAME", "-o" style: keep the first two characters only
    # for single-dash flags that glue their value on.
    if not name.startswith("--") and len(name) > 2:
        return name[:2]
    return name
