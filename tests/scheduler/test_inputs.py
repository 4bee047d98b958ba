"""find_missing_inputs with and without remembered subtrees (``SubtreeBlobs``)."""

from __future__ import annotations

from collections.abc import Sequence

from lre.cas import DirectoryReader
from lre.digest import Digest
from lre.proto import re_pb2
from lre.scheduler._inputs import SubtreeBlobs, find_missing_inputs
from tests._support.actions import TreeSpec, blob_digest, build_tree, put_blobs
from tests._support.stores import FakeStore

TOOLCHAIN = {
    "external/cc/wrapper.sh": b"#!/bin/sh\n",
    "external/cc/include/stdio.h": b"int printf();\n",
    "external/cc/include/empty": None,
    "external/tools/BUILD": b"# tools\n",
}
COMMAND = blob_digest(b"a command")


class CountingReader(DirectoryReader):
    """Records every Directory digest the check asks the reader for."""

    def __init__(self, store: FakeStore) -> None:
        super().__init__(store)
        self.asked_for: list[Digest] = []

    async def get_many(
        self, digests: Sequence[Digest]
    ) -> tuple[dict[Digest, re_pb2.Directory], list[Digest]]:
        self.asked_for.extend(digests)
        return await super().get_many(digests)


async def _setup(*specs: TreeSpec) -> tuple[FakeStore, CountingReader, list[Digest]]:
    store = FakeStore()
    await put_blobs(store, {COMMAND: b"a command"})
    roots = []
    for spec in specs:
        root, blobs = build_tree(spec)
        await put_blobs(store, blobs)
        roots.append(root)
    return store, CountingReader(store), roots


def _subtree(spec: TreeSpec, path: str) -> Digest:
    """The digest of the directory at ``path`` in the tree ``spec``."""
    prefix = path + "/"
    inner = {k[len(prefix) :]: v for k, v in spec.items() if k.startswith(prefix)}
    return build_tree(inner)[0]


async def test_a_shared_subtree_is_walked_until_a_second_action_names_it() -> None:
    first = {**TOOLCHAIN, "src/a.c": b"a"}
    second = {**TOOLCHAIN, "src/b.c": b"b"}
    third = {**TOOLCHAIN, "src/c.c": b"c"}
    _, reader, roots = await _setup(first, second, third)
    external = _subtree(TOOLCHAIN, "external")
    subtrees = SubtreeBlobs()
    assert await find_missing_inputs(reader, COMMAND, roots[0], subtrees) == []
    assert subtrees.get(external) is None  # one action only so far
    assert await find_missing_inputs(reader, COMMAND, roots[1], subtrees) == []
    assert subtrees.get(external) is not None
    reader.asked_for.clear()
    assert await find_missing_inputs(reader, COMMAND, roots[2], subtrees) == []
    # The third action's check reads its root and src, nothing of external.
    assert external not in reader.asked_for
    assert set(reader.asked_for) == {roots[2], _subtree(third, "src")}


async def test_a_remembered_subtree_still_asks_the_store_about_every_blob() -> None:
    specs = [{**TOOLCHAIN, f"src/{n}.c": n.encode()} for n in "abc"]
    store, reader, roots = await _setup(*specs)
    subtrees = SubtreeBlobs()
    for root in roots[:2]:
        await find_missing_inputs(reader, COMMAND, root, subtrees)
    external = _subtree(TOOLCHAIN, "external")
    held = subtrees.get(external)
    assert held is not None
    header = blob_digest(b"int printf();\n")
    assert header in held
    store.asked = 0
    await find_missing_inputs(reader, COMMAND, roots[2], subtrees)
    # Command, root, src, a.c, and each of external's blobs.
    assert store.asked >= 4 + len(held)


async def test_a_blob_gone_from_a_remembered_subtree_is_reported_as_without_it() -> None:
    specs = [{**TOOLCHAIN, f"src/{n}.c": n.encode()} for n in "abc"]
    store, reader, roots = await _setup(*specs)
    subtrees = SubtreeBlobs()
    for root in roots[:2]:
        await find_missing_inputs(reader, COMMAND, root, subtrees)
    assert subtrees.get(_subtree(TOOLCHAIN, "external")) is not None
    header = blob_digest(b"int printf();\n")
    tools = _subtree(TOOLCHAIN, "external/tools")
    store.hidden |= {header, tools}
    plain = await find_missing_inputs(CountingReader(store), COMMAND, roots[2])
    assert plain == [tools, header]  # breadth first: tools/ is a level above the header
    assert await find_missing_inputs(reader, COMMAND, roots[2], subtrees) == plain


async def test_the_root_itself_is_never_remembered() -> None:
    spec = {**TOOLCHAIN, "src/a.c": b"a"}
    _, reader, roots = await _setup(spec)
    subtrees = SubtreeBlobs()
    for _ in range(3):
        assert await find_missing_inputs(reader, COMMAND, roots[0], subtrees) == []
    assert subtrees.get(roots[0]) is None
    assert subtrees.get(_subtree(spec, "src")) is not None


async def test_nothing_is_remembered_from_a_check_that_found_blobs_missing() -> None:
    specs = [{**TOOLCHAIN, f"src/{n}.c": n.encode()} for n in "ab"]
    store, reader, roots = await _setup(*specs)
    store.hidden.add(blob_digest(b"# tools\n"))
    subtrees = SubtreeBlobs()
    for root in roots:
        assert await find_missing_inputs(reader, COMMAND, root, subtrees) != []
    assert len(subtrees) == 0


def test_the_budget_forgets_the_least_recently_used_subtrees() -> None:
    subtrees = SubtreeBlobs(max_blobs=5)
    a, b, c = (blob_digest(n) for n in (b"a", b"b", b"c"))
    blobs = tuple(blob_digest(bytes([n])) for n in range(3))
    subtrees.remember(a, blobs[:2])
    subtrees.remember(b, blobs[:2])
    assert subtrees.get(a) is not None  # a is now the most recently used
    subtrees.remember(c, blobs[:2])
    assert subtrees.get(b) is None
    assert subtrees.get(a) is not None and subtrees.get(c) is not None
    assert subtrees.held_blobs == 4
    subtrees.remember(b, tuple(blob_digest(bytes([n])) for n in range(6)))
    assert subtrees.get(b) is None  # over the whole budget on its own


def test_first_sightings_are_bounded() -> None:
    subtrees = SubtreeBlobs(max_sighted=2)
    a, b, c = (blob_digest(n) for n in (b"a", b"b", b"c"))
    assert not subtrees.seen_before(a)
    assert subtrees.seen_before(a)
    assert not subtrees.seen_before(b)
    assert not subtrees.seen_before(c)  # the set was full: forgotten at once
    assert not subtrees.seen_before(a)
