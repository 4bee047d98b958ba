"""Read a running lre's snapshot over its status listener (what ``lre top`` shows)."""

from __future__ import annotations

import http.client
import json

import trio

from lre.snapshot import ProcessSnapshot

__all__ = ["RemoteSnapshots", "fetch_snapshot_json"]

STATS_PATH = "/api/v1/stats"


def _host_port(address: str) -> tuple[str, int]:
    """``127.0.0.1:50061``, ``http://host:port`` or ``[::1]:50061`` -> (host, port).

    Raises ``ValueError`` naming the address when it is not host:port.
    """
    text = address.removeprefix("http://").rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--address: {address!r} is not host:port (e.g. 127.0.0.1:50061)")
    return host.strip("[]"), int(port)


def fetch_snapshot_json(address: str, *, timeout: float = 2.0) -> dict[str, object]:
    """GET ``/api/v1/stats`` from ``address`` (blocking) and return the decoded object.

    Raises ``OSError`` when nothing answers or the answer is not 200 (the
    message names the address), ``ValueError`` when the body is not a JSON
    object.
    """
    host, port = _host_port(address)
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", STATS_PATH)
        response = connection.getresponse()
        body = response.read(64 << 20)
        if response.status != 200:
            raise OSError(
                f"lre at {address} answered {response.status} {response.reason} for {STATS_PATH}"
            )
    except http.client.HTTPException as exc:
        raise OSError(f"lre at {address} sent a malformed answer: {exc!r}") from None
    except OSError as exc:
        if str(exc).startswith("lre at"):
            raise
        raise OSError(f"cannot reach lre at {address}: {exc}") from None
    finally:
        connection.close()
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"lre at {address} sent {type(data).__name__}, not a snapshot object")
    return data


class RemoteSnapshots:
    """An async snapshot getter for ``run_dashboard``: each call fetches a
    fresh snapshot in a worker thread (``OSError``/``ValueError`` as
    ``fetch_snapshot_json``)."""

    def __init__(self, address: str, *, timeout: float = 2.0) -> None:
        _host_port(address)  # fail early on a malformed address
        self.address = address
        self.timeout = timeout

    async def __call__(self) -> ProcessSnapshot:
        data = await trio.to_thread.run_sync(
            lambda: fetch_snapshot_json(self.address, timeout=self.timeout),
            abandon_on_cancel=True,
        )
        return ProcessSnapshot.from_json(data)
