"""A repository whose tracked ``.bazelrc`` names a team cache, linked to lre, with a real Bazel.

The team cache is a second lre (standing in for bazel-remote or a cluster's
CAS). The repository's committed ``.bazelrc`` says ``build
--remote_cache=grpc://<team>``; ``lre up`` cannot edit it, so the try-import
goes into the user's own ``~/.bazelrc``, which Bazel reads after it. lre's
``lre.bazelrc`` must then take Bazel's remote endpoints: with the team cache
reachable Bazel would otherwise upload inputs there and send Execute to lre
("blob(s) missing from the CAS"), and with it gone ("Connection refused")
every build would fail. ``lre unlink`` must leave the repository as it was.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.e2e._bazel import BazelSession, require_bazel
from tests.e2e._workspace import Workspace, generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _runs_right(ws: Workspace) -> None:
    out = subprocess.run([ws.binary, "50"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ws.expected_checksum(50)


def test_a_tracked_team_cache_builds_through_lre_reachable_or_not(tmp_path: Path) -> None:
    require_bazel()
    ws = generate_workspace(tmp_path / "repo", modules=2, funcs=1, seed=4)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    team_env = {**os.environ, "HOME": str(tmp_path / "team-home")}
    team_port = free_port()
    team_config = tmp_path / "team.json5"
    team_config.write_text(app_config_text(tmp_path / "team-root", status_port=free_port()))
    team = run_lre(
        "up", "--detach", "--no-client-config", "--config", str(team_config),
        "--port", str(team_port), cwd=tmp_path, env=team_env,
    )  # fmt: skip
    assert team.returncode == 0, team.stdout + team.stderr
    team_address = f"grpc://127.0.0.1:{team_port}"
    bazelrc = ws.root / ".bazelrc"
    bazelrc.write_text(bazelrc.read_text() + f"build --remote_cache={team_address}\n")
    team_line = len(bazelrc.read_text().splitlines())
    _git(ws.root, "init", "-q")
    _git(ws.root, "add", "-A")
    _git(ws.root, "commit", "-q", "-m", "the team's repository")
    before = bazelrc.read_bytes()

    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            status_port=free_port(),
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    up = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(free_port()),
        cwd=ws.root, env=env,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        said = up.stdout + up.stderr
        # What lre found, where, and what it did and offers about it.
        assert f"{bazelrc}:{team_line}: `build --remote_cache={team_address}`" in said, said
        assert "builds go to lre" in said, said
        assert f"LRE_UPSTREAM={team_address}" in said, said
        assert "try-import %workspace%/lre.bazelrc" in (home / ".bazelrc").read_text()

        doctor = run_lre("doctor", "--config", str(config), cwd=ws.root, env=env, timeout=600)
        team_row = [ln for ln in doctor.stdout.splitlines() if "team cache" in ln]
        assert team_row and "OK" in team_row[0], doctor.stdout
        assert f"{bazelrc}:{team_line}" in doctor.stdout, doctor.stdout

        with BazelSession(ws.root, tmp_path / "bazel", home=home) as bazel:
            summary = bazel.build([ws.target]).check()
            assert summary.count("remote") == ws.spawn_count, summary
            _runs_right(ws)

            # The team cache goes away (VPN off): the build still goes through lre.
            down = run_lre("down", "--config", str(team_config), cwd=tmp_path, env=team_env)
            assert down.returncode == 0, down.stdout + down.stderr
            bazel.clean()
            again = bazel.build([ws.target], ["--noremote_accept_cached"]).check()
            assert again.count("remote") == ws.spawn_count, again
            _runs_right(ws)

        unlink = run_lre("unlink", "--config", str(config), cwd=ws.root, env=env)
        assert unlink.returncode == 0, unlink.stdout + unlink.stderr
        assert bazelrc.read_bytes() == before
        # Only Bazel's own convenience links are new; nothing of lre's is left.
        changes = _git(ws.root, "status", "--porcelain", "--ignored=no").splitlines()
        assert [c for c in changes if not c.startswith("?? bazel-")] == []
        home_rc = home / ".bazelrc"
        assert not home_rc.exists() or "lre.bazelrc" not in home_rc.read_text()
    finally:
        run_lre("down", "--now", "--config", str(config), cwd=ws.root, env=env)
        run_lre("down", "--now", "--config", str(team_config), cwd=tmp_path, env=team_env)
