"""What a hostile action runs against lre's own listeners (run inside an action).

``hostile_client.py GRPC STATUS INSTANCE VICTIM HELPER`` where VICTIM and
HELPER are ``hash/size`` action digests: stores a forged result for VICTIM
(UpdateActionResult), submits HELPER through Execute, and GETs ``/status``
from STATUS (``host:port``, or ``-``). Prints one line per attempt:
``update: stored`` / ``update: refused CODE``, ``execute: ran`` /
``execute: refused CODE``, ``status: HTTP-STATUS`` / ``status: error ...``.
Then the same again from a thread that first takes a descriptor table of
its own (``unshare(CLONE_FILES)``: its sockets are listed only under
``/proc/<pid>/task/<tid>/fd``), each line prefixed ``thread ``, after a
line ``thread: own descriptor table`` (or ``thread: unshare failed ...``).
Last, ``abstract: ...`` for a connection to the abstract Unix socket named
by the sixth argument, if given (a listener of the host's).
"""

from __future__ import annotations

import ctypes
import http.client
import socket
import sys
import threading

import grpc

from lre.proto import re_grpc, re_pb2


def digest(text: str) -> re_pb2.Digest:
    hash_, size = text.split("/")
    return re_pb2.Digest(hash=hash_, size_bytes=int(size))


_CLONE_FILES = 0x400


def attempt(
    prefix: str, address: str, status: str, instance: str, victim: str, helper: str
) -> None:
    def print_line(line: str) -> None:
        print(prefix + line, flush=True)

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
            print_line("update: stored")
        except grpc.RpcError as error:
            print_line(f"update: refused {error.code().name} {error.details()}")
        execution = re_grpc.ExecutionStub(channel)
        try:
            request = re_pb2.ExecuteRequest(instance_name=instance, action_digest=digest(helper))
            for _ in execution.Execute(request, timeout=30):
                pass
            print_line("execute: ran")
        except grpc.RpcError as error:
            print_line(f"execute: refused {error.code().name} {error.details()}")
    if status != "-":
        host, port = status.rsplit(":", 1)
        try:
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            connection.request("GET", "/status")
            print_line(f"status: {connection.getresponse().status}")
        except OSError as error:
            print_line(f"status: error {error}")


def in_own_table(*args: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_FILES) != 0:
        print(f"thread: unshare failed {ctypes.get_errno()}", flush=True)
        return
    print("thread: own descriptor table", flush=True)
    attempt("thread ", *args)


def main(address: str, status: str, instance: str, victim: str, helper: str, *rest: str) -> None:
    attempt("", address, status, instance, victim, helper)
    thread = threading.Thread(target=in_own_table, args=(address, status, instance, victim, helper))
    thread.start()
    thread.join()
    if rest:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(10)
                sock.connect("\0" + rest[0])
                print(f"abstract: reached {sock.recv(16)!r}", flush=True)
        except OSError as error:
            print(f"abstract: blocked {error}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
