"""`lre --version`, `lre config show` and `lre config check`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import json5
import pytest
from typer.testing import CliRunner

import lre
from lre.cli import app
from lre.config import load_config_text

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the default config's directories into tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LRE_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return tmp_path


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"lre {lre.__version__}\n"


def test_config_show_default_resolves_autos(home: Path) -> None:
    result = runner.invoke(app, ["config", "show"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("// lre effective config from <embedded default>")
    raw = json5.loads(result.output)
    assert raw["stores"][0]["filesystem"]["content_path"] == f"{home}/.cache/lre/cas"
    assert '"auto"' not in result.output.split("\n", 1)[1]
    local = raw["workers"][0]["local"]
    assert isinstance(local["max_inflight_tasks"], int) and local["max_inflight_tasks"] >= 1
    assert raw["global"]["state_dir"] == f"{home}/.local/state/lre"
    # what show prints is itself a valid config
    load_config_text(result.output, env={})
    assert not (home / ".cache").exists(), "show must not create directories"


def test_config_show_file(home: Path) -> None:
    result = runner.invoke(
        app, ["config", "show", "--config", str(ROOT / "configs" / "team-cache.json5")]
    )
    assert result.exit_code == 0, result.output
    raw = json5.loads(result.output)
    assert [s["name"] for s in raw["schedulers"]] == ["main", "forward", "queue"]


def test_config_check_ok() -> None:
    result = runner.invoke(app, ["config", "check", str(ROOT / "configs" / "multi-worker.json5")])
    assert result.exit_code == 0, result.output
    assert result.output == "ok\n"


def test_config_check_misspelt_key(tmp_path: Path) -> None:
    text = (
        (ROOT / "configs" / "laptop.json5")
        .read_text()
        .replace('eviction_policy: { max_bytes: "auto" }', 'eviction_policy: { max_byts: "auto" }')
    )
    path = tmp_path / "bad.json5"
    path.write_text(text)
    result = runner.invoke(app, ["config", "check", str(path)])
    assert result.exit_code == 1
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "max_byts" in row)
    assert (
        f"{path}:{line}: stores[0].filesystem.eviction_policy.max_byts: unknown key; "
        "did you mean 'max_bytes'?"
    ) in result.output
    assert "ok" not in result.output


def test_config_check_reports_all_problems(tmp_path: Path) -> None:
    path = tmp_path / "bad.json5"
    path.write_text(
        '{ stores: [{ name: "cas", memory: { eviction_policy: { max_bytes: 0 } } }],\n'
        '  servers: [{ instances: [{ cas_store: "cass", scheduler: "none" }] }] }'
    )
    result = runner.invoke(app, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert "stores[0].memory.eviction_policy.max_bytes: 0 would make the store unbounded" in (
        result.output
    )
    assert "servers[0].instances[0].cas_store: no store is named 'cass'; did you mean 'cas'?" in (
        result.output
    )
    assert "servers[0].instances[0].scheduler: no scheduler is named 'none'" in result.output


def test_config_check_missing_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "check", str(tmp_path / "nope.json5")])
    assert result.exit_code == 1
    assert "cannot read the config" in result.output


def test_python_dash_m_lre(tmp_path: Path) -> None:
    """The real entry point, in a subprocess."""
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("LRE_HOME", None)
    env.pop("XDG_CACHE_HOME", None)
    version = subprocess.run(
        [sys.executable, "-m", "lre", "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (version.returncode, version.stdout) == (0, f"lre {lre.__version__}\n")
    bad = tmp_path / "bad.json5"
    bad.write_text("{ stores: [], servers: [], worker: [] }\n")
    check = subprocess.run(
        [sys.executable, "-m", "lre", "config", "check", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert check.returncode == 1
    assert f"{bad}:1: worker: unknown key; did you mean 'workers'?" in check.stderr
    show = subprocess.run(
        [sys.executable, "-m", "lre", "config", "show"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert show.returncode == 0, show.stderr
    assert json5.loads(show.stdout)["servers"][0]["listener"]["address"] == "127.0.0.1:50051"


def test_the_command_line_starts_without_the_server_modules() -> None:
    # `lre status`, `lre down`, `lre --help` and the like must not pay for
    # importing the server (about a second here): only `lre up`, `top` and
    # `stats` import it, when they run.
    heavy = ["trio", "grpc", "google.protobuf", "lre.cas", "lre.app", "lre.tui", "lre.service"]
    code = f"import sys, lre.cli; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""
