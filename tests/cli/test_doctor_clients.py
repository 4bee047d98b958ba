"""`lre doctor`'s Bazel client-config check on repositories in each link state
(files only: no lre needs to run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.cli._bazelrc_import import TRY_IMPORT
from lre.cli._doctor_clients import bazel_config_check


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "WORKSPACE").write_text("")
    return repo


def test_a_repository_never_linked_or_unlinked_is_a_warning(repo: Path) -> None:
    check = bazel_config_check(repo, None)
    assert check.status == "WARN", check
    assert check.message == f"{repo} is not linked to lre: Bazel builds locally"
    assert "lre up" in check.fix


def test_a_home_bazelrc_importing_every_repositorys_file_is_still_a_warning(repo: Path) -> None:
    (Path.home() / ".bazelrc").write_text(TRY_IMPORT + "\n")
    assert bazel_config_check(repo, None).status == "WARN"


def test_an_import_left_without_its_file_fails(repo: Path) -> None:
    (repo / ".bazelrc").write_text(TRY_IMPORT + "\n")
    check = bazel_config_check(repo, None)
    assert check.status == "FAIL", check
    missing = repo / "lre.bazelrc"
    assert check.message == (
        f"{repo / '.bazelrc'} imports {missing}, which is missing: Bazel builds locally"
    )
