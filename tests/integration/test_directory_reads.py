"""Each input Directory is read from the CAS once per process.

The scheduler checks an action's whole input tree before queueing it and
the worker stages the same tree; both go through the one
``lre.cas.DirectoryReader`` the composition root builds per CAS, so the
second walk is served from memory.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lre.digest import Digest
from lre.proto import re_pb2
from tests._support.actions import build_tree
from tests._support.reapi import Client, response_of
from tests._support.servers import ServerThread


def test_scheduler_and_worker_read_each_directory_once(tmp_path: Path) -> None:
    server = ServerThread(tmp_path / "lre")
    store = server.app.stores.blob("cas")
    reads: collections.Counter[Digest] = collections.Counter()
    read = store.read

    def counting_read(digest: Digest, *args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        reads[digest] += 1
        return read(digest, *args, **kwargs)

    store.read = counting_read  # type: ignore[method-assign]
    spec = {"include/a.h": b"int a;\n", "src/a.c": b"#include <a.h>\n", "tools/cc": b"cc\n"}
    root, blobs = build_tree(spec)
    by_hash = {hashlib.sha256(blob).hexdigest(): blob for blob in blobs.values()}
    top = re_pb2.Directory.FromString(by_hash[root.hash])
    directories = {Digest(root.hash, root.size_bytes)} | {
        Digest(node.digest.hash, node.digest.size_bytes) for node in top.directories
    }
    server.start()
    assert server.ready is not None
    client = Client(server.ready.grpc_addresses[0])
    try:
        prepared = client.prepare(["/bin/true"], input_root=root, upload=False)
        client.upload({**blobs, **prepared.blobs})
        response = response_of(client.execute(prepared)[-1])
    finally:
        client.close()
        server.stop()
    assert response.status.code == 0 and response.result.exit_code == 0
    assert len(directories) == 4  # the root, include/, src/, tools/
    assert {d: reads[d] for d in directories} == dict.fromkeys(directories, 1)
