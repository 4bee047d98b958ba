"""The platform properties lre.bazelrc sends: none unless the config names
some (the team's), so actions keep the keys the repository gives them."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from lre.cli._bazel_client import bazelrc_text
from lre.cli._client_settings import ClientSettings
from lre.config import ClientSpec, client_exec_properties, default_config, load_config

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


def test_by_default_nothing_with_or_without_an_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("LRE_")]:
        monkeypatch.delenv(name)
    config = default_config()
    team = load_config(TEAM)
    # the premise: the team config reads through an upstream, the default does not
    assert not any(s.grpc is not None for s in config.stores)
    assert any(s.grpc is not None for s in team.stores)
    for each in (config, team):
        assert client_exec_properties(each) == ()
        settings = ClientSettings(host="h", port=1, exec_properties=client_exec_properties(each))
        assert flags(bazelrc_text(settings, BAZEL_9)) == []
        assert platform_flag(bazelrc_text(settings, (4, 2, 3))) is None


def test_the_configured_set_verbatim() -> None:
    team = load_config(TEAM)
    several = dataclasses.replace(team, client=ClientSpec(exec_properties={"b": "2", "a": "1"}))
    assert client_exec_properties(several) == (("a", "1"), ("b", "2"))
    settings = ClientSettings(host="h", port=1, exec_properties=client_exec_properties(several))
    assert flags(bazelrc_text(settings, BAZEL_9)) == ["a=1", "b=2"]
    assert platform_flag(bazelrc_text(settings, (4, 2, 3))) == (
        "\"properties:{name:'a' value:'1'} properties:{name:'b' value:'2'}\""
    )


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
