"""The platform properties lre.bazelrc sends: lre's defaults without an
upstream, what the config says (the team's) with one."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from lre.cli._client_config import ClientSettings, bazelrc_text
from lre.config import (
    ClientSpec,
    client_exec_properties,
    default_config,
    has_upstream,
    load_config,
)

TEAM = Path(__file__).parents[2] / "configs" / "team-cache.json5"

FLAG = "build:lre --remote_default_exec_properties="


def flags(text: str) -> list[str]:
    return [line.removeprefix(FLAG) for line in text.splitlines() if line.startswith(FLAG)]


def test_without_an_upstream_lre_sends_its_own_defaults() -> None:
    config = default_config()
    assert not has_upstream(config)
    properties = client_exec_properties(config)
    assert properties == (("cpu_count", "1"), ("OSFamily", "Linux"))
    settings = ClientSettings(host="127.0.0.1", port=1, exec_properties=properties)
    assert flags(bazelrc_text(settings, (4, 2, 3))) == ["cpu_count=1", "OSFamily=Linux"]


def test_with_an_upstream_nothing_of_lre_s_own_and_the_configured_set_verbatim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("LRE_")]:
        monkeypatch.delenv(name)
    team = load_config(TEAM)
    assert has_upstream(team)
    assert client_exec_properties(team) == (("OSFamily", "linux"),)
    text = bazelrc_text(
        ClientSettings(host="h", port=1, exec_properties=client_exec_properties(team)),
        (4, 2, 3),
    )
    assert flags(text) == ["OSFamily=linux"]
    assert "cpu_count" not in text
    automatic = dataclasses.replace(team, client=ClientSpec())
    assert client_exec_properties(automatic) == ()
    assert flags(bazelrc_text(ClientSettings(host="h", port=1, exec_properties=()), None)) == []
    several = dataclasses.replace(team, client=ClientSpec(exec_properties={"b": "2", "a": "1"}))
    assert client_exec_properties(several) == (("a", "1"), ("b", "2"))
