from __future__ import annotations

from pathlib import Path

import pytest

from lre.cli._client_config import (
    MARKER,
    TRY_IMPORT,
    ClientConfigError,
    ClientSettings,
    bazelrc_text,
    find_repo_root,
    parse_bazel_version,
    unlink,
    write_bazel,
    write_buck2,
)

SETTINGS = ClientSettings(host="127.0.0.1", port=50999, instance_name="main", cpus=2)


def test_find_repo_root_takes_the_nearest_marker(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    inner = tmp_path / "sub" / "proj"
    inner.mkdir(parents=True)
    (inner / "WORKSPACE").write_text("")
    deep = inner / "a" / "b"
    deep.mkdir(parents=True)
    assert find_repo_root(deep) == inner.resolve()
    assert find_repo_root(tmp_path / "sub") == tmp_path.resolve()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("bazel 7.1.2\n", (7, 1, 2)), ("bazel no_version\n", (4, 2, 3)), ("bazel 6.4", (6, 4, 0))],
)
def test_parse_bazel_version(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_bazel_version(text) == expected


def test_bazelrc_flags_follow_the_bazel_version() -> None:
    old = bazelrc_text(SETTINGS, (4, 2, 3))
    assert "build:lre --remote_executor=grpc://127.0.0.1:50999" in old
    assert "build:lre --remote_instance_name=main" in old
    assert "build:lre --remote_default_exec_properties=cpu_count=1" in old
    assert "build:lre --spawn_strategy=remote,sandboxed,local" in old
    assert "build:lre --incompatible_strict_action_env" in old
    assert "compression" not in old
    assert "build:lre --remote_download_toplevel" in old
    assert "remote_download_toplevel" not in bazelrc_text(SETTINGS, (3, 7, 2))
    assert "\nbuild --config=lre\n" in old
    mid = bazelrc_text(SETTINGS, (6, 0, 0))
    assert "build:lre --experimental_remote_cache_compression" in mid
    assert "build:lre --remote_download_toplevel" in mid
    new = bazelrc_text(SETTINGS, (7, 0, 0))
    assert "build:lre --remote_cache_compression" in new
    assert "experimental_remote_cache_compression" not in new


def test_write_bazel_is_idempotent_and_keeps_user_lines(tmp_path: Path) -> None:
    (tmp_path / ".bazelrc").write_text("build --verbose_failures")
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    rc = (tmp_path / ".bazelrc").read_text()
    assert rc.count(TRY_IMPORT) == 1
    assert rc.startswith("build --verbose_failures\n")
    assert (tmp_path / "lre.bazelrc").read_text().startswith(MARKER)
    report = unlink(tmp_path)
    assert (tmp_path / ".bazelrc").read_text() == "build --verbose_failures\n"
    assert not (tmp_path / "lre.bazelrc").exists()
    assert tmp_path / "lre.bazelrc" in report.removed


def test_write_bazel_without_edit_only_warns(tmp_path: Path) -> None:
    report = write_bazel(tmp_path, SETTINGS, edit_bazelrc=False, version=None)
    assert not (tmp_path / ".bazelrc").exists()
    assert any(TRY_IMPORT in w for w in report.warnings)


def test_user_file_named_like_ours_is_never_clobbered(tmp_path: Path) -> None:
    (tmp_path / "lre.bazelrc").write_text("build --mine\n")
    with pytest.raises(ClientConfigError, match="not written by lre"):
        write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=None)
    assert (tmp_path / "lre.bazelrc").read_text() == "build --mine\n"
    unlink(tmp_path)
    assert (tmp_path / "lre.bazelrc").read_text() == "build --mine\n"


def _platform_source(tmp_path: Path) -> Path:
    src = tmp_path / "platform-src"
    src.mkdir()
    (src / "BUCK").write_text('load(":defs.bzl", "lre_platform")\nlre_platform(name = "lre")\n')
    (src / "defs.bzl").write_text("def lre_platform(**kwargs):\n    pass\n")
    return src


def test_buck2_config_and_platform_then_unlink(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".buckconfig").write_text("[cells]\nroot = .\nprelude = prelude\n")
    report = write_buck2(repo, SETTINGS, local=False, platform_source=_platform_source(tmp_path))
    text = (repo / ".buckconfig.d" / "lre.buckconfig").read_text()
    assert "engine_address = grpc://127.0.0.1:50999" in text
    assert "tls = false" in text
    assert "execution_platforms = root//lre_platforms:lre" in text
    assert any("buck2 kill" in w for w in report.warnings)
    unlink(repo)
    assert not (repo / ".buckconfig.d").exists()
    assert not (repo / "lre_platforms").exists()
    assert (repo / ".buckconfig").read_text() == "[cells]\nroot = .\nprelude = prelude\n"


def test_buck2_conflicting_keys_warn_and_local_block_round_trips(tmp_path: Path) -> None:
    (tmp_path / ".buckconfig").write_text(
        "[buck2_re_client]\nengine_address = grpc://elsewhere:1\n[build]\nexecution_platforms = x\n"
    )
    report = write_buck2(tmp_path, SETTINGS, local=False, platform_source=None)
    assert any("--buck-local" in w and "engine_address" in w for w in report.warnings)
    (tmp_path / ".buckconfig.local").write_text("[user]\nkey = 1\n")
    write_buck2(tmp_path, SETTINGS, local=True, platform_source=None)
    write_buck2(tmp_path, SETTINGS, local=True, platform_source=None)
    local = (tmp_path / ".buckconfig.local").read_text()
    assert local.count("engine_address = grpc://127.0.0.1:50999") == 1
    assert "execution_platforms" not in local
    unlink(tmp_path)
    assert (tmp_path / ".buckconfig.local").read_text() == "[user]\nkey = 1\n"
