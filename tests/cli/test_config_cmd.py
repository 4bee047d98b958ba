"""A user config file merged over the embedded default, found on the documented
search path (``--config``, ``$LRE_CONFIG``, ``~/.config/lre/config.json5``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.cli._lre import run_lre


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200", **extra}
    for name in ("LRE_CONFIG", "XDG_CONFIG_HOME", "LRE_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        if name not in extra:
            env.pop(name, None)
    return env


def _body(shown: str) -> list[str]:
    """The shown config without the header line naming the source, and without
    the "auto" sizes that are a share of the free disk (the CAS's ``max_bytes``,
    the worker's ``max_output_bytes``), which other processes change between
    two runs of ``lre config show``."""
    lines = shown.split("\n")[1:]
    auto = r'\s*(max_bytes|max_output_bytes): "[\d.]+\w+",'
    return [line for line in lines if not re.fullmatch(auto, line)]


def test_partial_files_merge_over_the_default(tmp_path: Path) -> None:
    env = _env(tmp_path)
    default = run_lre("config", "show", cwd=tmp_path, env=env)
    assert default.returncode == 0, default.stderr
    empty = tmp_path / "empty.json5"
    empty.write_text("{}\n")
    assert run_lre("config", "check", str(empty), cwd=tmp_path, env=env).stdout == "ok\n"
    merged = run_lre("config", "show", "--config", str(empty), cwd=tmp_path, env=env)
    assert _body(merged.stdout) == _body(default.stdout)
    assert f"from {empty} over <embedded default>" in merged.stdout.splitlines()[0]

    one_knob = tmp_path / "debug.json5"
    one_knob.write_text('{ global: { log_level: "debug" } }\n')
    shown = run_lre("config", "show", "--config", str(one_knob), cwd=tmp_path, env=env).stdout
    assert 'log_level: "debug"' in shown
    assert 'name: "cas"' in shown and 'name: "local"' in shown  # the rest is the default's

    typo = tmp_path / "typo.json5"
    typo.write_text('{ global: { log_levle: "debug" } }\n')
    bad = run_lre("config", "check", str(typo), cwd=tmp_path, env=env)
    assert bad.returncode == 1
    assert "global.log_levle" in bad.stdout + bad.stderr


def test_search_path_lre_config_then_xdg_config_home(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "lre").mkdir(parents=True)
    (xdg / "lre" / "config.json5").write_text('{ global: { log_level: "warning" } }\n')
    env = _env(tmp_path, XDG_CONFIG_HOME=str(xdg))
    shown = run_lre("config", "show", cwd=tmp_path, env=env)
    assert 'log_level: "warning"' in shown.stdout, shown.stdout + shown.stderr
    assert str(xdg / "lre" / "config.json5") in shown.stdout.splitlines()[0]

    named = tmp_path / "named.json5"
    named.write_text('{ global: { log_level: "error" } }\n')
    env = _env(tmp_path, XDG_CONFIG_HOME=str(xdg), LRE_CONFIG=str(named))
    assert 'log_level: "error"' in run_lre("config", "show", cwd=tmp_path, env=env).stdout
    flag = run_lre("config", "show", "--config", str(xdg / "lre" / "config.json5"), cwd=tmp_path,
                   env=env)  # fmt: skip
    assert 'log_level: "warning"' in flag.stdout  # --config beats $LRE_CONFIG

    env = _env(tmp_path, LRE_CONFIG=str(tmp_path / "missing.json5"))
    missing = run_lre("status", cwd=tmp_path, env=env)
    assert missing.returncode == 1
    assert f"LRE_CONFIG={tmp_path / 'missing.json5'}: no such config file" in missing.stderr


def test_show_origin_says_where_each_value_came_from(tmp_path: Path) -> None:
    env = _env(tmp_path)
    one_knob = tmp_path / "debug.json5"
    one_knob.write_text('{ global: { log_level: "debug" } }\n')
    shown = run_lre("config", "show", "--origin", "--config", str(one_knob), cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f'global.log_level = "debug"  # {one_knob}' in lines
    assert 'stores[0].name = "cas"  # <embedded default>' in lines
    assert "global.max_open_files = 24576  # built-in default" in lines


def test_show_prints_every_size_with_a_unit(tmp_path: Path) -> None:
    # One way to read sizes: the "auto" ones resolved from the disk and RAM
    # (no round number) print with a unit as the configured ones do.
    env = _env(tmp_path, LRE_HOME=str(tmp_path / "state"))
    shown = run_lre("config", "show", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    sizes = re.findall(
        r"^\s*(\w*(?:bytes|budget|_size|_floor|free_disk)): (.*),$", shown.stdout, re.M
    )
    assert {"max_bytes", "memory_budget", "max_batch_total_size_bytes"} <= {k for k, _ in sizes}
    for key, value in sizes:
        assert value == "0" or re.fullmatch(r'"[\d.]+(B|[KMGTP]i?B)"', value), (key, value)
