"""lre writes no file git tracks: the try-import line goes where the repository
allows it (``user.bazelrc``, ``~/.bazelrc``), through the real CLI and git."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.running_lre import bazel_repo, detached, private_home


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _committed(repo: Path, files: dict[str, str]) -> None:
    _git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).write_text(text)
    _git(repo, "add", *files)
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")


def test_tracked_bazelrc_is_left_alone_and_unlink_restores_every_byte(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    _committed(repo, {".bazelrc": "build --verbose_failures", "MODULE.bazel": ""})
    users_rc = tmp_path / "home" / ".bazelrc"
    users_rc.parent.mkdir(parents=True)
    users_rc.write_text("startup --host_jvm_args=-Xmx2g")  # no final newline
    with detached(home, repo) as started:
        assert _git(repo, "status", "--porcelain", "--untracked-files=all") == ""
        assert (repo / ".bazelrc").read_text() == "build --verbose_failures"
        assert f"added `try-import %workspace%/lre.bazelrc` to {users_rc}" in started.stdout
        assert "is tracked by git, so lre leaves it alone" in started.stderr
        assert "try-import %workspace%/lre.bazelrc" in users_rc.read_text()
        again = home.run("link", cwd=repo)
        assert again.returncode == 0, again.stderr
        assert users_rc.read_text().count("try-import %workspace%/lre.bazelrc") == 1
        doctor = home.run("doctor", "--json", cwd=repo)
        assert '"bazel config"' in doctor.stdout
        assert "does not import lre.bazelrc" not in doctor.stdout
        # A second repository with a tracked .bazelrc: the line already in
        # ~/.bazelrc serves it, and lre says so rather than nothing.
        second = tmp_path / "second"
        second.mkdir()
        _committed(second, {".bazelrc": "build --verbose_failures\n", "WORKSPACE": ""})
        linked = home.run("link", cwd=second)
        assert linked.returncode == 0, linked.stderr
        assert f"Bazel reads lre.bazelrc through {users_rc}" in linked.stderr
        assert users_rc.read_text().count("try-import %workspace%/lre.bazelrc") == 1
    unlinked = home.run("unlink", cwd=repo)
    assert unlinked.returncode == 0, unlinked.stderr
    assert f"removed {repo / '.bazelrc'}" not in unlinked.stdout
    # The git exclude file stays (only lre's lines go), and unlink says just that.
    exclude = repo / ".git" / "info" / "exclude"
    assert exclude.exists()
    assert f"removed {exclude}\n" not in unlinked.stdout
    assert f"removed lre's lines from {exclude}" in unlinked.stdout
    # ~/.bazelrc keeps its line while another linked repository reads through it, and says so.
    assert f"kept `try-import %workspace%/lre.bazelrc` in {users_rc}" in unlinked.stderr
    assert (repo / ".bazelrc").read_text() == "build --verbose_failures"
    assert _git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    # The last repository that needs it unlinked: ~/.bazelrc is as it was, byte for byte.
    unlinked = home.run("unlink", cwd=second)
    assert unlinked.returncode == 0, unlinked.stderr
    assert f"removed lre's lines from {users_rc}" in unlinked.stdout
    assert users_rc.read_text() == "startup --host_jvm_args=-Xmx2g"


def test_user_bazelrc_convention_and_the_users_own_import(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    rc = "build --verbose_failures\ntry-import %workspace%/user.bazelrc\n"
    _committed(repo, {".bazelrc": rc, ".gitignore": "/user.bazelrc\n", "MODULE.bazel": ""})
    with detached(home, repo) as started:
        user = repo / "user.bazelrc"
        assert f"added `try-import %workspace%/lre.bazelrc` to {user}" in started.stdout
        assert "imports user.bazelrc, which git does not track" in started.stderr
        assert (repo / ".bazelrc").read_text() == rc
        assert _git(repo, "status", "--porcelain", "--untracked-files=all") == ""
        assert not (tmp_path / "home" / ".bazelrc").exists()
    unlinked = home.run("unlink", cwd=repo)
    assert f"removed {repo / 'user.bazelrc'}" in unlinked.stdout  # lre created it
    assert not (repo / "user.bazelrc").exists()

    other = tmp_path / "other"
    other.mkdir()
    (other / "WORKSPACE").write_text("")
    own = "import %workspace%/lre.bazelrc\n"  # the user's own line, not lre's
    (other / ".bazelrc").write_text(own)
    with detached(home, other) as started:
        assert (other / ".bazelrc").read_text() == own  # no duplicate added
        assert "added `try-import" not in started.stdout
    unlinked = home.run("unlink", cwd=other)
    assert (other / ".bazelrc").read_text() == own
    assert ".bazelrc" not in unlinked.stdout.replace("lre.bazelrc", "")


def test_deleting_the_default_line_makes_lre_opt_in_for_good(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    rc = repo / "lre.bazelrc"
    with detached(home, repo):
        text = rc.read_text()
        assert "\nbuild --config=lre\n" in text
        rc.write_text(text.replace("\nbuild --config=lre\n", "\n"))  # what the file offers
        assert home.run("link", cwd=repo).returncode == 0
        assert "\nbuild --config=lre\n" not in rc.read_text()
        assert "build:lre --remote_executor=grpc://" in rc.read_text()
    assert "--remote_executor" not in rc.read_text()  # inert while lre is stopped
    with detached(home, repo):  # a later `lre up` (another repository's, too)
        assert "build:lre --remote_executor=grpc://" in rc.read_text()
        assert "\nbuild --config=lre\n" not in rc.read_text()
        assert "Opt-in here" in rc.read_text()
