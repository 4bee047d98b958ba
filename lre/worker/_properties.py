"""What a worker offers: the values of its platform properties."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

import trio

from lre.config import PlatformPropertySpec
from lre.errors import FailedPrecondition


async def resolve_properties(
    properties: Mapping[str, PlatformPropertySpec], *, timeout: float = 30.0
) -> dict[str, frozenset[str]]:
    """Values of every property: its ``values``, plus one per non-empty output
    line of its ``query_cmd`` (run once through ``/bin/sh -c``).

    Raises ``FailedPrecondition`` naming the property when a query fails,
    times out, or a property ends up with no value.
    """
    resolved: dict[str, frozenset[str]] = {}
    for name, spec in properties.items():
        values = set(spec.values)
        if spec.query_cmd:
            with trio.move_on_after(timeout) as scope:
                completed = await trio.run_process(
                    ["/bin/sh", "-c", spec.query_cmd],
                    check=False,
                    stdin=subprocess.DEVNULL,
                    capture_stdout=True,
                    capture_stderr=True,
                )
            if scope.cancelled_caught:
                raise FailedPrecondition(
                    f"platform_properties.{name}.query_cmd: still running after {timeout:g} s"
                )
            if completed.returncode != 0:
                raise FailedPrecondition(
                    f"platform_properties.{name}.query_cmd: exited with "
                    f"{completed.returncode}: {completed.stderr.decode(errors='replace')[:200]}"
                )
            values.update(
                line.strip() for line in completed.stdout.decode().splitlines() if line.strip()
            )
        if not values:
            raise FailedPrecondition(f"platform_properties.{name}: no value offered")
        resolved[name] = frozenset(values)
    return resolved
