"""block-network: an action in its own network namespace (pidns backend only)
reaches no listener outside it, while its own loopback works."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.scheduler import Completed
from lre.worker._action import ActionRunner
from lre.worker._cas_handle import CasHandle
from lre.worker._workdir import WorkDirectory

from .conftest import make_lease, make_spec
from .test_containment import backend

PROBE = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    print("reached")
except OSError as error:
    print("blocked", error.errno)
own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen()
socket.create_connection(own.getsockname(), timeout=2).close()
print("own loopback works")
"""


@pytest.mark.parametrize(
    "platform, worker_network, reached",
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
    reached: bool,
) -> None:
    containment = backend("pidns")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    spec = make_spec(tmp_path, network=worker_network)
    try:
        with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
            runner = ActionRunner(spec, workdir, CasHandle.of(store), containment=containment)
            lease = await make_lease(
                store,
                ["python3", "-c", PROBE, str(port)],
                platform=platform,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            )
            outcome = await runner.run(lease)
    finally:
        listener.close()
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    stdout = Digest.from_proto(outcome.result.stdout_digest, field="stdout_digest")
    out = (await read_bytes(store, stdout)).decode()
    assert ("reached" in out) == reached, out
    assert "own loopback works" in out


async def test_block_network_without_namespaces_is_refused(
    tmp_path: Path, store: MemoryStore
) -> None:
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(spec, workdir, CasHandle.of(store), containment=backend("portable"))
        lease = await make_lease(store, ["/bin/true"], platform={"block-network": "1"})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    assert isinstance(outcome.error, InvalidArgument)
    assert "block-network" in outcome.message
