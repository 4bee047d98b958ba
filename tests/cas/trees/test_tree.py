"""Directory validation and tree walking."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lre.cas import DirectoryReader, MemoryStore, TreeExtent, tree_extent, write_message
from lre.cas.trees._tree import non_utf8_entry, tree_file_digests, validate_directory
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument, MissingBlobs
from lre.proto import re_pb2

FILE = digest_of(b"file").to_proto()


def directory(
    files: Sequence[str] = (), dirs: Sequence[str] = (), links: Sequence[str] = ()
) -> re_pb2.Directory:
    return re_pb2.Directory(
        files=[re_pb2.FileNode(name=n, digest=FILE) for n in files],
        directories=[re_pb2.DirectoryNode(name=n, digest=FILE) for n in dirs],
        symlinks=[re_pb2.SymlinkNode(name=n, target="x") for n in links],
    )


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (directory(files=[""]), "empty name"),
        (directory(files=["."]), "'.' is not allowed"),
        (directory(dirs=[".."]), "'..' is not allowed"),
        (directory(files=["a/b"]), "contains '/'"),
        (directory(links=["a\0b"]), "NUL"),
        (directory(files=["a", "a"]), "more than once"),
        (directory(files=["a"], dirs=["a"]), "more than once"),
        (directory(files=["b", "a"]), "not sorted"),
    ],
)
def test_bad_directories_are_refused(bad: re_pb2.Directory, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match) as info:
        validate_directory(bad, digest_of(b"d"))
    assert digest_of(b"d").hash in info.value.message


def test_bad_entry_digest_is_refused() -> None:
    bad = re_pb2.Directory(files=[re_pb2.FileNode(name="f", digest=re_pb2.Digest(hash="zz"))])
    with pytest.raises(InvalidArgument, match="file 'f' digest"):
        validate_directory(bad, "root")


@given(
    st.lists(
        st.text(min_size=1).filter(
            lambda s: (
                s not in (".", "..") and "/" not in s and "\0" not in s and len(s.encode()) <= 255
            )  # NAME_MAX
        ),
        unique=True,
    )
)
def test_any_sorted_unique_names_are_accepted(names: list[str]) -> None:
    validate_directory(directory(files=sorted(names)), "generated")


async def test_directory_reader_read_tree_walks_and_reports_missing() -> None:
    store = MemoryStore(1 << 20)
    leaf = re_pb2.Directory(files=[re_pb2.FileNode(name="x", digest=FILE)])
    leaf_digest = await write_message(store, leaf)
    absent = digest_of(b"absent directory")
    mid = re_pb2.Directory(
        directories=[re_pb2.DirectoryNode(name="leaf", digest=leaf_digest.to_proto())]
    )
    mid_digest = await write_message(store, mid)
    root = re_pb2.Directory(
        directories=[
            re_pb2.DirectoryNode(name="a", digest=mid_digest.to_proto()),
            re_pb2.DirectoryNode(name="b", digest=mid_digest.to_proto()),
            re_pb2.DirectoryNode(name="c", digest=leaf_digest.to_proto()),
        ]
    )
    root_digest = await write_message(store, root)
    tree = await DirectoryReader(store).read_tree(root_digest)
    assert list(tree) == [root_digest, mid_digest, leaf_digest]
    assert tree[leaf_digest] == leaf

    broken = re_pb2.Directory(
        directories=[
            re_pb2.DirectoryNode(name="a", digest=absent.to_proto()),
            re_pb2.DirectoryNode(name="b", digest=mid_digest.to_proto()),
        ]
    )
    with pytest.raises(MissingBlobs) as info:
        await DirectoryReader(store).read_tree(await write_message(store, broken))
    assert info.value.subjects == (absent.subject,)
    with pytest.raises(MissingBlobs):
        await DirectoryReader(store).read_tree(absent)


async def test_directory_reader_read_tree_refuses_bad_children() -> None:
    store = MemoryStore(1 << 20)
    bad_digest = await write_message(store, directory(files=["..", "a"]))
    good = directory(dirs=["x", "y"])
    good.directories[0].digest.CopyFrom(bad_digest.to_proto())
    good.directories[1].digest.CopyFrom((await write_message(store, directory())).to_proto())
    with pytest.raises(InvalidArgument, match=bad_digest.hash):
        await DirectoryReader(store).read_tree(await write_message(store, good))
    await store.write(digest_of(b"\xff\xff"), _one(b"\xff\xff"))
    with pytest.raises(InvalidArgument, match="does not parse"):
        await DirectoryReader(store).read_tree(digest_of(b"\xff\xff"))


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_tree_file_digests_covers_children() -> None:
    other = digest_of(b"other")
    tree = re_pb2.Tree(
        root=directory(files=["f"]),
        children=[re_pb2.Directory(files=[re_pb2.FileNode(name="g", digest=other.to_proto())])],
    )
    assert tree_file_digests(tree, "t") == {digest_of(b"file"), other}
    tree.children.append(directory(files=["z", "y"]))
    with pytest.raises(InvalidArgument, match="child 1"):
        tree_file_digests(tree, "t")


def _doubling(levels: int) -> tuple[Digest, dict[Digest, re_pb2.Directory]]:
    """A Directory naming the one below it twice, ``levels`` times."""
    messages: dict[Digest, re_pb2.Directory] = {}
    leaf = re_pb2.Directory(files=[re_pb2.FileNode(name="f", digest=FILE)])
    child = digest_of(leaf.SerializeToString(deterministic=True))
    messages[child] = leaf
    for _ in range(levels):
        node = re_pb2.Directory(
            directories=[
                re_pb2.DirectoryNode(name="a", digest=child.to_proto()),
                re_pb2.DirectoryNode(name="b", digest=child.to_proto()),
            ]
        )
        child = digest_of(node.SerializeToString(deterministic=True))
        messages[child] = node
    return child, messages


def test_extent_counts_shared_subtrees_as_often_as_they_are_named() -> None:
    root, messages = _doubling(17)
    extent = tree_extent(messages, root, cap=1 << 30)
    assert extent == TreeExtent(depth=17, entries=2 * (2**17 - 1) + 2**17, directories=2**18 - 1)


def test_extent_of_a_deep_chain_needs_no_recursion() -> None:
    messages: dict[Digest, re_pb2.Directory] = {}
    child = digest_of(b"")
    messages[child] = re_pb2.Directory()
    for _ in range(5000):
        node = re_pb2.Directory(
            directories=[re_pb2.DirectoryNode(name="d", digest=child.to_proto())]
        )
        child = digest_of(node.SerializeToString(deterministic=True))
        messages[child] = node
    assert tree_extent(messages, child, cap=100) == TreeExtent(101, 101, 101)


def test_a_non_utf8_entry_is_named_from_the_wire_bytes() -> None:
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    good = field(1, field(1, b"ok") + field(2, FILE.SerializeToString()))
    link = field(3, field(1, b"l") + field(2, b"t\xfe"))
    assert non_utf8_entry(good + link) == "symlink target 't\\xfe'"
    assert non_utf8_entry(field(2, field(1, b"a\xffb"))) == "directory name 'a\\xffb'"
    assert non_utf8_entry(good) is None
    assert non_utf8_entry(b"\xff\xff\xff") is None  # not the wire format


async def test_read_tree_stops_below_max_levels() -> None:
    store = MemoryStore(1 << 20)
    child = await write_message(store, re_pb2.Directory())
    for _ in range(10):
        child = await write_message(
            store,
            re_pb2.Directory(directories=[re_pb2.DirectoryNode(name="d", digest=child.to_proto())]),
        )
    assert len(await DirectoryReader(store).read_tree(child, max_levels=3)) == 4
    assert len(await DirectoryReader(store).read_tree(child)) == 11


def test_a_name_longer_than_name_max_is_refused() -> None:
    validate_directory(directory(files=["é" * 127]), "d")  # 254 bytes: fine
    with pytest.raises(InvalidArgument, match="256 bytes, over the 255"):
        validate_directory(directory(files=["é" * 128]), "d")


def test_extent_memo_is_reused_across_trees() -> None:
    root, messages = _doubling(10)
    memo: dict[tuple[str, int], TreeExtent] = {}
    first = tree_extent(messages, root, cap=1 << 30, known=memo)
    assert len(memo) == 11  # one per distinct message
    # A second tree sharing every subtree: measured from the memo alone.
    assert tree_extent({}, root, cap=1 << 30, known=memo) == first


def test_a_directory_not_read_is_never_remembered_as_empty() -> None:
    # A tree cut short (read only to max_levels) must not teach the memo that
    # its deepest directories are empty: a later tree naming one of them
    # directly would pass the limits while it expands to millions.
    below, messages = _doubling(30)
    chain = re_pb2.Directory(directories=[re_pb2.DirectoryNode(name="d", digest=below.to_proto())])
    top = digest_of(chain.SerializeToString(deterministic=True))
    memo: dict[tuple[str, int], TreeExtent] = {}
    assert tree_extent({top: chain}, top, cap=1000, known=memo).depth == 1  # cut short
    assert tree_extent(messages, below, cap=1000, known=memo).directories == 1001  # over


def test_an_ancestor_of_an_unread_directory_is_never_remembered() -> None:
    # The same with the cut deeper down: the directories above the unread
    # one were measured short and must not be remembered either.
    below, messages = _doubling(30)
    middle = re_pb2.Directory(directories=[re_pb2.DirectoryNode(name="m", digest=below.to_proto())])
    mid = digest_of(middle.SerializeToString(deterministic=True))
    top = re_pb2.Directory(directories=[re_pb2.DirectoryNode(name="t", digest=mid.to_proto())])
    top_digest = digest_of(top.SerializeToString(deterministic=True))
    memo: dict[tuple[str, int], TreeExtent] = {}
    assert tree_extent({top_digest: top, mid: middle}, top_digest, cap=1000, known=memo).depth == 2
    assert memo == {}
    messages[mid] = middle
    assert tree_extent(messages, mid, cap=1000, known=memo).directories == 1001
