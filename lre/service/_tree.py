"""GetTree: the Directory tree under a root, breadth first, in pages.

A page token is the decimal index (in breadth-first order, each directory
digest once) of the first directory of the page, so paging needs no state
on the server; resuming re-reads the directories before the token.
Directories missing from the CAS below the root are left out (with their
subtrees), as the REAPI allows; a missing root is NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from lre.cas import BlobStore, read_message
from lre.digest import Digest
from lre.errors import InvalidArgument, NotFound
from lre.proto import re_pb2
from lre.service._digest_functions import check_digest_function

#: Directories per page when the request sets no page_size.
DEFAULT_PAGE_SIZE = 1000
#: Serialized directory bytes per page at most (kept well below message limits).
MAX_PAGE_BYTES = 2 << 20


def _page_start(token: str) -> int:
    if token == "":
        return 0
    if not (token.isascii() and token.isdigit()) or len(token) > 12:
        raise InvalidArgument(f"page_token: {token[:80]!r} is not a token this server issued")
    return int(token)


async def _breadth_first(store: BlobStore, root: Digest) -> AsyncGenerator[re_pb2.Directory, None]:
    seen = {root}
    level = [root]
    first = True
    while level:
        following: list[Digest] = []
        for digest in level:
            try:
                directory = await read_message(store, digest, re_pb2.Directory)
            except NotFound:
                if first:
                    raise NotFound(f"root_digest: directory {digest} is not in the CAS") from None
                continue
            first = False
            yield directory
            for node in directory.directories:
                try:
                    child = Digest.from_proto(node.digest, field=f"directory {node.name!r}.digest")
                except InvalidArgument:
                    continue  # a malformed child cannot be in the CAS; leave it out
                if child not in seen:
                    seen.add(child)
                    following.append(child)
        level = following


async def tree_pages(
    store: BlobStore, request: re_pb2.GetTreeRequest
) -> AsyncIterator[re_pb2.GetTreeResponse]:
    """Yield the pages from ``request.page_token`` to the end.

    Raises ``InvalidArgument`` for a bad root digest, page size or token and
    ``NotFound`` when the root directory is absent.
    """
    check_digest_function(request.digest_function, request.root_digest.hash)
    root = Digest.from_proto(request.root_digest, field="root_digest")
    if request.page_size < 0:
        raise InvalidArgument(f"page_size: {request.page_size} is negative")
    page_size = request.page_size or DEFAULT_PAGE_SIZE
    start = _page_start(request.page_token)
    index = 0
    page = re_pb2.GetTreeResponse()
    page_bytes = 0
    walk = _breadth_first(store, root)
    try:
        async for directory in walk:
            if index < start:
                index += 1
                continue
            size = directory.ByteSize()
            if len(page.directories) >= page_size or (
                page.directories and page_bytes + size > MAX_PAGE_BYTES
            ):
                page.next_page_token = str(index)
                yield page
                page = re_pb2.GetTreeResponse()
                page_bytes = 0
            page.directories.append(directory)
            page_bytes += size
            index += 1
    finally:
        await walk.aclose()
    if index < start and start > 0:
        raise InvalidArgument(f"page_token: {request.page_token!r} is past the end of the tree")
    yield page
