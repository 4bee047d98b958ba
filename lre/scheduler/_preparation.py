"""Before queueing: the Action, its Command and inputs exist; the platform can run.

``ActionChecker.check`` reads the Action and Command from the CAS, checks
that the whole input tree exists, applies ``property_modifier`` to the
platform (Action.platform, falling back to Command.platform), refuses what
no worker can ever run, validates the timeout and sizes the reservation.

What a platform needs and which workers match it is remembered per distinct
platform (builds use a handful) until the set of workers changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from lre.cas import BlobStore, DirectoryReader, read_message
from lre.config import PropertyModification
from lre.digest import Digest
from lre.errors import FailedPrecondition, InvalidArgument, MissingBlobs, NotFound
from lre.proto import re_pb2
from lre.scheduler._inputs import SubtreeBlobs, find_missing_inputs
from lre.scheduler._kind import kind_key
from lre.scheduler._matching import (
    Requirements,
    apply_modifications,
    explain_unsatisfiable,
    matches_statically,
    platform_of,
    requirements_of,
)
from lre.scheduler._model import ActionKey, ResourcePolicy, WorkerInfo
from lre.scheduler._protocols import ReservationAdvisor
from lre.scheduler._records import OperationState
from lre.scheduler._sizing import size_initial

_MAX_PLATFORMS = 1024


class ActionChecker:
    """Checks operations against the CAS and the workers (see the module docstring)."""

    def __init__(
        self,
        cas: BlobStore,
        types: Mapping[str, str],
        modifications: Sequence[PropertyModification],
        resources: ResourcePolicy,
        advisor: ReservationAdvisor | None,
        directories: DirectoryReader | None = None,
    ) -> None:
        self._cas = cas
        self._types = types
        self._modifications = tuple(modifications)
        self._resources = resources
        self._advisor = advisor
        self._directories = directories if directories is not None else DirectoryReader(cas)
        self._subtrees = SubtreeBlobs()
        self._fits: dict[
            tuple[tuple[str, str], ...],
            tuple[Mapping[str, str], Requirements, tuple[WorkerInfo, ...]],
        ] = {}

    def workers_changed(self) -> None:
        """Forget which workers match which platform (a worker came, went or changed)."""
        self._fits.clear()

    async def why_unsatisfiable(self, key: ActionKey, workers: Sequence[WorkerInfo]) -> str | None:
        """Why none of ``workers`` can ever run the action ``key`` names (its
        platform after the modifications), or None: also when the Action or
        Command cannot be read or the platform is malformed (``check``
        reports those)."""
        try:
            action = await read_message(self._cas, key.action_digest, re_pb2.Action)
            command_digest = Digest.from_proto(action.command_digest, field="command_digest")
            command = await read_message(self._cas, command_digest, re_pb2.Command)
        except (NotFound, InvalidArgument):
            return None
        platform = apply_modifications(platform_of(action, command), self._modifications)
        try:
            requirements = requirements_of(platform, self._types)
        except FailedPrecondition as error:
            return error.message
        except InvalidArgument:
            return None
        return explain_unsatisfiable(requirements, workers)

    async def check(
        self,
        op: OperationState,
        workers: Callable[[], list[WorkerInfo]],
        undedup: Callable[[OperationState], None],
    ) -> bool:
        """Fill ``op``'s action, command, platform, requirements, timeout and
        reservation. Returns False when ``op`` ended while this waited (then
        nothing more is to be done).

        Raises ``MissingBlobs`` naming every missing blob,
        ``FailedPrecondition`` for a platform no worker can ever run (naming
        the key, the value and what workers offer), ``InvalidArgument`` for
        a negative or too long timeout. ``undedup(op)`` is called for a
        ``do_not_cache`` action (others must not join it).
        """
        key = op.key
        try:
            action = await read_message(self._cas, key.action_digest, re_pb2.Action)
        except NotFound:
            raise MissingBlobs([key.action_digest.subject]) from None
        if op.done:
            return False
        if action.do_not_cache and op.dedup:
            undedup(op)
        command_digest = Digest.from_proto(action.command_digest, field="action.command_digest")
        input_root = Digest.from_proto(action.input_root_digest, field="action.input_root_digest")
        missing = await find_missing_inputs(
            self._directories, command_digest, input_root, self._subtrees
        )
        if op.done:
            return False
        if missing:
            raise MissingBlobs([d.subject for d in missing])
        try:
            command = await read_message(self._cas, command_digest, re_pb2.Command)
        except NotFound:
            raise MissingBlobs([command_digest.subject]) from None
        if op.done:
            return False
        raw = platform_of(action, command)
        fit_key = tuple(raw.items())
        fit = self._fits.get(fit_key)
        if fit is None:
            modified = MappingProxyType(apply_modifications(raw, self._modifications))
            requirements = requirements_of(modified, self._types)
            infos = workers()
            why = explain_unsatisfiable(requirements, infos)
            if why is not None:
                raise FailedPrecondition(f"action {key.action_digest}: {why}")
            matching = tuple(w for w in infos if matches_statically(requirements, w))
            fit = (modified, requirements, matching)
            if len(self._fits) >= _MAX_PLATFORMS:
                self._fits.clear()
            self._fits[fit_key] = fit
        platform, requirements, matching = fit
        timeout_s: float | None = None
        if action.HasField("timeout"):
            asked = action.timeout.seconds + action.timeout.nanos / 1e9
            if asked < 0:
                raise InvalidArgument(f"Action.timeout: {asked:g} s is negative")
            if asked > 0:
                longest = max(w.max_action_timeout_s for w in matching)
                if asked > longest:
                    raise InvalidArgument(
                        f"Action.timeout: {asked:g} s is longer than the maximum "
                        f"{longest:g} s (max_action_timeout_s of the workers that match)"
                    )
                timeout_s = asked
        op.action = action
        op.command = command
        op.platform = platform
        op.requirements = requirements
        op.requested_timeout_s = timeout_s
        op.kind_key = kind_key(op.request_info, command, op.key.instance_name)
        size_initial(op, requirements, matching, self._resources, self._advisor)
        return True
