"""A real second lre as the "cluster": configs and a runner for tests.

``UpstreamLre`` starts an ``lre.app.Application`` on 127.0.0.1:0 inside the
test's Trio run (its own stores, scheduler and a local worker advertising
``OSFamily`` values of our choice), optionally behind a gRPC interceptor
that records request metadata and demands a bearer token. ``stop()`` stops
it mid-test (the "upstream went away" case).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import trio

from lre.app import Application, ReadyInfo
from lre.config import Config
from tests._support.configs import (
    MAIN_MODIFIER,
    app_config_text,
    config_text,
    filesystem_store,
    local_worker,
    simple_scheduler,
)
from tests.upstream._execution import ExecutionAdapter


def upstream_config_text(
    root: Path,
    *,
    os_family: Sequence[str] = ("linux",),
    port: int = 0,
    max_inflight: int = 2,
) -> str:
    """The cluster: filesystem CAS and AC, one worker offering ``os_family``."""
    values = ", ".join(f'"{v}"' for v in os_family)
    return app_config_text(
        root,
        port=port,
        max_inflight=max_inflight,
        worker_name="cluster-worker",
        extra_worker=f", platform_properties: {{ OSFamily: {{ values: [{values}] }} }}",
        extra_scheduler=", progress_interval_s: 1",
    )


class MetadataRecorder(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Records every call's method and metadata; with ``token`` set, refuses
    calls without ``authorization: Bearer <token>`` (UNAUTHENTICATED)."""

    def __init__(self, token: str = "") -> None:
        self.token = token
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.refused = 0

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        metadata = {
            k: v if isinstance(v, str) else v.decode("latin-1")
            for k, v in (handler_call_details.invocation_metadata or ())
        }
        self.calls.append((handler_call_details.method, metadata))
        if self.token and metadata.get("authorization") != f"Bearer {self.token}":
            self.refused += 1

            async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad or missing token")

            handler = await continuation(handler_call_details)
            if handler is None:
                return None
            if handler.request_streaming and handler.response_streaming:
                return grpc.stream_stream_rpc_method_handler(deny)
            if handler.request_streaming:
                return grpc.stream_unary_rpc_method_handler(deny)
            if handler.response_streaming:
                return grpc.unary_stream_rpc_method_handler(deny)
            return grpc.unary_unary_rpc_method_handler(deny)
        return await continuation(handler_call_details)

    def methods(self) -> list[str]:
        return [method.rsplit("/", 1)[-1] for method, _ in self.calls]


class UpstreamLre:
    """One running lre Application used as the upstream cluster."""

    def __init__(self, config: Config, *, interceptor: MetadataRecorder | None = None) -> None:
        self.app = Application(config)
        if interceptor is not None:
            for server in self.app.servers:
                server.options = dataclasses.replace(server.options, interceptors=(interceptor,))
        for server in self.app.servers:
            has_execution = any("Execution" in type(s).__name__ for s in server.servicers)
            if not has_execution:  # until lre.app registers its own Execution servicer
                adapter = ExecutionAdapter(self.app.bridge, self.app.schedulers["main"])
                server.servicers = (*server.servicers, adapter)
        self.interceptor = interceptor
        self.address = ""
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()

    @property
    def url(self) -> str:
        return f"grpc://{self.address}"

    async def start(self, nursery: trio.Nursery) -> UpstreamLre:
        ready: ReadyInfo = await nursery.start(self._run)
        self.address = ready.grpc_addresses[0]
        return self

    async def _run(self, *, task_status: trio.TaskStatus[ReadyInfo]) -> None:
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                await self.app.serve(task_status=task_status)
        finally:
            self._done.set()

    async def stop(self) -> None:
        """Stop the cluster (ordered shutdown) and wait until it is gone."""
        self.app.request_stop()
        with trio.fail_after(30):
            await self._done.wait()


def laptop_config_text(
    root: Path,
    upstream_url: str,
    *,
    upload_policy: str = "never",
    ac_write_policy: str = "both",
    cas_write_policy: str = "both",
    headers: str = "{}",
    os_family: Sequence[str] = ("linux",),
    scheduler_block: str = "",
    instance: str = "team",
) -> str:
    """The laptop: filesystem tiers in front of ``upstream_url`` (CAS and AC).

    ``scheduler_block`` replaces the default scheduler entry named "main"
    (e.g. a forward scheduler in front of "queue").
    """
    values = ", ".join(f'"{v}"' for v in os_family)
    retry = "retry: { max_retries: 1, delay: 0.01, max_delay: 0.02 }"
    upstream = f'endpoints: [{{ address: "{upstream_url}" }}], instance_name: "{instance}"'
    return config_text(
        root,
        stores=[
            filesystem_store(root, "local-cas", directory="cas"),
            f'{{ name: "upstream-cas", grpc: {{ {upstream}, headers: {headers}, {retry} }} }}',
            f"""{{ name: "cas", fast_slow: {{ fast: "local-cas", slow: "upstream-cas",
                write_policy: "{cas_write_policy}" }} }}""",
            filesystem_store(root, "local-ac", "64MiB", directory="ac"),
            f"""{{ name: "upstream-ac", grpc: {{ {upstream}, store_type: "ac",
                headers: {headers}, upload_policy: "{upload_policy}", {retry} }} }}""",
            f"""{{ name: "ac", fast_slow: {{ fast: "local-ac", slow: "upstream-ac",
                write_policy: "{ac_write_policy}" }} }}""",
        ],
        schedulers=[
            scheduler_block or MAIN_MODIFIER,
            simple_scheduler(", progress_interval_s: 1"),
        ],
        workers=[
            local_worker(
                root,
                name="laptop-worker",
                max_inflight=1,
                upload='ac_store: "ac", upload_ac_results_strategy: "everything"',
                fields=f", platform_properties: {{ OSFamily: {{ values: [{values}] }} }}",
            )
        ],
    )
