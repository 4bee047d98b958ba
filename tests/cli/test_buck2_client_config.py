"""``lre up``'s Buck2 client config in the layouts ``buck2 init`` and users make."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.cli._buck2_client import write_buck2
from lre.cli._buckconfig import read_buckconfig
from lre.cli._client_config import unlink
from lre.cli._client_files import ClientConfigError
from lre.cli._client_settings import ClientSettings
from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.cli.buck2_init import BUCKCONFIG, buck2_init
from tests.cli.running_lre import detached, private_home

SETTINGS = ClientSettings(host="127.0.0.1", port=50999, instance_name="main", cpus=2)
TOOLCHAINS = Path(__file__).resolve().parents[2] / "toolchains" / "buck2"


def _effective(repo: Path, home: Path) -> dict[str, str | None]:
    config = read_buckconfig(repo, home=home, etc_root=repo / "no-etc")
    return {
        "platform": config.get("build", "execution_platforms"),
        "engine": config.get("buck2_re_client", "engine_address"),
        "cas": config.get("buck2_re_client", "cas_address"),
    }


def test_buck2_init_repo_gets_lre_platform_in_the_file_that_wins(tmp_path: Path) -> None:
    repo = buck2_init(tmp_path / "repo")
    home = tmp_path / "home"
    report = write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    # As Buck2 reads it now: lre's platform and lre's RE endpoints.
    assert _effective(repo, home) == {
        "platform": "root//lre_platforms:lre",
        "engine": "grpc://127.0.0.1:50999",
        "cas": "grpc://127.0.0.1:50999",
    }
    assert "remote_enabled = True" in (repo / "lre_platforms" / "defs.bzl").read_text()
    assert (repo / "lre_platforms" / "BUCK").exists()
    notes = " ".join(report.warnings)
    assert "prelude//platforms:default (.buckconfig:26) runs every action locally" in notes
    assert ".buckconfig.local" in notes
    # Nothing of the user's was changed, and unlink restores the repository.
    assert (repo / ".buckconfig").read_text() == BUCKCONFIG
    unlink(repo)
    assert not (repo / ".buckconfig.local").exists()
    assert not (repo / ".buckconfig.d").exists()
    assert not (repo / "lre_platforms").exists()
    assert _effective(repo, home)["platform"] == "prelude//platforms:default"


def test_rerunning_is_stable_and_reads_past_lre_own_files(tmp_path: Path) -> None:
    repo = buck2_init(tmp_path / "repo", git=True)
    home = tmp_path / "home"
    write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    before = {p: p.read_text() for p in repo.rglob("*") if p.is_file()}
    report = write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    assert report.written == []
    assert {p: p.read_text() for p in repo.rglob("*") if p.is_file()} == before
    # --buck-local moves every key into the .buckconfig.local block.
    write_buck2(repo, SETTINGS, local=True, platform_source=TOOLCHAINS, home=home)
    assert not (repo / ".buckconfig.d" / "lre.buckconfig").exists()
    local = (repo / ".buckconfig.local").read_text()
    assert local.count("execution_platforms = root//lre_platforms:lre") == 1
    assert local.count("engine_address = grpc://127.0.0.1:50999") == 1
    assert _effective(repo, home)["engine"] == "grpc://127.0.0.1:50999"


def test_buck2_init_repo_whose_buckconfig_starts_with_an_include(tmp_path: Path) -> None:
    # The same settings moved into an included file: still seen as local-only.
    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    (repo / "config" / "init.bcfg").write_text(BUCKCONFIG)
    (repo / ".buckconfig").write_text("<file:config/init.bcfg>\n")
    home = tmp_path / "home"
    write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    assert _effective(repo, home)["platform"] == "root//lre_platforms:lre"


def test_platform_set_in_a_dropin_or_local_file_is_found(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".buckconfig.d").mkdir(parents=True)
    (repo / ".buckconfig").write_text("[cells]\n  main = .\n  prelude = prelude\n")
    (repo / ".buckconfig.d" / "platform").write_text(
        "[build]\nexecution_platforms = prelude//platforms:default\n"
    )
    home = tmp_path / "home"
    report = write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    assert _effective(repo, home)["platform"] == "main//lre_platforms:lre"
    assert any(".buckconfig.d/platform:2" in w for w in report.warnings)


def test_an_unknown_platform_is_left_alone_with_exact_instructions(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".buckconfig").write_text(
        "[cells]\nroot = .\n[build]\nexecution_platforms = root//platforms:mine\n"
    )
    home = tmp_path / "home"
    report = write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    assert not (repo / "lre_platforms").exists()
    assert not (repo / ".buckconfig.local").exists()
    (note,) = [w for w in report.warnings if "root//platforms:mine" in w]
    assert "remote_enabled = True" in note
    assert f"copy {TOOLCHAINS} to {repo / 'lre_platforms'}" in note
    assert "execution_platforms = root//lre_platforms:lre" in note
    assert _effective(repo, home)["platform"] == "root//platforms:mine"


def test_re_client_keys_that_override_lre_are_named_with_file_and_line(tmp_path: Path) -> None:
    repo = buck2_init(tmp_path / "repo")
    (repo / ".buckconfig.local").write_text(
        "[buck2_re_client]\n  engine_address = grpc://cluster.example:443\n"
    )
    home = tmp_path / "home"
    report = write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    (warning,) = [w for w in report.warnings if "engine_address" in w]
    assert warning.startswith(
        ".buckconfig.local:2 sets [buck2_re_client] engine_address = grpc://cluster.example:443"
    )
    assert "remove that line" in warning
    # cas_address is lre's: the other keys are not reported.
    assert not any("cas_address" in w for w in report.warnings)
    assert _effective(repo, home)["cas"] == "grpc://127.0.0.1:50999"


def test_lre_up_in_a_buck2_init_repo(tmp_path: Path) -> None:
    repo = buck2_init(tmp_path / "repo", git=True)
    (repo / ".buckconfig.local").write_text("[buck2_re_client]\ntls = true\n")
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root"))
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home)}
    port = free_port()
    started = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo, env=env
    )
    try:
        assert started.returncode == 0, started.stderr
        log = (tmp_path / "lre-root" / "state" / "lre.log").read_text()
        out = started.stdout + started.stderr + log
        assert "prelude//platforms:default (.buckconfig:26) runs every action locally" in out
        assert ".buckconfig.local:2 sets [buck2_re_client] tls = true" in out
        effective = _effective(repo, home)
        assert effective["platform"] == "root//lre_platforms:lre"
        assert effective["engine"] == f"grpc://127.0.0.1:{port}"
        defs = (repo / "lre_platforms" / "defs.bzl").read_text()
        assert "remote_enabled = True" in defs
    finally:
        down = run_lre("down", "--config", str(config), cwd=repo, env=env)
    assert down.returncode == 0, down.stderr
    unlinked = run_lre("unlink", cwd=repo, env=env)
    assert unlinked.returncode == 0, unlinked.stderr
    assert (repo / ".buckconfig.local").read_text() == "[buck2_re_client]\ntls = true\n"
    assert not (repo / "lre_platforms").exists()


def test_a_configuration_buck2_refuses_is_reported_and_left_alone(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".buckconfig").write_text("<file:missing.bcfg>\n")
    with pytest.raises(ClientConfigError, match=r"\.buckconfig:1: included file .*missing"):
        write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=tmp_path)
    assert sorted(p.name for p in repo.iterdir()) == [".buckconfig"]


def test_buildfile_name_is_the_repositorys_and_the_block_header_is_truthful(
    tmp_path: Path,
) -> None:
    repo = buck2_init(tmp_path / "repo")
    home = tmp_path / "home"
    with (repo / ".buckconfig").open("a") as f:
        f.write("\n[buildfile]\n  name = TARGETS,BUCK\n")
    write_buck2(repo, SETTINGS, local=False, platform_source=TOOLCHAINS, home=home)
    assert (repo / "lre_platforms" / "TARGETS").read_text().count("lre_platforms(") == 1
    assert not (repo / "lre_platforms" / "BUCK").exists()
    local = (repo / ".buckconfig.local").read_text()
    assert "--buck-local" not in local  # it was not given
    assert "# >>> lre (written by `lre up`; `lre unlink` removes this block) >>>" in local
    # A block an older lre wrote (with the old header) is still lre's.
    old = "# >>> lre (written by `lre up --buck-local`; `lre unlink` removes this block) >>>"
    (repo / ".buckconfig.local").write_text(local.replace(local.splitlines()[0], old))
    unlink(repo)
    assert not (repo / ".buckconfig.local").exists()
    assert not (repo / "lre_platforms").exists()


def test_lre_up_gives_buck2_a_host_constrained_platform_without_properties(
    tmp_path: Path,
) -> None:
    # A `buck2 init` repository (the prelude aliased as `config`) and one whose
    # build files are TARGETS and which names no `config` cell.
    home = private_home(tmp_path)
    repo = buck2_init(tmp_path / "repo")
    other = tmp_path / "other"
    other.mkdir()
    (other / ".buckconfig").write_text(
        "[cells]\n  root = .\n  prelude = prelude\n\n[buildfile]\n  name = TARGETS\n"
    )
    with detached(home, repo):
        linked = home.run("link", "--repo", str(other), cwd=tmp_path)
        assert linked.returncode == 0, linked.stderr
    build = (repo / "lre_platforms" / "BUCK").read_text()
    assert '"config//os:linux"' in build and '"config//cpu:x86_64"' in build
    assert "constraints = [_OS, _CPU]" in build
    defs = (repo / "lre_platforms" / "defs.bzl").read_text()
    assert "constraints.update(dep[ConfigurationInfo].constraints)" in defs
    # No property of its own: they enter every action's key.
    code = defs.split('"""', 2)[2]
    assert "OSFamily" not in code and "cpu_count" not in code
    assert "remote_execution_properties = dict(ctx.attrs.properties)" in defs
    # The file Buck2 reads there, with the constraints in the prelude.
    assert not (other / "lre_platforms" / "BUCK").exists()
    targets = (other / "lre_platforms" / "TARGETS").read_text()
    assert '"prelude//os:linux"' in targets and "config//" not in targets
