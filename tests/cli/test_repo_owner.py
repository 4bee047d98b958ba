"""A second lre (another state directory) does not take over a repository a live
lre serves, and stopping it leaves that repository's config alone."""

from __future__ import annotations

from pathlib import Path

from tests.cli.running_lre import bazel_repo, detached, private_home


def test_a_second_lre_does_not_take_a_repository_over(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = private_home(tmp_path / "one")
    second = private_home(tmp_path / "two")
    repo = bazel_repo(tmp_path)
    rc = repo / "lre.bazelrc"
    with detached(first, repo):
        served = rc.read_text()
        assert f"grpc://127.0.0.1:{first.grpc_port}" in served
        with detached(second, tmp_path):
            taken = second.run("link", "--repo", str(repo), cwd=tmp_path)
            assert taken.returncode == 1, taken.stdout
            assert f"is pointed at another lre, which answers on 127.0.0.1:{first.grpc_port}" in (
                taken.stderr
            )
            assert rc.read_text() == served
        assert rc.read_text() == served  # the second one's down emptied nothing
    assert "--remote_executor" not in rc.read_text()
    # The first one stopped: taking the repository over is fine now.
    with detached(second, tmp_path):
        assert second.run("link", "--repo", str(repo), cwd=tmp_path).returncode == 0
        assert f"grpc://127.0.0.1:{second.grpc_port}" in rc.read_text()
