"""A whole lre started the way a user starts it (``lre up --config``) in a
process of its own, for tests that need lre's real process: its descriptors,
its limits, its signals, its identity.

``whole_lre`` writes the config into ``home`` (a directory the test owns and
an action's view shows, e.g. from ``tests._support.scratch``), starts ``lre up``
with ``home`` as its ``LRE_HOME``/``HOME``, and stops it with SIGTERM at the end
(SIGKILL after 30 s). ``serving`` waits until lre answers a call; it fails the
test with the tail of lre's log when lre exits or does not answer within
``within`` seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from tests._support.reapi import Client, digest

__all__ = ["WholeLre", "serving", "whole_lre"]


@dataclass(frozen=True)
class WholeLre:
    """A running ``lre up``: its process, gRPC port and log file."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def tail(self) -> str:
        """The end of lre's log (for a failure message)."""
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError as error:
            return f"(no log: {error})"


@contextmanager
def whole_lre(
    home: Path, config_text: str, port: int, *, prefix: Sequence[str] = ()
) -> Iterator[WholeLre]:
    """``lre up`` on ``config_text`` (written to ``home/lre.json5``),
    listening on ``port``; ``prefix`` goes in front of the command (e.g.
    ``prlimit ... --`` or ``setpriv ...``)."""
    config = home / "lre.json5"
    config.write_text(config_text)
    env = {**os.environ, "LRE_HOME": str(home), "HOME": str(home), "XDG_STATE_HOME": str(home)}
    argv = [*prefix, sys.executable, "-m", "lre", "up", "--config", str(config)]
    argv += ["--no-tui", "--no-client-config", "--port", str(port)]
    log = home / "lre.out"
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield WholeLre(process, port, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def serving(lre: WholeLre, client: Client, within: float = 60) -> None:
    """Return once ``client`` gets an answer from ``lre``."""
    deadline = time.monotonic() + within
    while True:
        assert lre.process.poll() is None, f"lre exited:\n{lre.tail()}"
        try:
            client.missing([digest(b"ping")])
            return
        except grpc.RpcError:
            assert time.monotonic() < deadline, (
                f"lre did not serve within {within} s:\n{lre.tail()}"
            )
            time.sleep(0.2)
