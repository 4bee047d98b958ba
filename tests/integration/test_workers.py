"""Several workers in one lre, and a second lre on the same work directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from lre.worker.directories._workdir import WorkDirectoryInUse
from tests._support.configs import config_text, local_worker
from tests._support.reapi import Client, response_of
from tests._support.servers import ServerThread

OK = grpc.StatusCode.OK.value[0]


def two_worker_config(root: Path) -> str:
    """Workers "left" (pool=a, arch=x) and "right" (pool=b), one scheduler."""
    left = 'pool: { values: ["a"] }, ISA: { values: ["x"] }'
    right = 'pool: { values: ["b"] }'
    return config_text(
        root,
        workers=[
            local_worker(
                root, name=name, work=f"work-{name}", fields=f", platform_properties: {{ {p} }}"
            )
            for name, p in (("left", left), ("right", right))
        ],
    )


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, Client]]:
    root = tmp_path_factory.mktemp("lre2")
    server = ServerThread(root, two_worker_config(root))
    ready = server.start()
    remote = Client(ready.grpc_addresses[0])
    try:
        yield server, remote
    finally:
        remote.close()
        server.stop()


@pytest.mark.parametrize(
    ("properties", "workers"),
    [
        ({"pool": "a"}, {"left"}),
        ({"pool": "b"}, {"right"}),
        ({"ISA": "x"}, {"left"}),
        ({"pool": "a", "ISA": "x"}, {"left"}),
    ],
)
def test_actions_run_only_on_matching_workers(
    two_workers: tuple[ServerThread, Client], properties: dict[str, str], workers: set[str]
) -> None:
    _, client = two_workers
    prepared = [
        client.prepare(["/bin/sh", "-c", f"sleep 0.2; echo {index}"], command_platform=properties)
        for index in range(6)
    ]
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda p: response_of(client.execute(p)[-1]), prepared))
    for index, response in enumerate(responses):
        assert response.status.code == OK, response.status
        assert client.stdout(response.result) == f"{index}\n".encode()
    assert {r.result.execution_metadata.worker for r in responses} == workers


def test_actions_naming_no_pool_use_both_workers(two_workers: tuple[ServerThread, Client]) -> None:
    _, client = two_workers
    # Six 1-CPU actions at once on two 2-CPU workers: both must take some.
    prepared = [client.prepare(["/bin/sh", "-c", "sleep 0.5"]) for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda p: response_of(client.execute(p)[-1]), prepared))
    assert {r.result.execution_metadata.worker for r in responses} == {"left", "right"}


def test_pool_no_worker_has_fails_naming_the_offers(
    two_workers: tuple[ServerThread, Client],
) -> None:
    _, client = two_workers
    response = response_of(
        client.execute(client.prepare(["true"], command_platform={"pool": "c"}))[-1]
    )
    assert response.status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    for word in ("pool", "'c'", "'a'", "'b'"):
        assert word in response.status.message, response.status.message


def test_second_lre_on_the_same_work_directory_is_refused(
    two_workers: tuple[ServerThread, Client],
) -> None:
    server, client = two_workers
    second = ServerThread(server.root, two_worker_config(server.root))
    refused = pytest.RaisesExc(
        WorkDirectoryInUse,
        match=rf"work-(left|right).* in use by another lre \(pid {os.getpid()}\)",
    )
    with pytest.RaisesGroup(refused, flatten_subgroups=True):
        second.start()
    # The first one is untouched and still serves.
    response = response_of(client.execute(client.prepare(["echo", "still here"]))[-1])
    assert client.stdout(response.result) == b"still here\n"
