"""JobserverPool with real clients: GNU make and cargo, SIGKILL leaks, fifo style."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lre.worker.process._jobserver import JOBSERVER_ENV_VARS, JobserverPool, jobserver_tokens
from tests._support.processes import require_tool


def max_overlap(intervals: list[tuple[int, int]]) -> int:
    """Largest number of intervals open at one instant (an end before a start on ties)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = cur = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best


def read_intervals(directory: Path) -> list[tuple[int, int]]:
    out = []
    for f in directory.iterdir():
        start, end = f.read_text().split()
        out.append((int(start), int(end)))
    return out


MAKEFILE_TEMPLATE = """\
TARGETS := $(addprefix t,$(shell seq 1 {n}))
all: $(TARGETS)
$(TARGETS):
\t@s=$$(date +%s%N); sleep {sleep}; e=$$(date +%s%N); echo "$$s $$e" > {log}/$@
.PHONY: all $(TARGETS)
"""


def write_makefile(tmp_path: Path, n: int = 20, sleep: float = 0.15) -> Path:
    log = tmp_path / "log"
    log.mkdir()
    (tmp_path / "Makefile").write_text(MAKEFILE_TEMPLATE.format(n=n, sleep=sleep, log=log))
    return log


def test_tokens_from_millicpus() -> None:
    assert jobserver_tokens(0) == 0
    assert jobserver_tokens(1000) == 0
    assert jobserver_tokens(1999) == 0
    assert jobserver_tokens(3000) == 2
    assert jobserver_tokens(8500) == 7
    with pytest.raises(ValueError, match="millicpus"):
        jobserver_tokens(-1)


def test_environment_strips_inherited_parallelism() -> None:
    base = {name: "-j64" for name in JOBSERVER_ENV_VARS} | {"PATH": "/bin", "HOME": "/h"}
    with JobserverPool(2) as pool:
        env = pool.environment(base)
        r, w = pool.pass_fds
        assert env["MAKEFLAGS"] == f"-j --jobserver-fds={r},{w} --jobserver-auth={r},{w}"
        assert env["CARGO_MAKEFLAGS"] == env["MAKEFLAGS"]
        for name in ("MFLAGS", "GNUMAKEFLAGS", "CMAKE_BUILD_PARALLEL_LEVEL"):
            assert name not in env
        assert env["PATH"] == "/bin" and env["HOME"] == "/h"
        assert pool.free_tokens() == 2
    assert JobserverPool.strip_environment(base) == {"PATH": "/bin", "HOME": "/h"}


def test_close_counts_leaks_and_is_idempotent() -> None:
    pool = JobserverPool(4)
    r, _ = pool.pass_fds
    assert os.read(r, 3) == b"+++"  # a "client" takes three and dies holding them
    assert pool.close() == 3
    assert pool.closed
    assert pool.close() == 0
    with pytest.raises(RuntimeError, match="closed"):
        pool.environment({})


def test_lend_and_reclaim_keep_accounting_exact() -> None:
    with JobserverPool(1) as pool:
        pool.lend(3)
        assert pool.expected_tokens == 4
        r, w = pool.pass_fds
        assert os.read(r, 2) == b"++"  # two held by clients
        assert pool.reclaim(5) == 2  # only free tokens come back
        assert pool.expected_tokens == 2
        os.write(w, b"++")
        assert pool.close() == 0


def test_server_reads_survive_client_setting_nonblocking() -> None:
    # make sets O_NONBLOCK on the shared read end; our own description is separate,
    # and a blocking shared end must not make close() hang either.
    pool = JobserverPool(2)
    r, _ = pool.pass_fds
    os.set_blocking(r, True)
    assert pool.close() == 0


def run_make(tmp_path: Path, pool: JobserverPool | None, *extra: str) -> None:
    make = require_tool("make")
    base = dict(os.environ) | {"MAKEFLAGS": "-j64"}  # must be stripped, not obeyed
    env = pool.environment(base) if pool else JobserverPool.strip_environment(base)
    subprocess.run(
        [make, "-s", "-C", str(tmp_path), *extra],
        env=env,
        pass_fds=pool.pass_fds if pool else (),
        check=True,
        timeout=60,
        start_new_session=True,
    )


def test_make_reaches_exactly_reserved_parallelism(tmp_path: Path) -> None:
    # make takes "-j" from MAKEFLAGS (as a build tool launched by an action does).
    log = write_makefile(tmp_path)
    with JobserverPool(jobserver_tokens(3000), name="make3") as pool:
        run_make(tmp_path, pool)
        leaked = pool.close()
    intervals = read_intervals(log)
    assert len(intervals) == 20
    assert max_overlap(intervals) == 3
    assert leaked == 0


def test_make_j_on_its_command_line_leaves_the_pool(tmp_path: Path) -> None:
    # Documented limit (docs/resource-control.md): make 4.3 treats a -j on its own
    # command line as "forced" and resets jobserver mode, so such an action is not
    # bounded by its pool. If make ever changes this, the docs must change too.
    log = write_makefile(tmp_path, n=8, sleep=0.3)
    with JobserverPool(jobserver_tokens(3000)) as pool:
        run_make(tmp_path, pool, "-j")
        assert pool.close() == 0
    assert max_overlap(read_intervals(log)) > 3


def test_make_with_one_cpu_is_serial(tmp_path: Path) -> None:
    log = write_makefile(tmp_path, n=6, sleep=0.05)
    with JobserverPool(0) as pool:
        run_make(tmp_path, pool)
        assert pool.close() == 0
    assert max_overlap(read_intervals(log)) == 1


def test_fifo_style_pool(tmp_path: Path) -> None:
    with JobserverPool(2, style="fifo", fifo_dir=str(tmp_path)) as pool:
        path = tmp_path / "jobserver.fifo"
        assert pool.makeflags == f"-j --jobserver-auth=fifo:{path}"
        assert pool.pass_fds == ()
        # a client opens the path itself, takes a token and gives it back
        fd = os.open(path, os.O_RDWR)
        try:
            assert os.read(fd, 1) == b"+"
            assert pool.free_tokens() == 1
            os.write(fd, b"+")
        finally:
            os.close(fd)
        assert pool.close() == 0
    assert not path.exists()


def test_fifo_style_needs_a_directory() -> None:
    with pytest.raises(ValueError, match="fifo_dir"):
        JobserverPool(1, style="fifo")


CLIENT = """
import os, sys, time
r, w = (int(x) for x in sys.argv[1:3])
got = os.read(r, int(sys.argv[3]))
print(len(got), flush=True)
time.sleep(60)
"""


def test_sigkilled_client_leaks_only_its_own_pool(tmp_path: Path) -> None:
    victim_pool = JobserverPool(3, name="victim")
    other_pool = JobserverPool(3, name="other")
    try:
        r, w = victim_pool.pass_fds
        proc = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(r), str(w), "3"],
            pass_fds=victim_pool.pass_fds,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"3"
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=10)
            proc.stdout.close()  # type: ignore[union-attr]
        assert victim_pool.free_tokens() == 0
        # the concurrent action's pool is untouched and still fully usable
        assert other_pool.free_tokens() == 3
        log = write_makefile(tmp_path, n=8, sleep=0.1)
        run_make(tmp_path, other_pool)
        assert max_overlap(read_intervals(log)) == 4
    finally:
        assert victim_pool.close() == 3
        assert other_pool.close() == 0


CARGO_WRAPPER = """#!/bin/sh
# RUSTC_WRAPPER: time each crate compilation, pass everything else straight through.
case " $* " in
  *" --crate-name c"*|*" --crate-name app "*)
    s=$(date +%s%N)
    sleep 0.4
    "$@"; rc=$?
    e=$(date +%s%N)
    echo "$s $e" > "$LOG_DIR/$$"
    exit $rc ;;
esac
exec "$@"
"""


def make_workspace(root: Path, crates: int) -> None:
    members = [f"c{i}" for i in range(crates)]
    (root / "Cargo.toml").write_text(
        '[workspace]\nresolver = "2"\nmembers = ['
        + ", ".join(f'"{m}"' for m in members)
        + ', "app"]\n'
    )
    for m in members:
        (root / m / "src").mkdir(parents=True)
        (root / m / "Cargo.toml").write_text(
            f'[package]\nname = "{m}"\nversion = "0.1.0"\nedition = "2021"\n'
        )
        (root / m / "src" / "lib.rs").write_text(f"pub fn {m}() -> u32 {{ 1 }}\n")
    (root / "app" / "src").mkdir(parents=True)
    deps = "".join(f'{m} = {{ path = "../{m}" }}\n' for m in members)
    (root / "app" / "Cargo.toml").write_text(
        '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n' + deps
    )
    body = " + ".join(f"{m}::{m}()" for m in members)
    (root / "app" / "src" / "main.rs").write_text(f'fn main() {{ println!("{{}}", {body}); }}\n')


def run_cargo(tmp_path: Path, pool: JobserverPool | None, name: str) -> list[tuple[int, int]]:
    cargo = require_tool("cargo")
    ws = tmp_path / name
    ws.mkdir()
    make_workspace(ws, crates=2)
    log = tmp_path / f"{name}-log"
    log.mkdir()
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(CARGO_WRAPPER)
    wrapper.chmod(0o755)
    base = dict(os.environ) | {
        "RUSTC_WRAPPER": str(wrapper),
        "LOG_DIR": str(log),
        "CARGO_TARGET_DIR": str(ws / "target"),
        "CARGO_HOME": str(tmp_path / "cargo-home"),  # cargo writes caches there
        "CARGO_INCREMENTAL": "0",
        "CARGO_BUILD_JOBS": "8",  # cargo's own limit must not be what bounds the test
    }
    env = pool.environment(base) if pool else JobserverPool.strip_environment(base)
    subprocess.run(
        [cargo, "build", "--offline", "-q"],
        cwd=ws,
        env=env,
        pass_fds=pool.pass_fds if pool else (),
        check=True,
        timeout=300,
        start_new_session=True,
    )
    return read_intervals(log)


def test_cargo_path_dependencies_bounded_by_pool(tmp_path: Path) -> None:
    # Control: without a pool the two independent path crates compile side by side.
    unbounded = run_cargo(tmp_path, None, "free")
    assert len(unbounded) == 3
    assert max_overlap(unbounded) == 2
    # An action reserving one CPU: cargo must compile one crate at a time.
    with JobserverPool(jobserver_tokens(1000), name="cargo1") as pool:
        started = time.monotonic()
        bounded = run_cargo(tmp_path, pool, "pooled")
        assert time.monotonic() - started > 3 * 0.4
        assert pool.close() == 0
    assert len(bounded) == 3
    assert max_overlap(bounded) == 1
