"""A host whose only nameserver is on its loopback, as on a laptop running
systemd-resolved, with a real lre on it; run as a script by
``tests/worker/test_action_dns.py`` inside ``unshare --net --mount
--propagation private`` (root), so that nothing here touches the real
host: its loopback, its port 53 and its ``/etc/resolv.conf`` are this
process's own (the file is covered by a bind mount in the private mount
namespace, never edited).

argv[1] is a JSON request: ``scratch`` (a directory the view shows, for lre's
home and this host's resolv.conf), ``identity`` (``own`` or ``nobody``: who
runs lre), ``containment``, ``name`` and ``address`` (the one record the
resolver knows), ``script`` (the action, ``/bin/sh -c``).

The resolver is a small DNS responder on 127.0.0.53 port 53 (UDP), written
here with the standard library: it answers the one A record, NXDOMAIN to
every other name, and counts the queries it saw for the name, so the test
knows the action's lookup went through it. Prints one JSON line: the
action's exit code, stdout and stderr, and those queries.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT))

from tests._support.configs import app_config_text  # noqa: E402
from tests._support.lre_as import python_for  # noqa: E402
from tests._support.reapi import Client, digest  # noqa: E402
from tests._support.servers import free_port  # noqa: E402

RESOLVER = "127.0.0.53"


def _question(packet: bytes) -> tuple[str, int, int]:
    """The queried name, its type and the offset after the question."""
    labels: list[str] = []
    at = 12
    while packet[at]:
        length = packet[at]
        labels.append(packet[at + 1 : at + 1 + length].decode("ascii").lower())
        at += 1 + length
    qtype = struct.unpack("!H", packet[at + 1 : at + 3])[0]
    return ".".join(labels), qtype, at + 5


def answer(packet: bytes, name: str, address: str) -> bytes:
    """The reply to one query: ``address`` for an A query of ``name``, no
    record for another type of it, NXDOMAIN for any other name."""
    asked, qtype, end = _question(packet)
    question = packet[12:end]
    known = asked == name.lower()
    records = b""
    if known and qtype == 1:
        # A name pointer to the question, type A, class IN, TTL 60, 4 bytes.
        records = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(address)
    flags = 0x8180 if known else 0x8183  # response, recursion; NXDOMAIN when unknown
    header = struct.pack("!HHHHHH", packet[0] << 8 | packet[1], flags, 1, 1 if records else 0, 0, 0)
    return header + question + records


def serve(sock: socket.socket, name: str, address: str, seen: list[str]) -> None:
    while True:
        packet, peer = sock.recvfrom(4096)
        try:
            asked, _, _ = _question(packet)
            reply = answer(packet, name, address)
        except (IndexError, UnicodeDecodeError, struct.error):
            continue
        if asked == name.lower():
            seen.append(asked)
        sock.sendto(reply, peer)


def _loopback_up() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def _cover_resolv_conf(scratch: Path) -> None:
    """This host's resolv.conf, naming only the loopback resolver, bound
    where /etc/resolv.conf leads (in this private mount namespace only)."""
    ours = scratch / "host-resolv.conf"
    ours.write_text(f"nameserver {RESOLVER}\nsearch corp.example\noptions edns0\n")
    os.chmod(ours, 0o644)
    target = os.path.realpath("/etc/resolv.conf")
    subprocess.run(["mount", "--bind", str(ours), target], check=True)


def _start_lre(request: dict[str, Any], home: Path, port: int) -> subprocess.Popen[bytes]:
    extra = f', containment: "{request["containment"]}"'
    (home / "lre.json5").write_text(app_config_text(home, port=port, extra_worker=extra))
    prefix, env = python_for(request["identity"])
    env = {**env, "HOME": str(home), "XDG_STATE_HOME": str(home), "LRE_HOME": str(home)}
    if request["identity"] == "nobody":
        shutil.chown(home, "nobody", "nogroup")
        for path in home.iterdir():
            shutil.chown(path, "nobody", "nogroup")
    argv = [*prefix, "-m", "lre", "up", "--config", str(home / "lre.json5")]
    argv += ["--no-tui", "--no-client-config", "--port", str(port)]
    log = open(home / "lre.out", "wb")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=home)


def _wait_listening(process: subprocess.Popen[bytes], client: Client, home: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise SystemExit((home / "lre.out").read_text()[-3000:])
        try:
            client.missing([digest(b"ping")])
            return
        except Exception:
            if time.monotonic() > deadline:
                raise SystemExit("lre did not listen within 60 s") from None
            time.sleep(0.2)


def main(request: dict[str, Any]) -> dict[str, Any]:
    scratch = Path(request["scratch"])
    _loopback_up()
    _cover_resolv_conf(scratch)
    resolver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    resolver.bind((RESOLVER, 53))
    seen: list[str] = []
    threading.Thread(
        target=serve, args=(resolver, request["name"], request["address"], seen), daemon=True
    ).start()
    home = scratch / "lre"
    home.mkdir()
    port = free_port()
    process = _start_lre(request, home, port)
    client = Client(f"127.0.0.1:{port}")
    try:
        _wait_listening(process, client, home)
        response = client.run(["/bin/sh", "-c", request["script"]])
        result = response.result
        return {
            "status": response.status.code,
            "exit_code": result.exit_code,
            "stdout": client.stdout(result).decode(errors="replace"),
            "stderr": client.stderr(result).decode(errors="replace"),
            "queries": seen,
            "log": (home / "lre.out").read_text(errors="replace")[-2000:],
        }
    finally:
        client.close()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
