"""lre's files are listed in .git/info/exclude (and only there), then taken out again."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lre.cli._bazel_client import write_bazel
from lre.cli._buck2_client import write_buck2
from lre.cli._client_config import owned_paths
from lre.cli._client_settings import ClientSettings
from lre.cli._git_exclude import BEGIN, set_excluded
from tests.cli.buck2_init import buck2_init
from tests.cli.test_buck2_client_config import TOOLCHAINS

SETTINGS = ClientSettings(host="127.0.0.1", port=50999, cpus=2)


def _git(repo: Path, *args: str) -> str:
    git = shutil.which("git")
    if git is None:
        pytest.fail("git is not installed")
    out = subprocess.run([git, "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return out.stdout


def test_written_files_leave_git_status_clean_and_come_back_on_removal(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "WORKSPACE").write_text("")
    (repo / ".gitignore").write_text("bazel-*\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("# mine\n*.swp\n")
    write_bazel(repo, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    exclude = set_excluded(repo, owned_paths(repo))
    assert exclude == repo / ".git" / "info" / "exclude"
    status = _git(repo, "status", "--porcelain", "--untracked-files=all")
    assert "lre.bazelrc" not in status and ".bazelrc" not in status
    assert (repo / ".gitignore").read_text() == "bazel-*\n"
    text = exclude.read_text()
    assert text.startswith("# mine\n*.swp\n")
    assert "/lre.bazelrc\n" in text and "/.bazelrc\n" in text
    assert set_excluded(repo, owned_paths(repo)) is None  # unchanged: not rewritten
    assert set_excluded(repo, []) == exclude
    assert exclude.read_text() == "# mine\n*.swp\n"
    assert "lre.bazelrc" in _git(repo, "status", "--porcelain", "--untracked-files=all")


def test_a_repository_below_the_git_top_keeps_other_entries(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    first, second = tmp_path / "a", tmp_path / "b"
    for repo in (first, second):
        repo.mkdir()
        (repo / "WORKSPACE").write_text("")
        write_bazel(repo, SETTINGS, edit_bazelrc=False, version=(4, 2, 3))
        set_excluded(repo, owned_paths(repo))
    exclude = tmp_path / ".git" / "info" / "exclude"
    assert "/a/lre.bazelrc" in exclude.read_text() and "/b/lre.bazelrc" in exclude.read_text()
    set_excluded(first, [])
    assert "/a/lre.bazelrc" not in exclude.read_text()
    assert "/b/lre.bazelrc" in exclude.read_text()
    assert exclude.read_text().count(BEGIN) == 1


def test_outside_git_nothing_happens(tmp_path: Path) -> None:
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=False, version=(4, 2, 3))
    assert set_excluded(tmp_path, owned_paths(tmp_path)) is None


def test_a_buck2_init_repository_stays_clean(tmp_path: Path) -> None:
    repo = buck2_init(tmp_path / "repo", git=True)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    before = _git(repo, "status", "--porcelain", "--untracked-files=all")
    write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=tmp_path / "home")
    set_excluded(repo, owned_paths(repo))
    after = _git(repo, "status", "--porcelain", "--untracked-files=all")
    # .buckconfig.local (lre's platform block) is not excluded when the user
    # has lines there; buck2 init writes none, so it is lre's alone here.
    assert after == before, after
