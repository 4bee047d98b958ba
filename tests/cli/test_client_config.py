from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lre.cli._bazel_client import bazelrc_text, parse_bazel_version, repository_id, write_bazel
from lre.cli._bazelrc_import import TRY_IMPORT
from lre.cli._buck2_client import buckconfig_text, write_buck2
from lre.cli._client_config import find_repo_root, make_inert, owned_paths, unlink
from lre.cli._client_files import MARKER, ClientConfigError
from lre.cli._client_settings import ClientSettings
from lre.cli._daemon import RunningServer
from lre.cli._link import client_settings_for
from tests.cli.buck2_init import buck2_init
from tests.cli.test_buck2_client_config import TOOLCHAINS

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
    assert "build:lre --spawn_strategy=remote,sandboxed,local" in old
    assert "compression" not in old
    assert "eviction_retries" not in old  # Bazel 6.2 added it
    assert "\nbuild --config=lre\n" in old
    mid = bazelrc_text(SETTINGS, (6, 0, 0))
    assert "build:lre --experimental_remote_cache_compression" in mid
    assert "eviction_retries" not in mid
    recovering = bazelrc_text(SETTINGS, (6, 2, 0))
    assert "build:lre --experimental_remote_cache_eviction_retries=5" in recovering
    new = bazelrc_text(SETTINGS, (7, 0, 0))
    assert "build:lre --remote_cache_compression" in new
    assert "experimental_remote_cache_compression" not in new
    assert "build:lre --experimental_remote_cache_eviction_retries=5" in new
    # From 8.0 five retries are Bazel's default.
    assert "eviction_retries" not in bazelrc_text(SETTINGS, (8, 0, 0))


#: Flags that change an action's key (environment, platform, arguments) or
#: are build options (toggling one discards Bazel's analysis cache).
KEY_CHANGING = (
    "--incompatible_strict_action_env",
    "--action_env",
    "--host_action_env",
    "--remote_download_",
    "--experimental_inmemory",
    "--remote_default_platform_properties",
    "--remote_default_exec_properties",
    "--define",
    "--copt",
    "--platforms",
    "--host_platform",
    "--extra_execution_platforms",
    "--compilation_mode",
)


@pytest.mark.parametrize("version", [(4, 2, 3), (5, 4, 0), (6, 4, 0), (7, 1, 0), (9, 0, 0)])
def test_no_line_lre_writes_changes_an_action_key(version: tuple[int, int, int]) -> None:
    text = bazelrc_text(SETTINGS, version)
    flags = [line.split(maxsplit=1)[1] for line in text.splitlines() if line.startswith("build")]
    assert flags
    for flag in flags:
        assert not flag.startswith(KEY_CHANGING), (version, flag)


def test_platform_properties_only_when_configured() -> None:
    chosen = dataclasses.replace(SETTINGS, exec_properties=(("OSFamily", "linux"),))
    # One single-valued flag: `--config=lre` on top of the default line
    # repeats it harmlessly (a repeated exec property crashes Bazel 4.2.3).
    assert (
        "build:lre --remote_default_platform_properties=\"properties:{name:'OSFamily' "
        "value:'linux'}\""
    ) in bazelrc_text(chosen, (4, 2, 3))
    # Bazel 9 deleted --remote_default_platform_properties.
    nine = bazelrc_text(chosen, (9, 0, 0))
    assert "build:lre --remote_default_exec_properties=OSFamily=linux" in nine
    assert "remote_default_platform_properties" not in nine


def test_bazelrc_says_honestly_when_bazel_is_missing() -> None:
    missing = bazelrc_text(SETTINGS, None)
    assert "detected" not in missing and "4.2.3 found" not in missing
    assert "Bazel was not found on PATH" in missing
    assert "Bazel 7.1.0 found" in bazelrc_text(SETTINGS, (7, 1, 0))


def test_client_config_follows_a_tls_and_token_listener(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        SETTINGS, tls=True, tls_ca_file="/etc/lre/cert.pem", auth_token="s3cret"
    )
    rc = bazelrc_text(settings, (4, 2, 3))
    assert "build:lre --remote_executor=grpcs://127.0.0.1:50999" in rc
    assert "build:lre --tls_certificate=/etc/lre/cert.pem" in rc
    assert 'build:lre --remote_header="authorization=Bearer s3cret"' in rc
    buck = buckconfig_text(settings, None)
    assert "engine_address = grpc://127.0.0.1:50999" in buck  # Buck2: TLS only via `tls`
    assert "tls = true" in buck
    assert "tls_ca_certs = /etc/lre/cert.pem" in buck
    assert "http_headers = authorization: Bearer s3cret" in buck
    # one list (Buck2 splits it at commas), the repository's name made safe
    # for Buck2's $VAR substitution
    two = buckconfig_text(settings, None, "my $repo,x-1a2b3c4d")
    assert (
        "http_headers = authorization: Bearer s3cret, x-lre-repository: my__repo_x-1a2b3c4d" in two
    )
    report = write_bazel(tmp_path, settings, edit_bazelrc=True, version=(4, 2, 3))
    assert (tmp_path / "lre.bazelrc").stat().st_mode & 0o777 == 0o600
    assert any("token" in w for w in report.warnings)


def test_client_config_for_a_unix_socket_and_ipv6(tmp_path: Path) -> None:
    unix = ClientSettings(host="", port=0, unix_socket="/run/lre.sock", cpus=2)
    assert "build:lre --remote_executor=unix:///run/lre.sock" in bazelrc_text(unix, (4, 2, 3))
    (tmp_path / ".buckconfig").write_text("[cells]\nroot = .\n")
    report = write_buck2(tmp_path, unix, local=False, platform_source=None)
    assert not (tmp_path / ".buckconfig.d").exists()
    assert any("Unix socket" in w for w in report.warnings)
    v6 = ClientSettings(host="::1", port=4000, cpus=2)
    assert "--remote_executor=grpc://[::1]:4000" in bazelrc_text(v6, (4, 2, 3))


def test_unlink_keeps_a_try_import_line_the_user_wrote(tmp_path: Path) -> None:
    mine = "build --verbose_failures\ntry-import %workspace%/lre.bazelrc\n"
    (tmp_path / ".bazelrc").write_text(mine)
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    assert (tmp_path / ".bazelrc").read_text() == mine  # already imported: nothing added
    unlink(tmp_path)
    assert (tmp_path / ".bazelrc").read_text() == mine
    assert not (tmp_path / "lre.bazelrc").exists()


def test_make_inert_leaves_comments_only_and_write_restores(tmp_path: Path) -> None:
    # `buck2 init`'s platform runs locally, so lre also names its own in
    # .buckconfig.local: that block must go inert too.
    buck2_init(tmp_path)
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    write_buck2(tmp_path, SETTINGS, local=False, platform_source=TOOLCHAINS, home=tmp_path / "home")
    report = make_inert(tmp_path)
    assert set(report.written) == {
        tmp_path / "lre.bazelrc",
        tmp_path / ".buckconfig.d" / "lre.buckconfig",
        tmp_path / ".buckconfig.local",
    }
    for path in report.written:
        settings_lines = [
            line
            for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        assert settings_lines == [], path
    assert make_inert(tmp_path).written == []  # already inert
    assert TRY_IMPORT in (tmp_path / ".bazelrc").read_text()  # the import still finds a file
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    assert "--remote_executor=grpc://127.0.0.1:50999" in (tmp_path / "lre.bazelrc").read_text()


def test_owned_paths_names_only_what_lre_alone_wrote(tmp_path: Path) -> None:
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    assert set(owned_paths(tmp_path)) == {tmp_path / "lre.bazelrc", tmp_path / ".bazelrc"}
    (tmp_path / ".bazelrc").write_text("build --mine\n" + (tmp_path / ".bazelrc").read_text())
    assert owned_paths(tmp_path) == [tmp_path / "lre.bazelrc"]


def test_write_bazel_is_idempotent_and_keeps_user_lines(tmp_path: Path) -> None:
    (tmp_path / ".bazelrc").write_text("build --verbose_failures")
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    write_bazel(tmp_path, SETTINGS, edit_bazelrc=True, version=(4, 2, 3))
    rc = (tmp_path / ".bazelrc").read_text()
    assert rc.count(TRY_IMPORT) == 1
    assert rc.startswith("build --verbose_failures\n")
    assert (tmp_path / "lre.bazelrc").read_text().startswith(MARKER)
    report = unlink(tmp_path)
    # Byte for byte: the file had no final newline, and has none again.
    assert (tmp_path / ".bazelrc").read_text() == "build --verbose_failures"
    assert not (tmp_path / "lre.bazelrc").exists()
    assert tmp_path / "lre.bazelrc" in report.removed
    assert report.cleaned == [tmp_path / ".bazelrc"]  # kept, not "removed"
    assert tmp_path / ".bazelrc" not in report.removed


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
    # the repository's name for the learner, as for Bazel, and no secret
    # in the file, so it stays readable
    assert f"http_headers = x-lre-repository: {repository_id(repo)}" in text
    assert (repo / ".buckconfig.d" / "lre.buckconfig").stat().st_mode & 0o777 == 0o644
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


def test_settings_follow_what_the_running_server_recorded(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    token.chmod(0o600)
    server = RunningServer(
        pid=1,
        grpc_address="0.0.0.0:4000",
        status_address="",
        repo="",
        log_file="",
        started=0.0,
        tls_cert_file="/c.pem",
        auth_token_file=str(token),
    )
    settings = client_settings_for(server, "main")
    assert settings.bazel_endpoint == "grpcs://127.0.0.1:4000"  # a wildcard is not dialable
    assert (settings.tls_ca_file, settings.auth_token) == ("/c.pem", "abc")
    unix = dataclasses.replace(server, grpc_address="unix:/run/lre.sock", tls_cert_file="")
    assert client_settings_for(unix, "main").bazel_endpoint == "unix:///run/lre.sock"
    token.chmod(0o644)  # the server refuses such a file; so does the client config
    with pytest.raises(ClientConfigError, match="chmod 600"):
        client_settings_for(server, "main")


def test_lre_bazelrc_names_the_repository_in_a_header(tmp_path: Path) -> None:
    """The learner's repository goes in an execution header, never in
    anything that enters an action's key; each checkout gets its own stable name."""
    one, other = tmp_path / "proj", tmp_path / "copy" / "proj"
    one.mkdir()
    other.mkdir(parents=True)
    name = repository_id(one)
    assert name.startswith("proj-") and name == repository_id(one / ".." / "proj")
    assert repository_id(other) != name
    text = bazelrc_text(SETTINGS, (4, 2, 3), name)
    (line,) = [
        ln for ln in text.splitlines() if "x-lre-repository" in ln and ln.startswith("build")
    ]
    assert line == f"build:lre --remote_header=x-lre-repository={name}"
    assert "x-lre-repository" not in bazelrc_text(SETTINGS, (4, 2, 3))
