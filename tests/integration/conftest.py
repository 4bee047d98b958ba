"""Fixtures of the full-stack REAPI client tests: one whole lre
(``lre.app.Application``) per test module on 127.0.0.1, and a synchronous
client on it (``tests._support.reapi``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.reapi import Client
from tests._support.servers import ServerThread


@pytest.fixture(scope="module")
def lre_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """One whole lre for the test module, stopped (and checked stopped) after it.
    Its worker's views show the base of pytest's temporary directories
    writable, so a test's action may write (and name with the property
    sandbox-writable-path) its own ``tmp_path``."""
    root = tmp_path_factory.mktemp("lre")
    writable = f', sandbox_writable_paths: ["{tmp_path_factory.getbasetemp()}"]'
    text = app_config_text(root, max_inflight=2, extra_worker=WORKER_EXTRA + writable)
    server = ServerThread(root, text)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(lre_server: ServerThread) -> Iterator[Client]:
    assert lre_server.ready is not None
    remote = Client(lre_server.ready.grpc_addresses[0])
    try:
        yield remote
    finally:
        remote.close()


@pytest.fixture
def marker() -> str:
    """A number no other process on the machine has in its command line,
    usable as a ``sleep`` duration: ``sleep {marker}`` sleeps about 1000 s."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"
