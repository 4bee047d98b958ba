"""Per-action phases out of a Bazel 4.2.3 ``--profile`` (Chrome trace JSON).

Bazel writes one complete event (``"ph": "X"``) per action in the category
``action processing`` (named after the action's progress message,
``Compiling src/mod_07.c``, ``Linking app``) and, on the same thread inside
that span, one event per step of the spawn. The steps this reads, by the
names Bazel 4.2.3 gives them:

- remote path (``RemoteSpawnRunner``): ``MerkleTree.build(ActionInput)``,
  ``check cache hit``, ``upload missing inputs`` (FindMissingBlobs and the
  uploads), ``execute remotely`` (the Execute call, from sending it to the
  answer), ``download outputs`` and ``download server logs``;
- local sandboxed path (``LinuxSandboxedSpawnRunner`` and its base):
  ``sandbox.createFileSystem``, ``subprocess.run``, ``sandbox.copyOutputs``,
  ``sandbox.delete``;
- both: ``AbstractSpawnStrategy.getInputMapping`` and
  ``actuallyCompleteAction`` (Bazel's own bookkeeping after the spawn).

Bazel drops an event shorter than its task's profiling threshold (no
``upload missing inputs`` under 50 ms was seen in 4.2.3 profiles), so the
time of a step it dropped stays in ``unprofiled``: the action's span minus
every step found. ``load_events`` raises ``ValueError`` for a file that is
not a trace.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Step label -> the event names that make it up, remote path.
REMOTE_STEPS: dict[str, tuple[str, ...]] = {
    "input mapping": ("AbstractSpawnStrategy.getInputMapping",),
    "Merkle tree": ("MerkleTree.build(ActionInput)",),
    "cache check": ("check cache hit",),
    "upload missing inputs": ("upload missing inputs",),
    "execute remotely": ("execute remotely",),
    "download": ("download outputs", "download server logs"),
    "complete action": ("actuallyCompleteAction",),
}

#: Step label -> the event names that make it up, local sandboxed path.
LOCAL_STEPS: dict[str, tuple[str, ...]] = {
    "input mapping": ("AbstractSpawnStrategy.getInputMapping",),
    "sandbox create": ("sandbox.createFileSystem",),
    "subprocess run": ("subprocess.run",),
    "copy outputs": ("sandbox.copyOutputs",),
    "sandbox delete": ("sandbox.delete",),
    "complete action": ("actuallyCompleteAction",),
}

#: Prefixes of the progress messages of the spawns an edit-rebuild runs.
SPAWN_PREFIXES = ("Compiling ", "Linking ")


@dataclass(frozen=True)
class ActionPhases:
    """One spawn action of a build: its span and its steps, in seconds."""

    name: str
    total: float
    steps: dict[str, float]

    @property
    def unprofiled(self) -> float:
        return max(0.0, self.total - sum(self.steps.values()))


def load_events(path: Path) -> list[dict[str, Any]]:
    """The complete events (``ph == "X"``) of a profile, gzipped or not."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path} is not a Chrome trace (no traceEvents list)")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def action_phases(
    events: list[dict[str, Any]], steps: dict[str, tuple[str, ...]]
) -> list[ActionPhases]:
    """Every spawn action (``SPAWN_PREFIXES``) with its steps summed by label.

    A step event belongs to the action whose span on the same thread holds
    its start."""
    by_name = {name: label for label, names in steps.items() for name in names}
    actions = [
        e
        for e in events
        if e.get("cat") == "action processing" and str(e.get("name", "")).startswith(SPAWN_PREFIXES)
    ]
    found = []
    for action in actions:
        start, end = action["ts"], action["ts"] + action["dur"]
        sums = dict.fromkeys(steps, 0.0)
        for event in events:
            label = by_name.get(str(event.get("name", "")))
            if label is None or event.get("tid") != action.get("tid"):
                continue
            if start <= event["ts"] <= end:
                sums[label] += event["dur"] / 1e6
        found.append(ActionPhases(str(action["name"]), action["dur"] / 1e6, sums))
    return found
