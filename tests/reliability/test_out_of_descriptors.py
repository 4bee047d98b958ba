"""lre out of file descriptors: requests fail, lre goes on (``lre.worker.usage._descriptors``).

A real lre runs under a low hard ``RLIMIT_NOFILE`` and the test opens idle
TCP connections to its port until it accepts no more (gRPC holds one
descriptor per connection and retries accepting when out of them). While
they are held lre must stay up, keep serving the calls of a connection it
had before, fail what needs new descriptors with RESOURCE_EXHAUSTED (never
INTERNAL), and once they are closed serve new clients and run actions again.

With a hard limit that leaves room for the reserve, lre's soft limit sits
below it and its own upkeep (memory readings, the history's sample, the
sampler's pass) never misses a period; with one too low for a reserve, each
of those says once that it skipped, and lre still does not stop (it exited
on an ``OSError`` from ``/proc/meminfo`` before).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import grpc

from tests._support.reapi import Client, digest
from tests._support.scratch import shown_scratch
from tests._support.servers import free_port
from tests._support.whole_lre import WholeLre, serving, whole_lre
from tests.worker.test_view_attacks import _config

#: lre's sampler runs every 0.25 s and the history every 1 s: held this
#: long, each meets the exhaustion many times.
_HOLD_S = 4.0


@contextmanager
def _lre(hard: int) -> Iterator[WholeLre]:
    """lre under ``prlimit --nofile=hard:hard`` (asking for that many)."""
    prlimit = shutil.which("prlimit")
    assert prlimit is not None, "util-linux prlimit is needed"
    with shown_scratch(prefix="lre-descriptors-") as home:
        port = free_port()
        config = _config(home, "portable", port, "root", extra_global=f", max_open_files: {hard}")
        with whole_lre(
            home, config, port, prefix=[prlimit, f"--nofile={hard}:{hard}", "--"]
        ) as lre:
            yield lre


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _soft_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as limits:
        for line in limits:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no open-files line in /proc/<pid>/limits")


def _run_or_refused(client: Client) -> None:
    """A new action while lre is out of descriptors: it runs, or the call, a
    blob of its upload or the Execute fails as that request's own (a blob's
    status names the exhaustion)."""
    with suppress(grpc.RpcError):
        try:
            response = client.run(["/bin/sh", "-c", "true"])
        except AssertionError as refused:  # the upload's per-blob statuses
            assert "out of file descriptors" in str(refused), refused
            return
        assert response.status.code in (0, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])


def _exhaust_and_recover(hard: int) -> tuple[str, int, int]:
    """Run the scenario (module docstring) against an lre of ``hard``; its
    log, soft limit and the descriptors it held at the height of it."""
    held: list[socket.socket] = []
    with _lre(hard) as lre:
        process, port, log = lre.process, lre.port, lre.log
        client = Client(f"127.0.0.1:{port}")
        try:
            serving(lre, client)
            assert client.run(["/bin/sh", "-c", "true"]).result.exit_code == 0
            soft = _soft_limit(process.pid)
            # Connect until lre takes no more (it can never hold more than soft).
            for _ in range(soft + 200):
                connection = socket.create_connection(("127.0.0.1", port), timeout=5)
                held.append(connection)
            deadline = time.monotonic() + 30
            while _open_files(process.pid) < soft and time.monotonic() < deadline:
                time.sleep(0.1)
            peak = _open_files(process.pid)
            time.sleep(_HOLD_S)
            assert process.poll() is None, log.read_text()[-3000:]
            # A connection lre had before goes on working.
            assert len(client.missing([digest(b"held")])) == 1
            # What needs a new descriptor fails as the request's own.
            _run_or_refused(client)
            assert process.poll() is None, log.read_text()[-3000:]
            for connection in held:
                connection.close()
            held.clear()
            time.sleep(1.0)
            fresh = Client(f"127.0.0.1:{port}")
            try:
                serving(lre, fresh)
                assert fresh.run(["/bin/sh", "-c", "echo back"]).result.exit_code == 0
            finally:
                fresh.close()
        finally:
            for connection in held:
                connection.close()
            client.close()
        text = log.read_text()
    return text, soft, peak


def _skips(text: str) -> dict[str, int]:
    lines = [line for line in text.splitlines() if "skipped, out of file descriptors" in line]
    counts: dict[str, int] = {}
    for line in lines:
        # "<time> WARNING <logger> <what>: skipped, ..."
        what = line.split(" WARNING ", 1)[-1].split(" ", 1)[-1].split(": skipped", 1)[0]
        counts[what] = counts.get(what, 0) + 1
    return counts


def test_with_its_reserve_lres_upkeep_never_misses_a_period() -> None:
    text, soft, peak = _exhaust_and_recover(512)
    assert soft == 512 - 128  # the reserve below the hard limit
    assert peak >= soft - 8, f"lre held only {peak} of {soft}: nothing was exhausted"
    assert "Traceback" not in text, text[-3000:]
    assert _skips(text) == {}, text[-3000:]


def test_without_room_for_a_reserve_lre_skips_samples_and_goes_on() -> None:
    text, soft, peak = _exhaust_and_recover(256)
    assert soft == 256  # too low to share: no reserve
    assert peak >= soft - 8, f"lre held only {peak} of {soft}: nothing was exhausted"
    assert "Traceback" not in text, text[-3000:]
    skips = _skips(text)
    # Each of lre's upkeep tasks that met it said so once, however many
    # periods it skipped (the history's runs every second whatever runs).
    assert skips and all(count == 1 for count in skips.values()), skips
    assert "history: host sample" in skips, skips
