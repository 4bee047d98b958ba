"""Decoding: types, unknown keys, ONE_OF, env expansion, defaults, lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.config import ConfigError, load_config
from lre.config._loader import load_config_text

from .conftest import ENV, MINIMAL, load, problems


def test_minimal_config_loads_with_defaults() -> None:
    config = load(MINIMAL)
    assert [store.name for store in config.stores] == ["cas", "ac"]
    filesystem = config.stores[0].filesystem
    assert filesystem is not None
    assert filesystem.eviction_policy.max_bytes == "auto"
    assert filesystem.read_buffer_size == 1 << 20
    assert config.servers[0].listener.address == "127.0.0.1:50051"
    assert config.servers[0].instances[0].instance_name == "*"
    assert config.global_.log_level == "info"
    # defaults are ${VAR}-expanded too
    assert config.global_.state_dir == "/home/dev/.local/state/lre"


def test_misspelt_key_names_path_suggestion_and_line() -> None:
    text = MINIMAL.replace(
        '{ name: "ac", memory: {} }',
        '{ name: "ac", memory: {} },\n    '
        '{ name: "m", memory: { eviction_policy: { max_byts: "1GiB" } } }',
    )
    messages = problems(text)
    assert messages == [
        "test.json5:6: stores[2].memory.eviction_policy.max_byts: unknown key; "
        "did you mean 'max_bytes'?"
    ]


@pytest.mark.parametrize("key, why", [("max_seconds", "by age"), ("max_count", "by blob count")])
def test_nativelinks_eviction_keys_are_refused_with_the_reason(key: str, why: str) -> None:
    text = MINIMAL.replace(
        '{ name: "ac", memory: {} }',
        f'{{ name: "ac", memory: {{ eviction_policy: {{ {key}: 10 }} }} }}',
    )
    (message,) = problems(text)
    assert f"stores[1].memory.eviction_policy.{key}: not a setting of lre" in message
    assert why in message and "max_bytes" in message


@pytest.mark.parametrize(
    "key, value",
    [
        ("cold_memory", '"1GiB"'),
        ("ladder", '["1GiB"]'),
        ("max_steps", "3"),
        ("kill_factor", "1.5"),
        ("live_memory_veto", "false"),
        ("learner", "{ enabled: false }"),
    ],
)
def test_scheduler_resource_keys_under_a_worker_are_refused_naming_their_place(
    key: str, value: str
) -> None:
    text = MINIMAL.replace(
        'work_directory: "/data/work"',
        f'work_directory: "/data/work", resources: {{ {key}: {value} }}',
    )
    (message,) = problems(text)
    assert f"workers[0].local.resources.{key}: moved to schedulers[].simple.resources.{key}" in (
        message
    )


def test_scheduler_resource_keys_are_read_from_the_scheduler() -> None:
    text = MINIMAL.replace(
        'simple: { ac_store: "ac", cas_store: "cas" }',
        'simple: { ac_store: "ac", cas_store: "cas", resources: { ladder: ["1GiB", "3GiB"], '
        "kill_factor: 1.5, max_steps: 2, live_memory_veto: false, learner: { enabled: false } } }",
    )
    simple = load(text).schedulers[0].simple
    assert simple is not None
    resources = simple.resources
    assert resources.ladder == (1 << 30, 3 << 30) and resources.kill_factor == 1.5
    assert resources.max_steps == 2 and not resources.live_memory_veto
    assert not resources.learner.enabled


def test_misplaced_key_suggests_nested_path() -> None:
    text = MINIMAL.replace('content_path: "/data/cas"', 'content_path: "/data/cas", max_byts: 5')
    (message,) = problems(text)
    assert (
        "stores[0].filesystem.max_byts: unknown key; did you mean 'eviction_policy.max_bytes'?"
        in message
    )


def test_unknown_key_without_close_match_lists_keys() -> None:
    text = MINIMAL.replace("stores: [", "zzz: 1,\n  stores: [")
    (message,) = problems(text)
    assert message.startswith("test.json5:3: zzz: unknown key; expected one of ")
    assert "global" in message and "global_" not in message


def test_global_key_alias() -> None:
    config = load(MINIMAL.replace("servers:", 'global: { log_level: "debug" },\n  servers:'))
    assert config.global_.log_level == "debug"
    (message,) = problems(MINIMAL.replace("servers:", "global_: {},\n  servers:"))
    assert "global_: unknown key; did you mean 'global'?" in message


def test_all_problems_are_reported_with_values() -> None:
    text = MINIMAL.replace(
        'work_directory: "/data/work"',
        'work_directory: 7, max_inflight_tasks: "many", kill_grace_s: "soon"',
    )
    text = text.replace(
        'content_path: "/data/cas"',
        'content_path: "/data/cas", fsync: "sometimes", eviction_policy: { max_bytes: "10XB" }',
    )
    messages = problems(text)
    joined = "\n".join(messages)
    assert len(messages) == 5, joined
    assert "workers[0].local.work_directory: expected a string, got 7" in joined
    assert (
        'workers[0].local.max_inflight_tasks: expected an integer or "auto", got "many"' in joined
    )
    assert "workers[0].local.kill_grace_s: expected a duration" in joined
    assert 'got "soon"' in joined
    assert (
        'stores[0].filesystem.fsync: expected one of "never", "always", got "sometimes"' in joined
    )
    assert "stores[0].filesystem.eviction_policy.max_bytes:" in joined
    assert "unknown size unit 'XB'" in joined
    assert all(message.startswith("test.json5:") for message in messages)


def test_wrong_container_types() -> None:
    messages = problems(
        MINIMAL.replace("stores: [", 'stores: "cas", old: [').replace("servers: [", "servers: [")
    )
    joined = "\n".join(messages)
    assert 'stores: expected a list, got "cas"' in joined
    messages = problems(MINIMAL.replace('{ name: "ac", memory: {} }', "[1]"))
    assert any("stores[1]: expected an object, got a list" in m for m in messages)


def test_missing_required_key() -> None:
    (message,) = problems(MINIMAL.replace('content_path: "/data/cas"', ""))
    assert message == "test.json5:4: stores[0].filesystem.content_path: required key is missing"


@pytest.mark.parametrize(
    ("replacement", "expected"),
    [
        (
            '{ name: "ac" }',
            "stores[1]: exactly one of memory, filesystem, fast_slow, verify, grpc "
            "must be given; none was",
        ),
        (
            '{ name: "ac", memory: {}, verify: { backend: "cas" } }',
            "stores[1]: exactly one of memory, filesystem, fast_slow, verify, grpc must be given; "
            "memory and verify were",
        ),
    ],
)
def test_one_of(replacement: str, expected: str) -> None:
    messages = problems(MINIMAL.replace('{ name: "ac", memory: {} }', replacement))
    assert any(expected in message for message in messages), messages


def test_env_expansion_in_values() -> None:
    text = (
        MINIMAL.replace('"/data/cas"', '"${CACHE:-/tmp/x}/cas"')
        .replace(
            "servers: [{ instances",
            'servers: [{ listener: { address: "127.0.0.1:${PORT}", max_message_bytes: "${MSG}" },'
            " instances",
        )
        .replace(
            'work_directory: "/data/work"',
            'work_directory: "/data/work", max_inflight_tasks: "${JOBS:-3}", '
            'jobserver: { enabled: "${JS:-false}" }',
        )
    )
    config = load(text, {**ENV, "CACHE": "/c", "PORT": "6000", "MSG": "32MiB"})
    filesystem = config.stores[0].filesystem
    assert filesystem is not None and filesystem.content_path == "/c/cas"
    assert config.servers[0].listener.address == "127.0.0.1:6000"
    assert config.servers[0].listener.max_message_bytes == 32 << 20
    local = config.workers[0].local
    assert local is not None
    assert local.max_inflight_tasks == 3
    assert local.jobserver.enabled is False


def test_unset_variable_names_path_and_variable() -> None:
    text = MINIMAL.replace('"/data/cas"', '"${LRE_TEST_UNSET}/cas"')
    (message,) = problems(text, {"HOME": "/h"})
    assert message.startswith("test.json5:4: stores[0].filesystem.content_path: ")
    assert "environment variable LRE_TEST_UNSET is not set" in message


def test_dollar_escape_in_config() -> None:
    text = MINIMAL.replace('"/data/cas"', '"/data/$$cas"')
    filesystem = load(text).stores[0].filesystem
    assert filesystem is not None and filesystem.content_path == "/data/$cas"


def test_invalid_json5_and_duplicates() -> None:
    (message,) = problems("{ stores: [ }")
    assert message == 'test.json5:1:13: not valid JSON5: Unexpected "}"', message
    # A syntax error names the file, line and column, not json5's "<string>".
    (message,) = problems('{\n  global: {\n    log_level: "info"\n\n}\n')
    assert message == "test.json5:6:1: not valid JSON5: Unexpected end of input", message
    (message,) = problems(MINIMAL.replace("schedulers:", "schedulers: [],\n  schedulers:"))
    assert "Duplicate key" in message


def test_numbers_from_strings_only_when_exact() -> None:
    text = MINIMAL.replace(
        'work_directory: "/data/work"',
        'work_directory: "/data/work", resources: { cpu_overcommit: "1.5" }',
    )
    local = load(text).workers[0].local
    assert local is not None and local.resources.cpu_overcommit == 1.5
    messages = problems(
        MINIMAL.replace(
            'work_directory: "/data/work"', 'work_directory: "/data/work", max_inflight_tasks: 2.5'
        )
    )
    assert 'expected an integer or "auto", got 2.5' in messages[0]
    messages = problems(
        MINIMAL.replace(
            'work_directory: "/data/work"', 'work_directory: "/data/work", max_inflight_tasks: true'
        )
    )
    assert "got true" in messages[0]


def test_load_config_from_file(tmp_path: Path) -> None:
    path = tmp_path / "lre.json5"
    path.write_text(MINIMAL.replace("max_", "max_"))
    assert load_config(path, env=ENV) == load(MINIMAL)
    broken = tmp_path / "broken.json5"
    broken.write_text(
        MINIMAL.replace('scheduler: "queue", cas_store', 'schedular: "queue", cas_store')
    )
    with pytest.raises(ConfigError) as caught:
        load_config(broken, env=ENV)
    assert any(
        m.startswith(f"{broken}:") and "did you mean 'scheduler'?" in m
        for m in caught.value.messages
    )
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / "missing.json5", env=ENV)


def test_config_error_str_joins_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("{}", source="x", env=ENV)
    assert str(caught.value) == "\n".join(caught.value.messages)
    assert len(caught.value.messages) == 2  # stores and servers both missing


def test_a_partial_list_says_it_replaces_the_defaults_whole_list(tmp_path: Path) -> None:
    path = tmp_path / "mine.json5"
    path.write_text('{\n  workers: [ { local: { name: "w" } } ],\n}\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    *missing, note = raised.value.messages
    assert len(missing) == 3 and all(m.endswith("required key is missing") for m in missing)
    assert note.startswith(f"{path}: note: your `workers` list replaces the embedded default's")
