"""Reading Buck2's configuration as Buck2 does (lre.cli._buckconfig)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.cli._buckconfig import (
    BuckConfigError,
    canonical_label,
    config_files,
    read_buckconfig,
    root_cell_name,
    runs_only_locally,
)
from tests.cli.buck2_init import buck2_init


def _read(repo: Path, home: Path | None = None) -> object:
    return read_buckconfig(repo, home=home or repo.parent / "home", etc_root=repo.parent / "etc")


def test_buck2_init_config_names_the_local_only_default_platform(tmp_path: Path) -> None:
    repo = buck2_init(tmp_path / "repo", git=True)
    config = read_buckconfig(repo, home=tmp_path / "home", etc_root=tmp_path / "etc")
    assert config.get("build", "execution_platforms") == "prelude//platforms:default"
    assert config.winner("build", "execution_platforms").where(repo) == ".buckconfig:26"
    # Continued lines are joined: the detector spec is one value.
    spec = config.get("parser", "target_platform_detector_spec")
    assert spec is not None and spec.count("->prelude//platforms:default") == 3
    assert config.get("project", "ignore") == ".git"
    assert root_cell_name(config) == "root"
    assert runs_only_locally(config, "prelude//platforms:default")
    # `config` is an alias of the prelude cell in buck2 init's [cell_aliases].
    assert runs_only_locally(config, "config//platforms:default")
    assert not runs_only_locally(config, "root//lre_platforms:lre")
    assert canonical_label(config, "//lre_platforms:lre") == ("root", "lre_platforms:lre")


def test_precedence_dropins_then_buckconfig_then_local(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".buckconfig.d" / "sub").mkdir(parents=True)
    (repo / ".buckconfig.d" / "a.buckconfig").write_text("[s]\nk = dropin-a\nonly_d = a\n")
    (repo / ".buckconfig.d" / "sub" / "z").write_text("[s]\nonly_d = sub-z\n")
    (repo / ".buckconfig.d" / "b").write_text("[s]\nonly_d = b\n")
    (repo / ".buckconfig").write_text("[s]\nk = main\nm = main\n")
    (repo / ".buckconfig.local").write_text("[s]\nk = local\n")
    home = tmp_path / "home"
    (home / ".buckconfig.d").mkdir(parents=True)
    (home / ".buckconfig.d" / "user").write_text("[s]\nk = home-d\nh = home-d\n")
    (home / ".buckconfig.local").write_text("[s]\nh = home-local\n")
    etc = tmp_path / "etc"
    (etc / "etc").mkdir(parents=True)
    (etc / "etc" / "buckconfig").write_text("[s]\ne = etc\nh = etc\n")
    config = read_buckconfig(repo, home=home, etc_root=etc)
    assert config.get("s", "k") == "local"
    assert config.get("s", "m") == "main"
    # Directory entries in name order, a subdirectory walked where it sorts.
    assert config.get("s", "only_d") == "sub-z"
    assert config.get("s", "h") == "home-local"
    assert config.get("s", "e") == "etc"
    names = [
        p.relative_to(tmp_path).as_posix() for p in config_files(repo, home=home, etc_root=etc)
    ]
    assert names == [
        "etc/etc/buckconfig",
        "home/.buckconfig.d/user",
        "home/.buckconfig.local",
        "repo/.buckconfig.d/a.buckconfig",
        "repo/.buckconfig.d/b",
        "repo/.buckconfig.d/sub/z",
        "repo/.buckconfig",
        "repo/.buckconfig.local",
    ]


def test_a_file_starting_with_an_include_is_read(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    (repo / ".buckconfig").write_text(
        "<file:config/common.bcfg>\n"
        "<?file:config/missing.bcfg>\n"
        "  key_after_include = in-the-included-section\n"
        "[build]\n"
        "  mode = main\n"
    )
    (repo / "config" / "common.bcfg").write_text(
        "[build]\nexecution_platforms = root//platforms:remote\n<file:../shared/more>\n"
    )
    (repo / "shared").mkdir()
    (repo / "shared" / "more").write_text("[more]\nx = 1\n")
    config = _read(repo)
    assert config.get("build", "execution_platforms") == "root//platforms:remote"
    assert config.get("build", "mode") == "main"
    assert config.get("more", "x") == "1"
    # The section in effect leaves the included file with the reader.
    assert config.get("more", "key_after_include") == "in-the-included-section"
    assert config.winner("more", "x").where(repo) == "shared/more:2"


def test_absolute_include_and_references(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shared = tmp_path / "shared.bcfg"
    shared.write_text("[re]\nhost = 127.0.0.1:4464\n")
    (repo / ".buckconfig").write_text(
        f"<file:{shared}>\n[buck2_re_client]\nengine_address = grpc://$(config re.host)\n"
    )
    assert _read(repo).get("buck2_re_client", "engine_address") == "grpc://127.0.0.1:4464"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<file:nowhere.bcfg>\n", "included file .*nowhere.bcfg does not exist"),
        ("[build\n", r"section '\[build' has no closing"),
        ("[s]\njust words\n", "'just words' is neither"),
        ("[s]\n = value\n", "sets a key with no name"),
        ("<file:.buckconfig>\n", "includes itself"),
        ("[s]\na = $(config s.b)\nb = $(config s.a)\n", "reference cycle"),
    ],
)
def test_what_buck2_refuses_is_an_error_naming_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".buckconfig").write_text(text)
    with pytest.raises(BuckConfigError, match=message) as info:
        config = _read(repo)
        config.get("s", "a")
    assert ".buckconfig:" in str(info.value)


def test_comments_and_section_trailing_comment(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".buckconfig").write_text(
        "# comment\n; also a comment\n[build] # oss-enable\n  k = v # stays in the value\n"
    )
    assert _read(repo).get("build", "k") == "v # stays in the value"


def test_a_file_that_is_not_utf8_is_an_error_not_a_crash(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".buckconfig").write_bytes(b"[cells]\nroot = \xff\n")
    with pytest.raises(BuckConfigError, match=r"\.buckconfig: cannot read it"):
        _read(repo)
