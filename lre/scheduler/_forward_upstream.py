"""Running one action on an upstream Execution service (used by ``ForwardScheduler``).

``UpstreamExecutor.run``:

1. reads the Action, Command and input tree from the local CAS; rewrites the
   platform for the upstream (``_upstream_platform``: a changed platform
   means a new Action, and Command, written to the local CAS and forwarded
   under their own digests), and copies every blob the upstream CAS lacks
   (one FindMissingBlobs pass, then uploads; ``upload_missing``);
2. calls Execute upstream and reports each stage it streams back;
3. returns the final ``ActionResult`` (its blobs stay upstream: clients
   fetch them through the fast_slow CAS when they need them).

If the upstream answers FAILED_PRECONDITION for missing inputs (evicted
between upload and Execute), the inputs are uploaded again and the action
is executed once more. If the Execute stream breaks before the operation
is done, ``WaitExecution`` resumes it once. Failure: ``UpstreamUnavailable``
when the upstream cannot be reached; other upstream errors as the matching
``lre.errors`` class; ``MissingBlobs`` when an input is in neither CAS.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc.aio

from lre.cas import (
    BlobStore,
    DirectoryReader,
    GrpcStore,
    read_message,
    upload_missing,
    write_message,
)
from lre.config import UpstreamPlatformSpec
from lre.digest import Digest, DigestFunction, resolve_digest_function
from lre.errors import (
    FailedPrecondition,
    LreError,
    MissingBlobs,
    NotFound,
    Unavailable,
    error_for_code,
)
from lre.proto import error_details_pb2, operations_pb2, re_grpc, re_pb2
from lre.scheduler._matching import platform_of
from lre.scheduler._model import Stage
from lre.scheduler._upstream_platform import platform_message, upstream_platform
from lre.upstream import Connection, Metadata, UpstreamClient

_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]

_STAGES = frozenset(stage.value for stage in Stage)

#: No deadline on Execute streams in practice (actions may run for hours).
_EXECUTE_TIMEOUT_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class UpstreamOutcome:
    """How a forwarded action ended (``error`` None = OK)."""

    result: re_pb2.ActionResult | None
    cached_result: bool
    error: LreError | None
    message: str


def _status_error(status: Any, what: str) -> LreError | None:
    if status.code == 0:
        return None
    if status.code == FailedPrecondition.code:
        subjects = []
        for detail in status.details:
            failure = error_details_pb2.PreconditionFailure()
            if detail.Unpack(failure):
                subjects += [v.subject for v in failure.violations if v.type == "MISSING"]
        if subjects:
            return MissingBlobs(subjects, f"{what}: {status.message}")
    return error_for_code(status.code, f"{what}: {status.message}")


async def _start_wait(
    request: re_pb2.WaitExecutionRequest, connection: Connection, metadata: Metadata, timeout: float
) -> Any:
    stub = connection.stub(re_grpc.ExecutionStub)
    call = stub.WaitExecution(request, metadata=metadata, timeout=timeout)
    first = await call.read()
    return call, first


class UpstreamExecutor:
    """See the module docstring."""

    def __init__(
        self,
        client: UpstreamClient,
        *,
        instance_name: str,
        local_cas: BlobStore,
        upstream_cas: GrpcStore | None,
        platform: UpstreamPlatformSpec | None = None,
        directories: DirectoryReader | None = None,
    ) -> None:
        """``directories``: the reader of ``local_cas`` shared with the local
        scheduler and workers (one of its own when not given)."""
        self.client = client
        self.instance_name = instance_name
        self.local_cas = local_cas
        self.directories = directories if directories is not None else DirectoryReader(local_cas)
        self.upstream_cas = upstream_cas.strict() if upstream_cas is not None else None
        self.platform = platform or UpstreamPlatformSpec()

    async def rewrite_platform(
        self, request: re_pb2.ExecuteRequest, action_digest: Digest, action: re_pb2.Action
    ) -> tuple[Digest, re_pb2.Action]:
        """The digest and Action to execute upstream: ``action`` itself when
        the platform rewrite changes nothing (or the digest function is not
        SHA-256, the only one lre writes), else a rewritten Action (and
        Command) written to the local CAS. Raises ``NotFound`` when the
        Command is missing locally."""
        command_digest = Digest.from_proto(action.command_digest, field="action.command_digest")
        command = await read_message(self.local_cas, command_digest, re_pb2.Command)
        current = platform_of(action, command)
        wanted = upstream_platform(current, self.platform)
        function = resolve_digest_function(request.digest_function, action_digest.hash)
        if wanted == current or function is not DigestFunction.SHA256:
            return action_digest, action
        platform = platform_message(wanted)
        rewritten = re_pb2.Action()
        rewritten.CopyFrom(action)
        if command.platform.properties:
            command.platform.CopyFrom(platform)
            new_command = await write_message(self.local_cas, command)
            rewritten.command_digest.CopyFrom(new_command.to_proto())
        if action.platform.properties or not command.platform.properties:
            rewritten.platform.CopyFrom(platform)
        return await write_message(self.local_cas, rewritten), rewritten

    async def input_blobs(self, action_digest: Digest, action: re_pb2.Action) -> list[Digest]:
        """The Action, its Command, every Directory and file of its input root."""
        command = Digest.from_proto(action.command_digest, field="action.command_digest")
        root = Digest.from_proto(action.input_root_digest, field="action.input_root_digest")
        blobs = [action_digest, command]
        directories = await self.directories.read_tree(root)
        blobs.extend(directories)
        for digest, directory in directories.items():
            for file in directory.files:
                blobs.append(
                    Digest.from_proto(file.digest, field=f"directory {digest} file {file.name}")
                )
        return list(dict.fromkeys(blobs))

    async def upload_inputs(self, action_digest: Digest, action: re_pb2.Action) -> None:
        if self.upstream_cas is None:
            return
        blobs = await self.input_blobs(action_digest, action)
        try:
            await upload_missing(self.local_cas, self.upstream_cas, blobs)
        except NotFound as error:
            raise MissingBlobs([], f"cannot forward {action_digest}: {error.message}") from None

    async def run(
        self,
        request: re_pb2.ExecuteRequest,
        action_digest: Digest,
        on_stage: Callable[[Stage], None],
    ) -> UpstreamOutcome:
        action = await read_message(self.local_cas, action_digest, re_pb2.Action)
        try:
            action_digest, action = await self.rewrite_platform(request, action_digest, action)
        except NotFound as error:
            raise MissingBlobs([], f"cannot forward {action_digest}: {error.message}") from None
        await self.upload_inputs(action_digest, action)
        outgoing = re_pb2.ExecuteRequest()
        outgoing.CopyFrom(request)
        outgoing.instance_name = self.instance_name
        outgoing.action_digest.CopyFrom(action_digest.to_proto())
        outcome = await self._execute(outgoing, on_stage)
        if isinstance(outcome.error, MissingBlobs) and self.upstream_cas is not None:
            await self.upload_inputs(action_digest, action)
            outcome = await self._execute(outgoing, on_stage)
        return outcome

    async def _execute(
        self, request: re_pb2.ExecuteRequest, on_stage: Callable[[Stage], None]
    ) -> UpstreamOutcome:
        what = f"Execute of {Digest(request.action_digest.hash, request.action_digest.size_bytes)}"

        async def start(connection: Connection, metadata: Metadata, timeout: float) -> Any:
            stub = connection.stub(re_grpc.ExecutionStub)
            call = stub.Execute(request, metadata=metadata, timeout=timeout)
            first = await call.read()
            return call, first

        call, message = await self.client.attempt(what, start, timeout_s=_EXECUTE_TIMEOUT_S)
        resumed = False
        name = ""
        while True:
            try:
                while message is not _EOF:
                    operation: operations_pb2.Operation = message
                    name = operation.name or name
                    outcome = self._update(operation, on_stage, what)
                    if outcome is not None:
                        return outcome
                    message = await self.client.step(what, call.read)
            finally:
                if message is not _EOF:
                    self.client.loop.post(call.cancel)
            if resumed or not name:
                raise Unavailable(
                    f"upstream {self.client.name}: {what}: the stream ended before the "
                    "operation finished"
                )
            resumed = True
            call, message = await self.client.attempt(
                what,
                functools.partial(_start_wait, re_pb2.WaitExecutionRequest(name=name)),
                timeout_s=_EXECUTE_TIMEOUT_S,
            )

    @staticmethod
    def _update(
        operation: operations_pb2.Operation, on_stage: Callable[[Stage], None], what: str
    ) -> UpstreamOutcome | None:
        metadata = re_pb2.ExecuteOperationMetadata()
        if operation.metadata.Unpack(metadata) and metadata.stage in _STAGES:
            on_stage(Stage(metadata.stage))
        if not operation.done:
            return None
        if operation.HasField("error"):
            return UpstreamOutcome(None, False, _status_error(operation.error, what), "")
        response = re_pb2.ExecuteResponse()
        if not operation.response.Unpack(response):
            return UpstreamOutcome(
                None, False, Unavailable(f"{what}: the upstream sent no ExecuteResponse"), ""
            )
        result = re_pb2.ActionResult()
        has_result = response.HasField("result")
        if has_result:
            result.CopyFrom(response.result)
        return UpstreamOutcome(
            result if has_result else None,
            response.cached_result,
            _status_error(response.status, what),
            response.message,
        )
