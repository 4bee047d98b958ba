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
PLATFORM_FLAG = "build:lre --remote_default_platform_properties="

#: A Bazel that writes one --remote_default_exec_properties line per property.
BAZEL_9 = (9, 0, 0)


def flags(text: str) -> list[str]:
    return [line.removeprefix(FLAG) for line in text.splitlines() if line.startswith(FLAG)]


def platform_flag(text: str) -> str | None:
    """The value of the one --remote_default_platform_properties line (Bazel < 9)."""
    found = [
        line.removeprefix(PLATFORM_FLAG)
        for line in text.splitlines()
        if line.startswith(PLATFORM_FLAG)
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_without_an_upstream_lre_sends_its_own_defaults() -> None:
    config = default_config()
    assert not has_upstream(config)
    properties = client_exec_properties(config)
    assert properties == (("cpu_count", "1"), ("OSFamily", "Linux"))
    settings = ClientSettings(host="127.0.0.1", port=1, exec_properties=properties)
    assert flags(bazelrc_text(settings, BAZEL_9)) == ["cpu_count=1", "OSFamily=Linux"]
    assert platform_flag(bazelrc_text(settings, (4, 2, 3))) == (
        "\"properties:{name:'cpu_count' value:'1'} properties:{name:'OSFamily' value:'Linux'}\""
    )


def test_with_an_upstream_nothing_of_lre_s_own_and_the_configured_set_verbatim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("LRE_")]:
        monkeypatch.delenv(name)
    team = load_config(TEAM)
    assert has_upstream(team)
    assert client_exec_properties(team) == (("OSFamily", "linux"),)
    settings = ClientSettings(host="h", port=1, exec_properties=client_exec_properties(team))
    assert flags(bazelrc_text(settings, BAZEL_9)) == ["OSFamily=linux"]
    old_bazel = bazelrc_text(settings, (4, 2, 3))
    assert platform_flag(old_bazel) == "\"properties:{name:'OSFamily' value:'linux'}\""
    assert "cpu_count" not in old_bazel
    automatic = dataclasses.replace(team, client=ClientSpec())
    assert client_exec_properties(automatic) == ()
    none = ClientSettings(host="h", port=1, exec_properties=())
    assert flags(bazelrc_text(none, BAZEL_9)) == []
    assert platform_flag(bazelrc_text(none, (4, 2, 3))) is None
    several = dataclasses.replace(team, client=ClientSpec(exec_properties={"b": "2", "a": "1"}))
    assert client_exec_properties(several) == (("a", "1"), ("b", "2"))


def test_the_pid_file_carries_them_to_lre_link(tmp_path: Path) -> None:
    from lre.cli._daemon import RunningServer, read_pid_file, write_pid_file
    from lre.cli._link import client_settings_for

    server = RunningServer(
        pid=1,
        grpc_address="127.0.0.1:50999",
        status_address="",
        repo="",
        log_file="",
        started=0.0,
        exec_properties={"OSFamily": "linux"},
    )
    write_pid_file(tmp_path, server)
    again = read_pid_file(tmp_path)
    assert again == server
    assert client_settings_for(again, "main").exec_properties == (("OSFamily", "linux"),)
    older = dataclasses.replace(server, exec_properties=None)  # a pid file without them
    assert client_settings_for(older, "main").exec_properties is None
