"""Directory validation and tree walking."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lre.cas import (
    DirectoryReader,
    MemoryStore,
    tree_file_digests,
    validate_directory,
    write_message,
)
from lre.digest import digest_of
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
            lambda s: s not in (".", "..") and "/" not in s and "\0" not in s
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
