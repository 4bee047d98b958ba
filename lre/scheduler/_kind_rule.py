"""The rule that names an action's kind, for learned reservations.

A kind key has up to three parts:

- the **repository** (``[id] `` in front): what the client's
  ``x-lre-repository`` header says (``lre link`` writes one per repository
  into ``lre.bazelrc``), else the instance name the action was sent to, else
  nothing. Headers are not part of an action, so the header changes no
  action key, and lre sends the client's headers to no upstream;
- the **kind proper**: ``bazel:{mnemonic}:{target}`` when the client sent
  Bazel's ``RequestMetadata`` fields, else ``cmd:{program}:{16 hex}``, a
  fingerprint of the command's shape;
- **which action it is** (`` -> {output}``): the smallest of the Command's
  output paths, so the two ``CppCompile`` of one ``cc_library`` with two
  sources keep two histories while each one's rebuilds (same output, new
  inputs) keep theirs; for a ``cmd:`` key (Buck2 sends no target) the same
  tells two compiles of one command shape apart.

A key carries the coarser keys the learner reads when it has no sample of
its own (:class:`KindKey`): the target's key (or the command shape's) in the
same repository (every run of one of its actions is recorded there too, so a
new source file of a known target starts from its siblings, not from the
cold default),
then the key without the repository, which is the key lre used before
repositories were told apart (so history learned then stays readable; it is
never written again and leaves the window after ``learner.window``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence

__all__ = ["KindKey", "kind_key", "repository_label"]

_NUMBER = re.compile(r"[+-]?(\d+(\.\d+)*|0x[0-9a-fA-F]+)([kKmMgGtT]i?[bB]?)?")
_HASH = re.compile(r"[0-9a-fA-F]{16,}")
_EXTENSION = re.compile(r".+(\.[A-Za-z_][A-Za-z0-9_+-]{0,9})")
_INTERPRETER = re.compile(r"(python[0-9.]*|sh|bash|dash|zsh|node|perl|ruby|env)")
#: Any character str.isspace() accepts (sre tests the same Unicode property):
#: one C-level scan instead of a Python generator step per character.
_SPACE = re.compile(r"\s")
#: What a repository label may hold; anything else becomes ``_``.
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
#: Longest repository label kept (a longer header is cut there).
MAX_REPOSITORY_LABEL = 64


class KindKey(str):
    """A kind key (the string itself, what the learner stores samples under).

    ``fallbacks``: coarser keys to read, most specific first, when this one
    has no sample in the window. ``shared``: keys every run of this kind is
    also recorded under (a prefix of ``fallbacks``). A plain ``str`` works
    wherever a ``KindKey`` does, with neither.
    """

    fallbacks: tuple[str, ...]
    shared: tuple[str, ...]

    def __new__(
        cls, key: str, fallbacks: tuple[str, ...] = (), shared: tuple[str, ...] = ()
    ) -> KindKey:
        self = super().__new__(cls, key)
        self.fallbacks = tuple(k for k in dict.fromkeys(fallbacks) if k != key)
        self.shared = tuple(k for k in shared if k in self.fallbacks)
        return self


def repository_label(header: str, instance_name: str) -> str:
    """The repository part of a key: the header's value, else the instance
    name, made safe to print (at most ``MAX_REPOSITORY_LABEL`` characters of
    ``A-Za-z0-9._+-``); "" when both are empty."""
    raw = header.strip() or instance_name.strip()
    return _LABEL_UNSAFE.sub("_", raw)[:MAX_REPOSITORY_LABEL]


def _value_shape(value: str) -> str:
    if value == "":
        return ""
    if _NUMBER.fullmatch(value):
        return "<n>"
    if _HASH.fullmatch(value):
        return "<hash>"
    if _SPACE.search(value):
        return "<text>"
    looks_like_path = "/" in value or "\\" in value
    ext = _EXTENSION.fullmatch(value.rsplit("/", 1)[-1])
    if looks_like_path or ext:
        return f"<path{ext.group(1) if ext else ''}>"
    if len(value) > 40:
        return "<text>"
    return value


def _argument_shape(arg: str) -> str:
    if arg.startswith("@") and len(arg) > 1:  # response file
        return "@" + _value_shape(arg[1:])
    if arg.startswith("-") and len(arg) > 1 and not _NUMBER.fullmatch(arg):
        name, eq, value = arg.partition("=")
        if eq:
            return f"{name}={_value_shape(value)}"
        if not arg.startswith("--") and len(arg) > 2:
            glued = _value_shape(arg[2:])
            if glued.startswith("<path"):  # -I/usr/include, -Lout/lib, -o/tmp/x.o (not -O2)
                return arg[:2] + glued
        return arg
    return _value_shape(arg)


def _program(arguments: Sequence[str]) -> str:
    program = os.path.basename(arguments[0]) if arguments else ""
    if _INTERPRETER.fullmatch(program):
        # "python3 tools/gen.py", "bash -c 'gcc ...'": the script names the kind
        for arg in arguments[1:]:
            if arg.startswith("-") or ("=" in arg and program == "env"):
                continue
            first_word = arg.split(None, 1)[0] if arg.strip() else ""
            return f"{program}+{os.path.basename(first_word)}"
    return program


def _command_shape(arguments: Sequence[str]) -> str:
    tokens: dict[str, None] = {}
    for arg in arguments[1:]:
        tokens.setdefault(_argument_shape(arg), None)
    digest = hashlib.sha256("\0".join(tokens).encode()).hexdigest()[:16]
    return f"cmd:{_program(arguments)}:{digest}"


def kind_key(
    mnemonic: str,
    target_id: str,
    arguments: Sequence[str],
    *,
    repository: str = "",
    outputs: Sequence[str] = (),
) -> KindKey:
    """What identifies an action's kind for learned reservations (see the
    module docstring for the parts and the fallbacks).

    - With Bazel's ``RequestMetadata`` (``action_mnemonic`` or ``target_id``
      set): ``"[repo] bazel:{mnemonic}:{target_id} -> {first output}"``.
    - Otherwise ``"[repo] cmd:{program}:{16 hex} -> {first output}"``
      (without the output part when the Command names none): ``program`` is the base
      name of ``argv[0]`` (for an interpreter such as ``python3``, ``bash`` or
      ``env``, plus the base name of the script or the first word of ``-c``
      text), and the hash covers the *shape* of the other arguments: flags
      are kept (``-O2``, ``-c``, ``--edition``), values after ``=`` and glued
      to a short flag (``-I/x``) are abstracted like positional arguments;
      numbers become ``<n>``, long hex strings ``<hash>``, file names
      ``<path.EXT>`` (the extension is kept: ``.c`` and ``.rs`` differ), text
      with spaces ``<text>``; short plain words (``build``) are kept. Each
      distinct token counts once, in first-seen order, so compiling 3 or 30
      files, or passing 5 or 50 ``-I`` directories, is the same kind.

    ``repository``: from :func:`repository_label` ("" leaves it out);
    ``outputs``: the Command's output paths.
    """
    prefix = f"[{repository}] " if repository else ""
    if mnemonic or target_id:
        unshared = f"bazel:{mnemonic}:{target_id}"
        target = prefix + unshared
        if outputs:
            fine = f"{target} -> {min(outputs)}"
            return KindKey(fine, fallbacks=(target, unshared), shared=(target,))
        return KindKey(target, fallbacks=(unshared,))
    shape = _command_shape(arguments)
    kind = prefix + shape
    if outputs:
        # Buck2 and other clients send no target: the output tells two
        # compiles of one shape apart here too, and every run is recorded
        # under the shape as well, which a new output starts from.
        fine = f"{kind} -> {min(outputs)}"
        return KindKey(fine, fallbacks=(kind, shape), shared=(kind,))
    return KindKey(kind, fallbacks=(shape,))
