"""``MissReport``: say why the team's cache gives no hits.

An action's key is the digest of its Action, which names its Command (the
arguments and environment) and its platform. When the upstream action cache
(the slow tier of a ``fast_slow`` action cache) misses ``threshold`` lookups
in a row, the laptop's keys most likely differ from CI's: lre then reads the
Action and Command of the latest missed actions from the CAS and says, once
per streak of misses, which environment keys and platform properties they
carried, and how to compare them with CI's (Bazel's
``--execution_log_json_file``). The text goes to the log (WARNING), to
``/status`` (``cache``) and so to ``lre doctor``; a hit ends the streak and
clears it.

Failure: a missed action whose Action or Command is not in the CAS (or does
not parse) is skipped; when none could be read the notice says so, and the
next looks try again (Bazel asks GetActionResult before it uploads them
with Execute), replacing the notice (and logging it) once some are read.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import trio
from google.protobuf.message import DecodeError

from lre.cas import BlobStore, FastSlowActionCache, read_message
from lre.digest import Digest
from lre.errors import LreError
from lre.proto import re_pb2

__all__ = ["MissReport", "MissWatch"]

log = logging.getLogger("lre.cache")


@dataclass(frozen=True, slots=True)
class MissWatch:
    """One upstream action cache to watch, and the CAS its actions are in."""

    name: str
    cache: FastSlowActionCache
    cas: BlobStore


async def _keys_of(cas: BlobStore, action_digest: Digest) -> tuple[list[str], list[str]] | None:
    """The environment names and ``name=value`` platform properties of one
    action, or None when it cannot be read."""
    try:
        action = await read_message(cas, action_digest, re_pb2.Action)
        command_digest = Digest.from_proto(action.command_digest, field="command_digest")
        command = await read_message(cas, command_digest, re_pb2.Command)
    except (LreError, DecodeError):
        return None
    platform = action.platform if action.HasField("platform") else command.platform
    return (
        [variable.name for variable in command.environment_variables],
        [f"{p.name}={p.value}" for p in platform.properties],
    )


def explain(name: str, misses: int, keys: Sequence[tuple[list[str], list[str]]]) -> str:
    """The notice for ``misses`` misses in a row of upstream ``name``."""
    head = f"upstream action cache {name}: the last {misses} lookups all missed"
    how = (
        "an action's key covers its arguments, environment and platform, so these must "
        "equal CI's: build the same target here and on CI with "
        "--execution_log_json_file=FILE and compare one action's environmentVariables "
        "and platform"
    )
    if not keys:
        return f"{head} (their actions could not be read from the CAS); {how}"
    env: Counter[str] = Counter()
    platform: Counter[str] = Counter()
    for names, properties in keys:
        env.update(set(names))
        platform.update(set(properties))
    env_text = ", ".join(sorted(env)) or "none"
    platform_text = ", ".join(sorted(platform)) or "none"
    return (
        f"{head}; the latest {len(keys)} missed actions carried environment keys "
        f"[{env_text}] and platform properties [{platform_text}]; {how}"
    )


class MissReport:
    """Watches upstream action caches; ``notices()`` is what ``/status`` shows."""

    def __init__(self, watches: Sequence[MissWatch], *, threshold: int = 50) -> None:
        self.watches = tuple(watches)
        self.threshold = threshold
        self._notices: dict[str, str] = {}
        #: Watches whose notice names the keys of some missed actions.
        self._named: set[str] = set()

    def notices(self) -> tuple[str, ...]:
        return tuple(self._notices[name] for name in sorted(self._notices))

    @property
    def current(self) -> Mapping[str, str]:
        return dict(self._notices)

    async def check(self) -> None:
        """One look at each watched cache (what ``run`` does every interval)."""
        for watch in self.watches:
            in_a_row = watch.cache.slow_misses_in_a_row
            if in_a_row < self.threshold:
                self._notices.pop(watch.name, None)
                self._named.discard(watch.name)
                continue
            if watch.name in self._named:
                continue
            keys = []
            for digest in dict.fromkeys(watch.cache.recent_slow_misses):
                found = await _keys_of(watch.cas, digest)
                if found is not None:
                    keys.append(found)
            if keys:
                self._named.add(watch.name)
            elif watch.name in self._notices:
                continue  # still none readable: keep the notice as it is
            text = explain(watch.name, in_a_row, keys)
            self._notices[watch.name] = text
            log.warning("%s", text)

    async def run(
        self,
        interval_s: float = 2.0,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        if not self.watches:
            await trio.sleep_forever()
        while True:
            await trio.sleep(interval_s)
            await self.check()
