"""A forwarded action's platform (forward.platform) and exact-value matching."""

from __future__ import annotations

from types import MappingProxyType

from lre.config import UpstreamPlatformSpec
from lre.scheduler._matching import (
    explain_unsatisfiable,
    matches_statically,
    requirements_of,
    value_matches,
)
from lre.scheduler._model import Reservation, WorkerInfo
from lre.scheduler._units import ESTIMATE_PROPERTIES
from lre.scheduler._upstream_platform import platform_message, upstream_platform

SENT = {"cpu_count": "2", "memory_kb": "1000", "OSFamily": "Linux", "pool": "big"}


def test_default_drops_lre_s_own_resource_keys_only() -> None:
    assert upstream_platform(SENT, UpstreamPlatformSpec()) == {"OSFamily": "Linux", "pool": "big"}


def test_default_drops_every_estimate_lre_reads() -> None:
    # An engine that has not registered a key refuses the whole action, so
    # the estimates, read here as floors, stay here too.
    estimates = {key: "2" for key in ESTIMATE_PROPERTIES}
    assert upstream_platform({**SENT, **estimates}, UpstreamPlatformSpec()) == {
        "OSFamily": "Linux",
        "pool": "big",
    }
    assert ESTIMATE_PROPERTIES | {"cpu_count", "memory_kb"} == set(UpstreamPlatformSpec().drop)
    # An upstream that reads them gets them when they are not listed.
    kept = upstream_platform(estimates, UpstreamPlatformSpec(drop=("cpu_count", "memory_kb")))
    assert kept == dict(sorted(estimates.items()))


def test_drop_keep_rename_set_in_that_order() -> None:
    spec = UpstreamPlatformSpec(
        drop=("pool",),
        keep=("OSFamily", "cpu_count"),
        rename={"cpu_count": "cores"},
        set={"OSFamily": "linux", "ISA": "x86-64"},
    )
    assert upstream_platform(SENT, spec) == {"ISA": "x86-64", "OSFamily": "linux", "cores": "2"}
    assert list(upstream_platform(SENT, spec)) == ["ISA", "OSFamily", "cores"]  # sorted
    assert upstream_platform(SENT, UpstreamPlatformSpec(drop=())) == dict(sorted(SENT.items()))
    message = platform_message({"b": "2", "a": "1"})
    assert [(p.name, p.value) for p in message.properties] == [("a", "1"), ("b", "2")]


def _worker(os_family: str) -> WorkerInfo:
    return WorkerInfo(
        name="w",
        properties=MappingProxyType({"OSFamily": frozenset({os_family})}),
        capacity=Reservation(4000, 8 << 30, MappingProxyType({})),
    )


def test_exact_values_match_without_regard_to_case() -> None:
    assert value_matches("Linux", ["linux"]) and value_matches("linux", ["LINUX"])
    assert not value_matches("linux", ["windows"])
    types = {"OSFamily": "exact", "cpu_count": "minimum"}
    asked = requirements_of({"OSFamily": "Linux", "cpu_count": "1"}, types)
    assert matches_statically(asked, _worker("linux"))
    assert explain_unsatisfiable(asked, [_worker("linux")]) is None
    windows = requirements_of({"OSFamily": "windows"}, types)
    why = explain_unsatisfiable(windows, [_worker("linux")])
    assert why is not None and "OSFamily='windows'" in why
