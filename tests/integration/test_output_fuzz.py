"""Fuzzing a whole lre with the output trees of real actions.

Each case is an action (``python3`` run by lre like any build tool) that
makes an output directory from a seeded random plan: odd names (spaces,
newlines, quotes, non-ASCII, long, sometimes bytes that are not UTF-8),
modes (read-only, executable, 000), every file type (regular, empty, sparse
giants, fifos, sockets, device nodes where the action may make them,
hardlinks), nesting (sometimes past ``max_tree_depth``) and symlinks
(inside, dangling, absolute, escaping, sometimes to a non-UTF-8 target).

The plan also says what lre must answer: OK with exactly the plan's regular
files (everything else left out or kept as a symlink), or INVALID_ARGUMENT /
RESOURCE_EXHAUSTED when the plan holds something the default limits or
rules refuse. Every blob an OK result names must hash to its digest (and,
after the last case, every blob file in lre's CAS to its name), and lre
must keep serving throughout. Bounded: ``CASES`` cases, fixed seeds.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from lre.proto import re_pb2
from tests._support.reapi import Client
from tests._support.servers import ServerThread

from .test_hostile_outputs import still_serving

OK = grpc.StatusCode.OK.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]

CASES = 32
SEEDS = range(2600, 2600 + CASES)
#: The defaults of workers[].local.limits (the test lre uses them).
MAX_DEPTH = 256

_NAMES = [
    b"plain",
    b"with space",
    b"new\nline",
    b"tab\there",
    b"a'quote\"",
    b"-dash",
    b".hidden",
    "ünïcødé".encode(),
    "日本語".encode(),
    b"x" * 200,
    b"back\\slash",
    b"$(not run)",
]
_BAD_NAME = b"bad\xffname"


@dataclass
class Plan:
    """What the action makes (``operations``) and what lre must answer."""

    operations: list[tuple[str, bytes, object]] = field(default_factory=list)
    files: dict[bytes, tuple[bytes, bool]] = field(default_factory=dict)  # path -> data, exec
    expect: int = OK

    def refuse(self, code: int) -> None:
        if self.expect == OK:
            self.expect = code
        elif self.expect != code:
            self.expect = -1  # either refusal may come first


def content(tag: bytes, size: int) -> bytes:
    """The bytes of a planned file (the action computes the same)."""
    return (hashlib.sha256(tag).digest() * (size // 32 + 1))[:size]


def make_plan(seed: int) -> Plan:
    rng = random.Random(seed)
    plan = Plan()
    directories = [b"out"]
    plan.operations.append(("dir", b"out", 0o755))
    used: set[bytes] = {b"out"}

    def fresh(parent: bytes, made: bool = True) -> bytes:
        """A new path below ``parent``; one with the bad name is refused
        unless nothing is ``made`` there for sure."""
        while True:
            name = rng.choice(_NAMES)
            if rng.random() < 0.015:
                name = _BAD_NAME
            path = parent + b"/" + name + (b"%d" % rng.randrange(1000))
            if path not in used:
                used.add(path)
                if _BAD_NAME in name and made:
                    plan.refuse(INVALID_ARGUMENT)
                return path

    for _ in range(rng.randrange(3, 14)):
        parent = rng.choice(directories)
        kind = rng.choices(
            [
                "file",
                "dir",
                "deep",
                "fifo",
                "socket",
                "device",
                "link_in",
                "link_dangling",
                "link_abs",
                "link_escape",
                "link_bad",
                "hardlink",
                "sparse",
            ],
            weights=[30, 12, 2, 4, 4, 3, 6, 4, 1, 1, 1, 4, 1],
        )[0]
        # No device node is ever made: a root action of the view holds no
        # CAP_MKNOD, nor does an action in a user namespace.
        path = fresh(parent, made=kind != "device")
        if kind == "file":
            size = rng.choice([0, 1, 100, 4096, 70000, (1 << 20) + 3])
            tag = b"%d" % rng.getrandbits(32)
            mode = rng.choice([0o644, 0o755, 0o444, 0o555, 0o400])
            plan.operations.append(("file", path, (tag, size, mode)))
            plan.files[path] = (content(tag, size), bool(mode & 0o100))
        elif kind == "dir":
            mode = rng.choice([0o755, 0o555, 0o700])
            plan.operations.append(("dir", path, mode))
            directories.append(path)
        elif kind == "deep":
            levels = rng.choice([40, 120, MAX_DEPTH + 20])
            depth = path.count(b"/")  # levels below out/ already
            plan.operations.append(("deep", path, levels))
            if depth + levels - 1 > MAX_DEPTH:
                plan.refuse(INVALID_ARGUMENT)
            else:
                leaf = path + b"/d" * (levels - 1) + b"/leaf"
                plan.files[leaf] = (b"deep\n", False)
        elif kind in ("fifo", "socket", "device"):
            plan.operations.append((kind, path, None))  # left out of the result
        elif kind == "link_in":
            plan.operations.append(("symlink", path, b"."))
        elif kind == "link_dangling":
            plan.operations.append(("symlink", path, b"no-such-file"))
        elif kind == "link_abs":
            plan.operations.append(("symlink", path, b"/etc/passwd"))
            plan.refuse(INVALID_ARGUMENT)  # symlink_policy reject
        elif kind == "link_escape":
            plan.operations.append(("symlink", path, b"../" * 40 + b"etc"))
            plan.refuse(INVALID_ARGUMENT)
        elif kind == "link_bad":
            plan.operations.append(("symlink", path, b"t\xfe"))
            plan.refuse(INVALID_ARGUMENT)
        elif kind == "hardlink":
            targets = [p for p in plan.files if p.count(b"/") < 30]
            if targets:
                target = rng.choice(targets)
                plan.operations.append(("hardlink", path, target))
                plan.files[path] = plan.files[target]
        elif kind == "sparse":
            size = rng.choice([1 << 40, 3 << 30])  # over half the 1 GiB CAS
            plan.operations.append(("sparse", path, size))
            plan.refuse(RESOURCE_EXHAUSTED)
    return plan


_PROGRAM = """
import hashlib, os, socket, stat
ops = {ops!r}
for kind, path, arg in ops:
    if kind == "dir":
        os.mkdir(path)
    elif kind == "file":
        tag, size, mode = arg
        with open(path, "wb") as f:
            f.write((hashlib.sha256(tag).digest() * (size // 32 + 1))[:size])
        os.chmod(path, mode)
    elif kind == "deep":
        os.mkdir(path)
        fd = os.open(path, os.O_RDONLY)
        for _ in range(arg - 1):
            os.mkdir(b"d", dir_fd=fd)
            child = os.open(b"d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf = os.open(b"leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"deep\\n")
        os.close(leaf)
        os.close(fd)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(path)
        except OSError:
            pass  # a path too long for sun_path: nothing is made
    elif kind == "device":
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            pass  # never allowed in the view (no CAP_MKNOD): nothing is made
    elif kind == "symlink":
        os.symlink(arg, path)
    elif kind == "hardlink":
        os.link(arg, path)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(arg)
# Modes last, so directories made read-only do not stop the plan.
for kind, path, arg in ops:
    if kind == "dir" and path != b"out":
        os.chmod(path, arg)
"""


def _verify_ok(client: Client, plan: Plan, result: re_pb2.ActionResult) -> None:
    (directory,) = result.output_directories
    tree = re_pb2.Tree.FromString(client.read(directory.tree_digest))
    assert hashlib.sha256(tree.SerializeToString()).hexdigest() == directory.tree_digest.hash
    by_digest = {
        hashlib.sha256(child.SerializeToString(deterministic=True)).hexdigest(): child
        for child in tree.children
    }
    found: dict[bytes, tuple[bytes, bool]] = {}
    pending = [(b"out", tree.root)]
    while pending:
        prefix, message = pending.pop()
        for node in message.files:
            data = client.read(node.digest)
            assert hashlib.sha256(data).hexdigest() == node.digest.hash
            assert len(data) == node.digest.size_bytes
            found[prefix + b"/" + node.name.encode()] = (data, node.is_executable)
        for sub in message.directories:
            pending.append((prefix + b"/" + sub.name.encode(), by_digest[sub.digest.hash]))
    assert found == plan.files


def _check_whole_cas(content: Path) -> int:
    """Every blob file of the filesystem CAS at ``content`` (named
    ``<hash>-<size>``, ``.x`` for the executable variant) hashes to its name;
    the number checked."""
    checked = 0
    for path in content.glob("*/*"):
        name = path.name.removesuffix(".x")
        expected_hash, _, size = name.partition("-")
        data = path.read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (expected_hash, int(size)), path
        checked += 1
    return checked


@pytest.mark.parametrize("seed", SEEDS)
def test_output_trees_of_real_actions(client: Client, lre_server: ServerThread, seed: int) -> None:
    plan = make_plan(seed)
    program = _PROGRAM.format(ops=plan.operations)
    response = client.run(["/usr/bin/python3", "-c", program], output_paths=["out"])
    status = response.status
    if response.result.exit_code != 0:
        pytest.fail(f"seed {seed}: the action failed: {client.stderr(response.result)!r}")
    if plan.expect == OK:
        assert status.code == OK, (seed, status)
        _verify_ok(client, plan, response.result)
    elif plan.expect == -1:
        assert status.code in (INVALID_ARGUMENT, RESOURCE_EXHAUSTED), (seed, status)
    else:
        assert status.code == plan.expect, (seed, status)
    assert status.code == OK or "limits" in status.message or "output" in status.message
    if seed % 8 == 7:
        still_serving(client)
    if seed == SEEDS[-1]:  # after the whole run: nothing stored is corrupt
        assert _check_whole_cas(lre_server.root / "cas") > 0
