"""A real ``lre up`` SIGKILLed while its action writes a hardlinked input, then
restarted: the action's processes are gone within a second (the guardian,
never born in the action's cgroup, kills them), and the restarted lre serves
the input's true bytes (the action wrote a copy in its own view)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import psutil

from tests._support.configs import app_config_text
from tests._support.reapi import Client, digest
from tests._support.servers import free_port


def _start(config: Path, port: int, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "lre", "up", "--config", str(config)),
                *("--port", str(port), "--no-tui", "--no-client-config"),
            ],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError(f"lre did not listen on {port}: {log.read_text()}")


def _sleepers(marker: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if (p.info["cmdline"] or [""])[-2:] == ["sleep", marker]
    ]


def test_sigkill_mid_action_then_restart_serves_no_altered_blob(tmp_path: Path) -> None:
    root = tmp_path / "lre-root"  # not "lre": python -m lre would import it
    port = free_port()
    config = tmp_path / "lre.json5"
    # The one host directory the action's view shows writable: the action
    # says there that it ran.
    shared = tmp_path / "shared"
    shared.mkdir()
    writable = f', sandbox_writable_paths: ["{shared}"]'
    config.write_text(app_config_text(root, port=port, extra_worker=writable))
    log = tmp_path / "lre.log"
    payload = b"the input as uploaded\n"
    marker = shared / "tainted"
    forever = f"{5000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"
    # Same size, different bytes: a check of sizes alone cannot see it.
    script = (
        "chmod u+w data && printf X | dd of=data bs=1 seek=0 conv=notrunc 2>/dev/null && "
        f"touch {marker} && setsid sleep {forever} & exec sleep {forever}"
    )
    lre = _start(config, port, tmp_path, log)
    try:
        client = Client(f"127.0.0.1:{port}")
        prepared = client.prepare(
            ["/bin/sh", "-c", script],
            inputs={"data": payload},
            action_platform={"sandbox-writable-path": str(shared)},
        )

        def execute() -> None:
            try:
                client.execute(prepared, timeout=120)
            except grpc.RpcError:
                pass  # the server dies under it

        thread = threading.Thread(target=execute, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not (marker.exists() and len(_sleepers(forever)) == 2):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        lre.send_signal(signal.SIGKILL)
        lre.wait()
        killed_at = time.monotonic()
        while _sleepers(forever) and time.monotonic() - killed_at < 1.0:
            time.sleep(0.01)
        assert _sleepers(forever) == [], "the action outlived lre by more than a second"
        client.close()
        thread.join(30)
    finally:
        lre.kill()
        lre.wait()

    lre = _start(config, port, tmp_path, log)
    try:
        client = Client(f"127.0.0.1:{port}")
        data = digest(payload)
        # The action wrote its input in its own view (a copy): the CAS file
        # was never writable, so the restarted lre still has the true bytes.
        assert client.missing([data]) == []
        assert client.read(data) == payload
        client.close()
    finally:
        lre.terminate()
        lre.wait(60)
