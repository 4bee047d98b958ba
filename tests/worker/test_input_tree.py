"""Reading an input tree into a staging plan: limits checked before anything
is expanded, so a hostile tree costs no more than its distinct messages."""

from __future__ import annotations

import pytest

from lre.cas import DirectoryReader, MemoryStore, write_message
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.proto import re_pb2
from lre.worker.inputs._input_tree import fetch_input_tree
from lre.worker.outputs._limits import ActionLimits


async def _chain(store: MemoryStore, names: list[str]) -> Digest:
    child = await write_message(store, re_pb2.Directory())
    for name in reversed(names):
        child = await write_message(
            store,
            re_pb2.Directory(
                directories=[re_pb2.DirectoryNode(name=name, digest=child.to_proto())]
            ),
        )
    return child


async def _doubling(store: MemoryStore, levels: int) -> Digest:
    child = await write_message(store, re_pb2.Directory())
    for _ in range(levels):
        node = re_pb2.DirectoryNode(digest=child.to_proto())
        child = await write_message(
            store,
            re_pb2.Directory(
                directories=[
                    re_pb2.DirectoryNode(name="a", digest=node.digest),
                    re_pb2.DirectoryNode(name="b", digest=node.digest),
                ]
            ),
        )
    return child


@pytest.mark.parametrize(
    ("limits", "key"),
    [
        (ActionLimits(), "max_tree_directories"),
        (ActionLimits(max_tree_directories=1 << 20, max_tree_entries=1000), "max_tree_entries"),
        (ActionLimits(max_tree_depth=10), "max_tree_depth"),
    ],
)
async def test_a_shared_subtree_dag_is_refused_before_it_is_expanded(
    limits: ActionLimits, key: str
) -> None:
    store = MemoryStore(1 << 20)
    root = await _doubling(store, 17)  # 262,143 directories once expanded
    with pytest.raises(InvalidArgument) as caught:
        await fetch_input_tree(DirectoryReader(store), root, limits=limits)
    assert f"workers[].local.limits.{key}" in caught.value.message


async def test_a_tree_deeper_than_the_limit_is_read_only_past_the_limit() -> None:
    store = MemoryStore(1 << 20)
    root = await _chain(store, ["d"] * 1100)
    reader = DirectoryReader(store)
    with pytest.raises(InvalidArgument) as caught:
        await fetch_input_tree(reader, root)
    assert "max_tree_depth (256)" in caught.value.message
    assert len(reader.cache) <= 258  # the levels read, not all 1,101


async def test_a_tree_within_the_limits_is_planned_whole() -> None:
    store = MemoryStore(1 << 20)
    root = await _chain(store, ["d"] * 256)
    tree = await fetch_input_tree(DirectoryReader(store), root)
    assert len(tree.directories) == 256


async def test_a_path_longer_than_path_max_is_refused_naming_it() -> None:
    store = MemoryStore(1 << 20)
    root = await _chain(store, ["n" * 250] * 16)  # 4,016 bytes
    with pytest.raises(InvalidArgument) as caught:
        await fetch_input_tree(DirectoryReader(store), root)
    assert "PATH_MAX" in caught.value.message
