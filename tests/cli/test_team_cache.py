"""A repository's own remote settings: found in Bazel's order, judged against lre's lines."""

from __future__ import annotations

from pathlib import Path

from lre.cli._bazel_client import bazelrc_text
from lre.cli._bazelrc_import import TRY_IMPORT
from lre.cli._client_settings import ClientSettings
from lre.cli._doctor_clients import team_cache_check
from lre.cli._team_cache import link_notes, remote_settings, team_caches

TEAM = "grpcs://cache.team.example:443"


def _repo(tmp_path: Path, bazelrc: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "WORKSPACE").write_text("")
    (repo / ".bazelrc").write_text(bazelrc)
    return repo


def _lre_bazelrc(repo: Path, *, with_cache_line: bool = True) -> None:
    text = bazelrc_text(ClientSettings(host="127.0.0.1", port=8980), (4, 2, 3), "repo-1")
    if not with_cache_line:
        text = text.replace("build:lre --remote_cache=\n", "")
    (repo / "lre.bazelrc").write_text(text)


def test_settings_are_found_through_imports_with_their_lines(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        "build --color=no\n"
        "try-import %workspace%/team.bazelrc\n"
        f"build --remote_cache {TEAM} --remote_header=x-team=1\n",
    )
    (repo / "team.bazelrc").write_text(
        "# the team's\nbuild:ci --remote_executor=grpcs://ci\ncommon --google_default_credentials\n"
    )
    found = remote_settings(repo, tmp_path / "home")
    assert [(s.path.name, s.line, s.section, s.flag, s.value) for s in found] == [
        ("team.bazelrc", 2, "build:ci", "remote_executor", "grpcs://ci"),
        ("team.bazelrc", 3, "common", "google_default_credentials", "true"),
        (".bazelrc", 3, "build", "remote_cache", TEAM),
        (".bazelrc", 3, "build", "remote_header", "x-team=1"),
    ]
    assert team_caches(found) == ["grpcs://ci", TEAM]


def test_a_line_after_lres_import_wins_and_doctor_fails_naming_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path, f"{TRY_IMPORT}\nbuild --remote_cache={TEAM}\n")
    _lre_bazelrc(repo)
    (found,) = remote_settings(repo, tmp_path / "home")
    assert found.after_lre and not found.outranked
    check = team_cache_check(repo, tmp_path / "home")
    assert check is not None and check.status == "FAIL"
    assert f"{repo / '.bazelrc'}:2" in check.message
    assert "move the `try-import %workspace%/lre.bazelrc` line below it" in check.message


def test_a_line_before_lres_import_is_overridden(tmp_path: Path) -> None:
    repo = _repo(tmp_path, f"build --remote_cache={TEAM}\n{TRY_IMPORT}\n")
    _lre_bazelrc(repo)
    check = team_cache_check(repo, tmp_path / "home")
    assert check is not None and check.status == "OK", check
    assert f"{repo / '.bazelrc'}:1 `build --remote_cache={TEAM}`" in check.message
    notes = link_notes(remote_settings(repo, tmp_path / "home"))
    assert "builds go to lre" in notes[0]
    assert f"LRE_UPSTREAM={TEAM}" in notes[-1]


def test_a_test_section_wins_for_bazel_test(tmp_path: Path) -> None:
    repo = _repo(tmp_path, f"test --remote_cache={TEAM}\n{TRY_IMPORT}\n")
    _lre_bazelrc(repo)
    check = team_cache_check(repo, tmp_path / "home")
    assert check is not None and check.status == "FAIL"
    assert "add `test --config=lre`" in check.message


def test_an_old_lre_bazelrc_without_the_override_fails(tmp_path: Path) -> None:
    repo = _repo(tmp_path, f"build --remote_cache={TEAM}\n{TRY_IMPORT}\n")
    _lre_bazelrc(repo, with_cache_line=False)
    check = team_cache_check(repo, tmp_path / "home")
    assert check is not None and check.status == "FAIL"
    assert check.fix == f"run `lre link` in {repo}"


def test_no_remote_settings_no_check(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "build --color=no\n")
    _lre_bazelrc(repo)
    assert team_cache_check(repo, tmp_path / "home") is None
    assert link_notes(remote_settings(repo, tmp_path / "home")) == []


def test_lre_bazelrc_clears_the_cache_and_google_credentials_on_request() -> None:
    settings = ClientSettings(host="127.0.0.1", port=8980)
    plain = bazelrc_text(settings, (4, 2, 3), "repo-1")
    assert "build:lre --remote_cache=\n" in plain
    assert "google_default_credentials" not in plain
    off = bazelrc_text(settings, (4, 2, 3), "repo-1", google_credentials_off=True)
    assert "build:lre --nogoogle_default_credentials" in off
