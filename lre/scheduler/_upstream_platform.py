"""The platform a forwarded action carries upstream (``forward.platform``).

lre's own clients send keys only lre understands (``cpu_count``, the
``memory_kb`` hint), other clients send estimates lre reads as floors
(``resources:cpu``, ``EstimatedMemory``, ...) and the property modifier adds
more; an engine someone else wrote refuses keys it has not registered
(BuildGrid: FAILED_PRECONDITION "Unregistered platform property"). So before
an action is executed upstream its platform is rewritten, in this order:

1. ``drop``: these keys are removed (default: every resource key lre reads,
   its own and the estimates);
2. ``keep``: when not empty, every key not listed is removed too;
3. ``rename``: keys are renamed (old name to new name; values unchanged);
4. ``set``: these properties are set, replacing any value.

Values are passed through as the client wrote them (lre's own matching
ignores case, an upstream's usually does not: use ``set`` to spell a value
the way the upstream's workers do). The result is sorted by name, as REAPI
requires. When the rewrite changes nothing the action is forwarded under its
own digest; otherwise a new Action (and Command, when the Command carries the
platform) is written and forwarded instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from lre.config import UpstreamPlatformSpec
from lre.proto import re_pb2


def upstream_platform(platform: Mapping[str, str], spec: UpstreamPlatformSpec) -> dict[str, str]:
    """``platform`` rewritten by ``spec`` (see the module docstring)."""
    dropped = set(spec.drop)
    kept = set(spec.keep)
    out: dict[str, str] = {}
    for key, value in platform.items():
        if key in dropped or (kept and key not in kept):
            continue
        out[spec.rename.get(key, key)] = value
    out.update(spec.set)
    return dict(sorted(out.items()))


def platform_message(properties: Mapping[str, str]) -> re_pb2.Platform:
    """A ``Platform`` holding ``properties`` sorted by name."""
    return re_pb2.Platform(
        properties=[
            re_pb2.Platform.Property(name=name, value=value)
            for name, value in sorted(properties.items())
        ]
    )
