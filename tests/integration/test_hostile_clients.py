"""An action cannot call lre's own services (gRPC or the status port), while a
normal client can: each attack from inside a real action of a whole lre that
runs as lre's own user or as nobody, under each containment backend."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.lre_as import each_setup, python_for, require_setup, scratch_for
from tests._support.outside_host import outside_host
from tests._support.processes import processes_with
from tests._support.reapi import Client, response_of
from tests._support.scratch import action_python, action_pythonpath, shown_scratch

HOSTILE = Path(__file__).parents[1] / "_support" / "hostile_client.py"


@contextmanager
def lre_as(identity: str, containment: str) -> Iterator[dict[str, str]]:
    """A whole lre running as ``identity``; its addresses."""
    prefix, env = python_for(identity)
    with scratch_for(identity) as root:
        text = app_config_text(
            root, status_port=0, extra_worker=f'{WORKER_EXTRA}, containment: "{containment}"'
        )
        config = root / "lre.json5"
        config.write_text(text)
        os.chmod(config, 0o644)
        server = subprocess.Popen(
            [*prefix, str(HOSTILE.with_name("lre_server_as.py")), str(config)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdin is not None
            line = server.stdout.readline()
            if not line:
                pytest.fail(f"lre did not start: {server.communicate(timeout=60)[1][-3000:]}")
            yield json.loads(line)
        finally:
            try:  # end of input stops it
                server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()


@contextmanager
def abstract_listener(name: str) -> Iterator[list[bytes]]:
    """A listener of the host's on the abstract Unix socket ``name`` that
    answers ``host`` to each connection; yields the list of what it served."""
    served: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            with client:
                client.sendall(b"host")
                served.append(b"host")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.mark.attack(
    "lre's listeners: an action forges a result, runs a helper, reads /status, "
    "from a thread with its own descriptor table and through the host's abstract sockets"
)
@each_setup()
def test_an_action_cannot_call_lres_own_services(containment: str, identity: str) -> None:
    require_setup(containment, identity)
    marker = f"1001.{os.getpid() % 1000:03d}{abs(hash(containment + identity)) % 10**6:06d}"
    abstract = f"lre-attack-{marker}"
    _, env = python_for(identity)
    with (
        shown_scratch(identity) as shown,
        lre_as(identity, containment) as addresses,
        Client(addresses["grpc"]) as client,
        abstract_listener(abstract) as served,
    ):
        # The attacker's program and the packages it imports where the view
        # shows them (a checkout under /tmp is not there for the action).
        hostile = str(shutil.copy(HOSTILE, shown / HOSTILE.name))
        pythonpath = action_pythonpath(shown)
        victim = client.prepare(["/bin/echo", "the true result"])
        helper = client.prepare(["/bin/sh", "-c", f"sleep {marker}"])
        attack = client.prepare(
            [
                action_python(),
                hostile,
                addresses["grpc"],
                addresses["status"],
                client.instance,
                f"{victim.digest.hash}/{victim.digest.size_bytes}",
                f"{helper.digest.hash}/{helper.digest.size_bytes}",
                abstract,
            ],
            env={"PYTHONPATH": pythonpath, "PATH": env["PATH"]},
        )
        response = response_of(client.execute(attack)[-1])  # a normal client works
        output = client.stdout(response.result).decode()
        assert response.result.exit_code == 0, (output, client.stderr(response.result))
        assert client.get_result(victim.digest) is None, f"the forged result is served: {output}"
        assert not processes_with(marker), f"the helper runs: {output}"
        lines = dict(line.split(": ", 1) for line in output.splitlines())
        # The attack ran, from the thread with its own table too.
        assert lines["thread"] == "own descriptor table", output
        namespaced = containment != "portable"
        # Under pidns and userns lre's listeners do not exist for the action
        # (nothing answers on its loopback); under portable the guard refuses.
        code = "UNAVAILABLE" if namespaced else "PERMISSION_DENIED"
        for attempt in ("update", "thread update"):
            assert lines[attempt].startswith(f"refused {code}"), output
        # An Execute refused by the guard may instead end with the stream
        # reset under it (UNAVAILABLE, "Stream removed"); either way the
        # helper did not run (checked above).
        executes = (f"refused {code}", "refused UNAVAILABLE")
        for attempt in ("execute", "thread execute"):
            assert lines[attempt].startswith(executes), output
        for attempt in ("status", "thread status"):
            if namespaced:
                assert lines[attempt].startswith("error"), output
            else:
                assert lines[attempt] == "403", output
        if namespaced:  # abstract sockets belong to a network namespace
            assert lines["abstract"].startswith("blocked"), output
            assert not served, output
        # ... and the victim still runs for real.
        real = client.run(["/bin/echo", "the true result"], salt=None)
        assert client.stdout(real.result) == b"the true result\n"


_REACH = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as sock:
        print("reached", sock.recv(16).decode().strip())
except OSError as error:
    print("blocked", error)
"""


@each_setup()
def test_an_action_reaches_addresses_outside_the_machine(containment: str, identity: str) -> None:
    """lre's listeners are gone from the actions' network, the rest of the
    world is not (as Bazel's local sandbox gives it by default)."""
    require_setup(containment, identity)
    _, env = python_for(identity)
    with (
        outside_host() as host,
        lre_as(identity, containment) as addresses,
        Client(addresses["grpc"]) as client,
    ):
        response = client.run(
            [action_python(), "-c", _REACH, host.address, str(host.port)],
            env={"PATH": env["PATH"]},
        )
        output = client.stdout(response.result).decode()
        assert output == "reached outside\n", (output, client.stderr(response.result))
