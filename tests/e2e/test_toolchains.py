"""toolchains/: the keys lre matches on, and Buck2's documented platform API.

BUILD, BUCK and .bzl files use a Python-compatible subset of Starlark, so they
are read with ``ast`` (no Buck2 is installed here). Bazel's use of the platform
is checked for real in test_local_build.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lre.config import SimpleSchedulerSpec

TOOLCHAINS = Path(__file__).resolve().parents[2] / "toolchains"

#: CommandExecutorConfig's parameters (Buck2, command_executor_config.rs; see
#: ../shared/notes/reapi-clients.md section 1b).
COMMAND_EXECUTOR_CONFIG_PARAMS = {
    "local_enabled",
    "remote_enabled",
    "remote_cache_enabled",
    "remote_dep_file_cache_enabled",
    "remote_execution_properties",
    "remote_execution_action_key",
    "remote_execution_max_input_files_mebibytes",
    "remote_execution_queue_time_threshold_s",
    "remote_execution_use_case",
    "use_limited_hybrid",
    "allow_limited_hybrid_fallbacks",
    "allow_hybrid_fallbacks_on_failure",
    "use_windows_path_separators",
    "use_persistent_workers",
    "use_bazel_protocol_remote_persistent_workers",
    "allow_cache_uploads",
    "max_cache_upload_mebibytes",
    "experimental_low_pass_filter",
    "remote_output_paths",
    "network_access",
    "remote_execution_resource_units",
    "remote_execution_dependencies",
    "remote_execution_gang_workers",
    "remote_execution_dynamic_image",
    "meta_internal_extra_params",
    "priority",
}


def _calls(path: Path, name: str) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def _keywords(call: ast.Call) -> dict[str, ast.expr]:
    assert not call.args, "Buck2 and Bazel rules take named arguments only"
    return {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}


def _literal(node: ast.expr) -> object:
    return ast.literal_eval(node)


def _lre_property_keys() -> set[str]:
    return set(SimpleSchedulerSpec().supported_platform_properties)


def test_bazel_platforms_use_only_keys_lre_matches_on() -> None:
    platforms = _calls(TOOLCHAINS / "bazel" / "BUILD.bazel", "platform")
    by_name = {_literal(_keywords(p)["name"]): _keywords(p) for p in platforms}
    assert set(by_name) == {"lre", "lre_heavy"}
    for name, kwargs in by_name.items():
        props = _literal(kwargs["exec_properties"])
        assert isinstance(props, dict)
        assert set(props) <= _lre_property_keys(), name
        assert props["OSFamily"] == "Linux"
        assert int(props["cpu_count"]) >= 1
        assert _literal(kwargs["parents"]) == ["@local_config_platform//:host"]
    heavy = _literal(by_name["lre_heavy"]["exec_properties"])
    assert isinstance(heavy, dict)
    assert int(heavy["memory_kb"]) > 0


def test_buck2_platform_uses_the_documented_api() -> None:
    defs = TOOLCHAINS / "buck2" / "defs.bzl"
    (config,) = _calls(defs, "CommandExecutorConfig")
    kwargs = _keywords(config)
    assert set(kwargs) <= COMMAND_EXECUTOR_CONFIG_PARAMS
    # With remote_enabled, Buck2 requires the properties and the use case.
    required = {"local_enabled", "remote_enabled", "remote_execution_properties"}
    assert required | {"remote_execution_use_case"} <= set(kwargs)
    assert _literal(kwargs["local_enabled"]) is True
    assert _literal(kwargs["remote_enabled"]) is True
    assert _literal(kwargs["use_limited_hybrid"]) is True
    assert _literal(kwargs["remote_cache_enabled"]) is True
    assert _literal(kwargs["remote_execution_use_case"]) == "lre"
    assert _literal(kwargs["remote_output_paths"]) == "output_paths"

    (platform,) = _calls(defs, "ExecutionPlatformInfo")
    assert set(_keywords(platform)) == {"label", "configuration", "executor_config"}
    (registration,) = _calls(defs, "ExecutionPlatformRegistrationInfo")
    assert set(_keywords(registration)) == {"platforms"}


def test_buck2_platform_sends_no_properties_by_default() -> None:
    # The properties are part of every action's key: the platform lre writes
    # adds none of its own (lre's defaults match an empty platform), so a
    # build keys its actions as it would without lre.
    source = (TOOLCHAINS / "buck2" / "defs.bzl").read_text()
    tree = ast.parse(source)
    defaults = [
        node.keywords
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "dict"
    ]
    assert defaults, "the properties attribute is gone"
    for keywords in defaults:
        for keyword in keywords:
            if keyword.arg == "default":
                assert isinstance(keyword.value, ast.Dict) and keyword.value.keys == []
    assert "remote_execution_properties = dict(ctx.attrs.properties)" in source


def test_buck2_target_is_the_one_lre_up_points_at() -> None:
    """`lre up` writes execution_platforms = <cell>//lre_platforms:lre."""
    (target,) = _calls(TOOLCHAINS / "buck2" / "BUCK", "lre_platforms")
    assert _literal(_keywords(target)["name"]) == "lre"
    assert _literal(_keywords(target)["visibility"]) == ["PUBLIC"]
    (load,) = _calls(TOOLCHAINS / "buck2" / "BUCK", "load")
    assert [_literal(a) for a in load.args] == [":defs.bzl", "lre_platforms"]
