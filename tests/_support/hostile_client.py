"""What a hostile action runs against lre's own listeners (run inside an action).

``hostile_client.py GRPC STATUS INSTANCE VICTIM HELPER`` where VICTIM and
HELPER are ``hash/size`` action digests: stores a forged result for VICTIM
(UpdateActionResult), submits HELPER through Execute, and GETs ``/status``
from STATUS (``host:port``, or ``-``). Prints one line per attempt:
``update: stored`` / ``update: refused CODE``, ``execute: ran`` /
``execute: refused CODE``, ``status: HTTP-STATUS`` / ``status: error ...``.
"""

from __future__ import annotations

import http.client
import sys

import grpc

from lre.proto import re_grpc, re_pb2


def digest(text: str) -> re_pb2.Digest:
    hash_, size = text.split("/")
    return re_pb2.Digest(hash=hash_, size_bytes=int(size))


def main(address: str, status: str, instance: str, victim: str, helper: str) -> None:
    with grpc.insecure_channel(address) as channel:
        cache = re_grpc.ActionCacheStub(channel)
        forged = re_pb2.ActionResult(exit_code=0, stdout_raw=b"forged by an action\n")
        try:
            cache.UpdateActionResult(
                re_pb2.UpdateActionResultRequest(
                    instance_name=instance, action_digest=digest(victim), action_result=forged
                ),
                timeout=30,
            )
            print("update: stored", flush=True)
        except grpc.RpcError as error:
            print(f"update: refused {error.code().name} {error.details()}", flush=True)
        execution = re_grpc.ExecutionStub(channel)
        try:
            request = re_pb2.ExecuteRequest(instance_name=instance, action_digest=digest(helper))
            for _ in execution.Execute(request, timeout=30):
                pass
            print("execute: ran", flush=True)
        except grpc.RpcError as error:
            print(f"execute: refused {error.code().name} {error.details()}", flush=True)
    if status != "-":
        host, port = status.rsplit(":", 1)
        try:
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            connection.request("GET", "/status")
            print(f"status: {connection.getresponse().status}", flush=True)
        except OSError as error:
            print(f"status: error {error}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
