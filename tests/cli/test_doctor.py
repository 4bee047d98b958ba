"""`lre doctor` as a user runs it, against a real detached lre and real Bazel."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import time
from pathlib import Path

from lre.cli._checks import Check
from lre.cli._daemon import RunningServer, read_pid_file
from lre.cli._doctor_host import containment_check
from tests.cli.buck2_init import buck2_init
from tests.cli.running_lre import LreHome, bazel_repo, detached, private_home


def _lines(output: str) -> dict[str, str]:
    """Check name -> its line (status and message) from the text output."""
    out = {}
    for line in output.splitlines():
        status, _, rest = line.partition("  ")
        if status.strip() in ("OK", "WARN", "FAIL", "SKIP"):
            name, _, message = rest.strip().partition("  ")
            out[name] = f"{status.strip()} {message.strip()}"
    return out


def _checks(home: LreHome, cwd: Path, *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    result = home.run("doctor", "--json", *args, cwd=cwd, timeout=300)
    document = json.loads(result.stdout)
    assert document["ok"] == (result.returncode == 0), result.stdout
    return result.returncode, {c["name"]: c for c in document["checks"]}


def test_a_working_bazel_setup_passes_and_problems_fail_with_their_fix(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path, "WORKSPACE")
    with detached(home, repo):
        text = home.run("doctor", cwd=repo, timeout=300)
        assert text.returncode == 0, text.stdout + text.stderr
        lines = _lines(text.stdout)
        assert lines["lre"].startswith("OK running and healthy")
        assert (
            lines["grpc port"]
            == f"OK 127.0.0.1:{home.grpc_port} answers (lre, pid "
            + (lines["grpc port"].split("pid ")[1])
        )
        assert lines["status port"].startswith("OK 127.0.0.1:")
        assert lines["bazel config"].startswith(
            f"OK {repo}/lre.bazelrc points at the running lre (127.0.0.1:{home.grpc_port})"
        )
        assert lines["bazel"].startswith("OK Bazel 4.2.3 at ")
        assert lines["bazel"].endswith("it knows every flag in lre.bazelrc")
        assert lines["disk cas"].startswith("OK CAS cas holds 0 B of at most 1.0 GiB")
        assert lines["clock"].startswith("OK file timestamps in ")
        assert "the wall clock was not set since lre started" in lines["clock"]
        assert lines["user"].startswith("WARN" if os.geteuid() == 0 else "OK")
        if os.geteuid() == 0:  # the one recommendation about root (README, docs/security.md)
            assert (
                "fix: run lre as your own user where unprivileged user namespaces work "
                "(containment userns); as root only where they do not"
            ) in text.stdout, text.stdout
        # "strongest": pidns as root, userns or (where the kernel forbids it) portable else.
        assert re.fullmatch(
            r"OK actions run with containment (pidns|userns)"
            r"|WARN actions run with containment portable: .*",
            lines["containment"],
        ), lines["containment"]
        if os.geteuid() == 0:
            assert lines["containment"] == "OK actions run with containment pidns"

        # A flag this Bazel does not know, and lre.bazelrc pointing elsewhere.
        rc = repo / "lre.bazelrc"
        good = rc.read_text()
        rc.write_text(
            good.replace(f"127.0.0.1:{home.grpc_port}", "127.0.0.1:1")
            + "build:lre --experimental_no_such_flag=1\n"
        )
        code, checks = _checks(home, repo)
        assert code == 1
        assert checks["bazel config"]["status"] == "FAIL"
        assert (
            "points at grpc://127.0.0.1:1 but lre listens on" in checks["bazel config"]["message"]
        )
        assert checks["bazel config"]["fix"] == f"run `lre up` in {repo} to rewrite it"
        assert checks["bazel"]["status"] == "FAIL"
        assert "--experimental_no_such_flag=1" in checks["bazel"]["message"]
        assert "--remote_executor" not in checks["bazel"]["message"]

        # The try-import line gone from .bazelrc.
        rc.write_text(good)
        (repo / ".bazelrc").write_text("build --verbose_failures\n")
        code, checks = _checks(home, repo)
        assert code == 1
        assert checks["bazel config"]["fix"].startswith(
            "add the line `try-import %workspace%/lre.bazelrc` to"
        )


def test_client_config_for_a_stopped_lre(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path, "WORKSPACE")
    (repo / ".bazelrc").write_text("try-import %workspace%/lre.bazelrc\n")
    flags = "build:lre --remote_executor=grpc://127.0.0.1:50051\nbuild:lre --jobs=16\n"
    (repo / "lre.bazelrc").write_text(flags + "build --config=lre\n")
    code, checks = _checks(home, repo)
    assert checks["bazel config"]["status"] == "FAIL"
    assert code == 1  # doctor says builds will fail, so it exits non-zero
    assert "builds fail with 'Connection refused'" in checks["bazel config"]["message"]
    assert checks["bazel config"]["fix"] == (
        "start lre (`lre up --detach`) or build locally (`lre unlink`)"
    )
    # Opt-in (or made inert): only build:lre lines, so Bazel builds locally.
    (repo / "lre.bazelrc").write_text(flags)
    code, checks = _checks(home, repo)
    assert checks["bazel config"]["status"] == "OK"
    assert "applies only with --config=lre" in checks["bazel config"]["message"]
    assert code == 0
    # Comments only, as `lre down` leaves the file.
    (repo / "lre.bazelrc").write_text("# lre is stopped (`lre down`); this file sets nothing.\n")
    code, checks = _checks(home, repo)
    assert checks["bazel config"]["message"].endswith(
        "sets nothing while lre is stopped: Bazel builds locally"
    )
    assert (code, checks["bazel config"]["status"]) == (0, "OK")


def test_a_clock_step_since_lre_started_is_found(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path, "WORKSPACE")
    with detached(home, repo):
        pid_file = home.state_dir / "lre.json"
        recorded = json.loads(pid_file.read_text())
        # As if the wall clock had been set 30 s ahead since lre started: the
        # kernel now puts the process start 30 s later than lre recorded.
        pid_file.write_text(json.dumps({**recorded, "started": recorded["started"] - 30}))
        try:
            code, checks = _checks(home, repo)
            assert code == 1
            clock = checks["clock"]
            assert clock["status"] == "FAIL"
            assert "the wall clock was set +30 s since lre" in clock["message"]
            assert clock["fix"] == f"stop it with `kill {recorded['pid']}`, then `lre up --detach`"
        finally:
            pid_file.write_text(json.dumps(recorded))


def test_without_lre_the_ports_are_checked_and_a_holder_named(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", home.status_port))
        holder.listen()
        code, checks = _checks(home, tmp_path)
    finally:
        holder.close()
    assert code == 1
    assert checks["lre"]["status"] == "WARN"
    assert checks["lre"]["fix"] == "start it: `lre up --detach`"
    assert checks["status port"]["status"] == "FAIL"
    assert (
        f"127.0.0.1:{home.status_port} is held by pid {os.getpid()}"
        in (checks["status port"]["message"])
    )
    assert checks["grpc port"]["status"] == "OK"  # port 0 in this config: picked at start
    assert checks["containment"] == {
        "name": "containment",
        "status": "SKIP",
        "message": "unknown (lre too old or not running)",
        "fix": "",
    }
    assert checks["client config"]["status"] == "SKIP"  # tmp_path is no repository


def test_a_cas_larger_than_the_free_disk_is_a_warning(tmp_path: Path) -> None:
    home = private_home(tmp_path, max_bytes="1000TiB")
    code, checks = _checks(home, tmp_path)
    disk = checks["disk cas"]
    assert disk["status"] == "WARN"
    assert "the disk fills up before the CAS reaches its limit" in disk["message"]
    assert "stores[cas].filesystem.eviction_policy.max_bytes" in disk["fix"]
    assert code == 0  # a warning alone does not fail


def test_a_repo_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    result = home.run("doctor", "--repo", str(tmp_path / "nope"), cwd=tmp_path)
    assert result.returncode == 2
    assert f"'{tmp_path / 'nope'}' is not a directory" in result.stderr


def test_no_bazel_on_path_fails(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path, "WORKSPACE")
    env = {**home.env, "PATH": str(tmp_path / "empty-bin")}
    result = home.run("doctor", "--repo", str(repo), cwd=tmp_path, env=env)
    assert result.returncode == 1
    lines = _lines(result.stdout)
    assert lines["bazel"] == "FAIL no `bazel` on PATH"
    assert "fix: install Bazel (Debian: `apt-get install bazel-bootstrap`)" in result.stdout


def test_buck2_init_repo_fails_until_lre_up_routes_it_to_lres_platform(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = buck2_init(tmp_path / "buck-repo")
    code, checks = _checks(home, repo)
    assert code == 1
    platform = checks["buck2 platform"]
    assert platform["status"] == "FAIL"
    assert platform["message"].startswith("prelude//platforms:default (from .buckconfig:")
    assert platform["message"].endswith("has remote execution off: Buck2 builds locally")
    assert "execution_platforms = root//lre_platforms:lre" in platform["fix"]
    assert checks["buck2 config"]["status"] == "FAIL"
    assert checks["buck2 config"]["fix"] == f"run `lre up` in {repo}, then `buck2 kill`"
    assert "bazel" not in checks  # not a Bazel repository

    with detached(home, repo):
        code, checks = _checks(home, repo)
        assert code == 0, checks
        assert checks["buck2 platform"]["message"].startswith(
            "root//lre_platforms:lre (from .buckconfig.local:"
        )
        assert checks["buck2 config"]["message"] == (
            f".buckconfig.d/lre.buckconfig:3 points at the running lre (127.0.0.1:{home.grpc_port})"
        )
    code, checks = _checks(home, repo)
    # lre is down now: its file sets nothing, so Buck2 builds locally.
    assert "points at the running lre" not in checks["buck2 config"]["message"]


def test_buck2_platform_of_the_users_own(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = buck2_init(tmp_path / "buck-repo")
    (repo / ".buckconfig.local").write_text("[build]\nexecution_platforms = root//my:platform\n")
    _, checks = _checks(home, repo)
    platform = checks["buck2 platform"]
    assert platform["status"] == "WARN"
    assert platform["message"].startswith(
        "root//my:platform (from .buckconfig.local:2) is your own"
    )
    assert "remote_enabled = True" in platform["fix"]


def test_a_buck2_configuration_buck2_would_refuse_is_named(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = buck2_init(tmp_path / "buck-repo")
    (repo / ".buckconfig.local").write_text("<file:missing.buckconfig>\n")
    code, checks = _checks(home, repo)
    assert code == 1
    assert checks["buck2 config"]["status"] == "FAIL"
    assert checks["buck2 config"]["message"].startswith("Buck2 cannot read this configuration: ")
    assert ".buckconfig.local:1" in checks["buck2 config"]["message"]
    assert "buck2 platform" not in checks


def test_buck2_repo_without_a_platform_gets_lres(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = tmp_path / "buck-repo"
    repo.mkdir()
    (repo / ".buckconfig").write_text("[cells]\nroot = .\n")
    with detached(home, repo):
        code, checks = _checks(home, repo)
    assert code == 0, checks
    assert checks["buck2 platform"]["status"] == "OK", checks["buck2 platform"]
    assert checks["buck2 platform"]["message"].startswith("root//lre_platforms:lre (from ")


def test_containment_is_read_from_status() -> None:
    server = RunningServer(1, "127.0.0.1:1", "127.0.0.1:2", "", "", 0.0)
    assert containment_check(server, {"status": "ok", "containment": "userns"}) == Check(
        "containment", "OK", "actions run with containment userns"
    )
    portable = containment_check(server, {"status": "ok", "containment": "local=portable"})
    assert (portable.status, "docs/security.md" in portable.fix) == ("WARN", True)
    old = containment_check(server, {"status": "ok"})
    assert (old.status, old.message.startswith("unknown (lre too old or not running)")) == (
        "WARN",
        True,
    )


def test_missing_protections_and_refusing_kernel_settings_are_named() -> None:
    server = RunningServer(1, "127.0.0.1:1", "127.0.0.1:2", "", "", 0.0)
    refusal = ("kernel.apparmor_restrict_unprivileged_userns = 1: AppArmor restricts ...",)
    status = {
        "status": "ok",
        "containment": "portable",
        "protections_missing": ["local: a PID namespace per action"],
    }
    check = containment_check(server, status, refusal)
    assert check.status == "WARN"
    assert "missing: local: a PID namespace per action" in check.message
    assert check.fix == refusal[0]
    # lre not running: the kernel settings alone are reported
    alone = containment_check(None, None, refusal)
    assert (alone.status, refusal[0] in alone.message) == ("WARN", True)
    assert containment_check(None, None, ()).status == "SKIP"


def test_bazel_is_installed() -> None:
    # The checks above need the real Bazel (Debian's bazel-bootstrap).
    assert shutil.which("bazel"), "install bazel-bootstrap (apt-get install bazel-bootstrap)"


def test_without_lre_the_port_the_repositories_were_written_for_is_checked(
    tmp_path: Path,
) -> None:
    # `kill -9` leaves lre.bazelrc pointing at lre's --port; that port, not the
    # configured one, is what builds try, so the doctor checks it and says why.
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stderr
    server = read_pid_file(home.state_dir)
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # lre's own, TIME_WAIT
    try:
        while True:  # the killed lre's helpers may hold its socket a moment longer
            try:
                holder.bind(("127.0.0.1", home.grpc_port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        holder.listen()
        code, checks = _checks(home, tmp_path)  # from outside the repository: repos.json
    finally:
        holder.close()
    assert code == 1
    grpc = checks["grpc port"]
    assert grpc["status"] == "FAIL", grpc
    assert f"127.0.0.1:{home.grpc_port} is held by pid {os.getpid()}" in grpc["message"]
    assert f"the port {repo / 'lre.bazelrc'} sends builds to" in grpc["message"]
