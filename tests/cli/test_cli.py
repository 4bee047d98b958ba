"""`lre --version`, `lre config show` and `lre config check`."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path

import json5
import pytest
import trio
from typer.testing import CliRunner

import lre
from lre.app._status_http import StatusServer
from lre.cli import app
from lre.config._loader import load_config_text
from tests.tui._sample import sample_snapshot

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
    # importing the server (about a second here) nor the dashboard: `lre up`
    # imports the server when it runs, `top` and `stats` only the dashboard
    # (next test).
    heavy = ["trio", "grpc", "google.protobuf", "lre.cas", "lre.app", "lre.tui", "lre.service"]
    heavy += ["lre.snapshot", "lre.scheduler", "lre.worker", "lre.upstream"]
    code = f"import sys, lre.cli; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


#: What only a serving lre needs; `lre top` and `lre stats` read a snapshot over HTTP.
SERVER_MODULES = (
    "lre.app",
    "lre.service",
    "lre.worker",
    "lre.scheduler",
    "lre.cas",
    "lre.upstream",
    "grpc",
)

#: Runs the command line given after the record path, then writes every module
#: it imported to that path, however the command ended.
RECORD_MODULES = """\
import sys
from lre.cli import main
record, sys.argv = sys.argv[1], ["lre", *sys.argv[2:]]
try:
    main()
finally:
    with open(record, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
"""


def _server_modules(record: Path) -> list[str]:
    loaded = record.read_text().split()
    assert "lre.tui" in loaded  # the command really ran
    return [m for m in loaded if any(m == s or m.startswith(f"{s}.") for s in SERVER_MODULES)]


async def _run_top_in_a_terminal(address: str, record: Path) -> bytes:
    """`lre top` on a pseudo-terminal until it shows the snapshot, then `q`."""
    main_fd, term_fd = os.openpty()
    fcntl.ioctl(term_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    command = [sys.executable, "-c", RECORD_MODULES, str(record), "top", "--address", address]
    process = await trio.lowlevel.open_process(
        command, stdin=term_fd, stdout=term_fd, stderr=term_fd, cwd=ROOT, env=env
    )
    os.close(term_fd)
    screen = b""
    try:
        with trio.fail_after(60):
            while b"In flight (5)" not in screen:
                await trio.lowlevel.wait_readable(main_fd)
                screen += os.read(main_fd, 1 << 16)
            os.write(main_fd, b"q")
            while True:  # keep reading so a full terminal never blocks it
                await trio.lowlevel.wait_readable(main_fd)
                try:
                    if not os.read(main_fd, 1 << 16):
                        break
                except OSError:  # EIO: lre top exited and closed the terminal
                    break
            assert await process.wait() == 0, screen[-2000:]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(main_fd)
    return screen


async def test_top_and_stats_import_no_server_module(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = StatusServer("127.0.0.1:0", sample_snapshot)
    address = f"127.0.0.1:{await nursery.start(server.serve)}"
    for name, args, shown in (
        ("stats", ["stats", "--address", address], "In flight (5)"),
        ("stats-json", ["stats", "--json", "--address", address], '"schema": 1'),
    ):
        record = tmp_path / f"{name}.modules"
        result = await trio.run_process(
            [sys.executable, "-c", RECORD_MODULES, str(record), *args],
            capture_stdout=True,
            capture_stderr=True,
            cwd=ROOT,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()
        assert shown in result.stdout.decode()
        # Printed once, so no keys to press: no dashboard footer.
        assert "Ctrl-C" not in result.stdout.decode(), result.stdout.decode()
        assert _server_modules(record) == [], name

    record = tmp_path / "top.modules"
    await _run_top_in_a_terminal(address, record)
    assert _server_modules(record) == []
