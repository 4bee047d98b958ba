"""The README's "Use" section, verbatim, for a new user with ``lre`` on PATH.

Every command line of that section's code block runs through ``bash`` as
written (only ``DIR`` becomes a second repository), in a fresh home whose
``~/.config/lre/config.json5`` moves lre to free ports (the config search
path's default file), with the real Bazel and a repository whose
``.bazelrc`` git tracks. A command the README lists that does not exist,
fails, or behaves otherwise than its comment says fails this test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._support.servers import free_port
from tests.e2e._bazel import parse_process_summary, require_bazel
from tests.e2e._workspace import write_offline_scaffold

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

README = Path(__file__).resolve().parents[2] / "README.md"


def use_section_commands() -> list[str]:
    """The command lines of the README's "Use" code block, comments cut off."""
    section = README.read_text(encoding="utf-8").split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _new_user(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A home with ``lre`` on PATH (the installed console script) and a user config."""
    home = tmp_path / "home"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    script = Path(sys.executable).parent / "lre"
    assert script.exists(), f"no lre console script beside {sys.executable}"
    (bin_dir / "lre").symlink_to(script)
    grpc, status = free_port(), free_port()
    config = home / ".config" / "lre" / "config.json5"
    config.parent.mkdir(parents=True)
    config.write_text(
        "{\n"
        f'  global: {{ status: {{ address: "127.0.0.1:{status}" }} }},\n'
        "  servers: [{\n"
        '    name: "main",\n'
        f'    listener: {{ address: "127.0.0.1:{grpc}" }},\n'
        '    instances: [{ instance_name: "*", cas_store: "cas", ac_store: "ac", '
        'scheduler: "main" }],\n'
        "  }],\n"
        "}\n"
    )
    # Bazel's server for this home goes away by itself if the test dies.
    (home / ".bazelrc").write_text("startup --max_idle_secs=120\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LRE_", "XDG_")) and key not in ("HOME", "PATH")
    }
    env |= {"HOME": str(home), "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"}
    env["COLUMNS"] = "200"
    return home, env


def _repo(path: Path, name: str) -> Path:
    """A git repository building one genrule offline; git tracks its ``.bazelrc``."""
    write_offline_scaffold(path, name)
    (path / "BUILD").write_text(
        'genrule(name = "hello", outs = ["hello.txt"], cmd = "echo hi > $@")\n'
    )
    (path / ".gitignore").write_text("/bazel-*\n/my.json5\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return path


def _bash(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _follow_logs(line: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """``lre logs -f`` until it printed a line, then the user's Ctrl-C."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {line}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=60)[0]
    return process.returncode, first + rest


def test_the_readme_use_section_works_verbatim(tmp_path: Path) -> None:
    require_bazel()
    commands = use_section_commands()
    assert commands[0] == "cd ~/src/my-bazel-repo", commands
    home, env = _new_user(tmp_path)
    repo = _repo(home / "src" / "my-bazel-repo", "mine")
    other = _repo(home / "src" / "other-repo", "other")
    tracked_rc = (repo / ".bazelrc").read_text()
    (repo / "my.json5").write_text("{}\n")
    # "while the `lre up` above runs (or after `lre up --detach`)": started from ~.
    started = _bash("lre up --detach", home, env)
    assert started.returncode == 0, started.stdout + started.stderr
    cwd = home
    seen: list[str] = []
    try:
        for line in commands:
            if line.startswith("cd "):
                cwd = Path(line.removeprefix("cd ").replace("~", str(home), 1))
                continue
            line = line.replace("DIR", str(other))
            if line == "lre logs -f":
                code, output = _follow_logs(line, cwd, env)
                assert code in (0, 130), output
                assert re.search(r"^\d{4}-\d\d-\d\dT", output, re.M), output
                seen.append(line)
                continue
            done = _bash(line, cwd, env)
            said = done.stdout + done.stderr
            assert "Traceback" not in said, f"{line}:\n{said}"
            if line == "lre doctor":  # exit 1 on a problem
                assert done.returncode == (1 if "\nFAIL " in "\n" + done.stdout else 0), said
            else:
                assert done.returncode == 0, f"{line}:\n{said}"
            if line == "bazel build //...":
                summary = parse_process_summary(said)
                assert summary is not None and summary.count("remote") == 1, said
            elif line == "lre status":
                assert "lre is running: healthy" in done.stdout, said
                assert str(repo) in done.stdout, said  # linked repositories are listed
            elif line == "lre down":
                assert "stopped" in done.stdout, said
                stopped = _bash("lre status", cwd, env)
                assert stopped.returncode == 3, stopped.stdout + stopped.stderr
            elif line == "lre restart":
                assert _bash("lre status", cwd, env).returncode == 0
            elif line == "lre unlink":
                assert not (repo / "lre.bazelrc").exists(), said
            # lre never edits the file git tracks.
            assert (repo / ".bazelrc").read_text() == tracked_rc, line
            assert _git(repo, "status", "--porcelain") == "", line
            seen.append(line)
    finally:
        _bash("lre down --now", home, env)
        _bash("bazel shutdown", repo, env)
        _bash("bazel shutdown", other, env)
    for expected in ("bazel build //...", "lre down", "lre restart", "lre ps", "lre unlink"):
        assert expected in seen, seen
    deadline = time.monotonic() + 30
    while _bash("lre status", home, env).returncode != 3:
        assert time.monotonic() < deadline, "lre still runs after lre down --now"
        time.sleep(0.5)
