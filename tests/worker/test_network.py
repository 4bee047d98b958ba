"""The actions' network: lre's host loopback is never there; outside
addresses are, unless the action blocks the network (its own namespace
with only loopback, pidns backend only); its own loopback works."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from tests._support.outside_host import outside_host

from .conftest import make_lease, make_spec
from .test_containment import backend

PROBE = """
import socket, sys
for name, address, port in (
    ("host loopback", "127.0.0.1", sys.argv[1]),
    ("host loopback via the gateway", "10.0.2.2", sys.argv[1]),
    ("outside", sys.argv[2], sys.argv[3]),
):
    try:
        with socket.create_connection((address, int(port)), timeout=5) as sock:
            print("reached", name, sock.recv(16))
    except OSError as error:
        print("blocked", name, error.errno)
own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen()
socket.create_connection(own.getsockname(), timeout=2).close()
print("own loopback works")
"""


@pytest.mark.parametrize(
    "platform, worker_network, outside",
    [
        ({}, "allow", True),
        ({"block-network": ""}, "allow", False),
        ({}, "block", False),
        ({"requires-network": "1"}, "block", True),
        ({"block-network": "false"}, "allow", True),
    ],
)
async def test_block_network_cuts_the_action_off(
    tmp_path: Path,
    store: MemoryStore,
    platform: dict[str, str],
    worker_network: str,
    outside: bool,
) -> None:
    containment = backend("pidns")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    spec = make_spec(tmp_path, network=worker_network)
    try:
        with (
            outside_host() as host,
            WorkDirectory.open(spec.work_directory, spec.name) as workdir,
        ):
            runner = ActionRunner(RunnerContext(spec, workdir, store, containment=containment))
            lease = await make_lease(
                store,
                ["python3", "-c", PROBE, str(port), host.address, str(host.port)],
                platform=platform,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            )
            outcome = await runner.run(lease)
    finally:
        listener.close()
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    stdout = Digest.from_proto(outcome.result.stdout_digest, field="stdout_digest")
    out = (await read_bytes(store, stdout)).decode()
    assert "blocked host loopback " in out, out
    assert "blocked host loopback via the gateway" in out, out
    assert ("reached outside b'outside\\n'" in out) == outside, out
    assert "own loopback works" in out


async def test_block_network_without_namespaces_is_refused(
    tmp_path: Path, store: MemoryStore
) -> None:
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=backend("portable")))
        lease = await make_lease(store, ["/bin/true"], platform={"block-network": "1"})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    assert isinstance(outcome.error, InvalidArgument)
    assert "block-network" in outcome.message
