"""What a repository is, the same for ``up``, ``link`` and ``unlink``: typos, files,
read-only trees and bare git checkouts get a clear message and no files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.running_lre import bazel_repo, detached, private_home


def test_typo_file_and_git_only_directories_are_refused(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    typo = tmp_path / "typo"
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    for command in ("up", "unlink"):
        missing = home.run(command, "--repo", str(typo), cwd=tmp_path)
        assert missing.returncode == 1, missing
        assert f"--repo {typo}: no such directory (lre creates none)" in missing.stderr
        assert not typo.exists()
        not_dir = home.run(command, "--repo", str(a_file), cwd=tmp_path)
        assert not_dir.returncode == 1, not_dir
        assert "not a directory" in not_dir.stderr and "Errno" not in not_dir.stderr
    assert home.run("status", cwd=tmp_path).returncode == 3  # `up` started nothing

    checkout = tmp_path / "checkout"  # a git checkout that is no workspace (lre's own)
    (checkout / ".git").mkdir(parents=True)
    repo = bazel_repo(tmp_path)
    with detached(home, checkout) as started:
        assert "is not a Bazel or Buck2 workspace" in started.stderr
        assert not (checkout / "lre.bazelrc").exists() and not (checkout / ".bazelrc").exists()
        linked = home.run("link", "--repo", str(typo), cwd=tmp_path)
        assert linked.returncode == 1 and "no such directory" in linked.stderr
        assert not typo.exists()
        here = home.run("link", cwd=checkout)
        assert here.returncode == 1 and "is not a Bazel or Buck2 workspace" in here.stderr
        forced = home.run("link", "--repo", str(checkout), cwd=tmp_path)
        assert forced.returncode == 0, forced.stderr  # named explicitly: written
        assert (checkout / "lre.bazelrc").exists()
        assert home.run("link", cwd=repo / ".").returncode == 0


def test_a_read_only_repository_is_said_plainly(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) for a read-only bind mount")
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    with detached(home, tmp_path):
        script = (
            f"mount --bind -o ro {repo} {repo} && "
            f"{sys.executable} -m lre link --config {home.config}"
        )
        result = subprocess.run(
            [unshare, "-m", "sh", "-c", script],
            cwd=repo,
            env=home.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if "mount" in result.stderr and "permission denied" in result.stderr.lower():
            pytest.skip("no mount namespaces here")
        assert result.returncode == 1, result
        assert f"{repo} is on a read-only file system" in result.stderr
        assert "Errno" not in result.stderr
