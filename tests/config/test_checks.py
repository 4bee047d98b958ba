"""Cross-reference and value checks done at load time."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from .conftest import load, problems


def base() -> dict[str, Any]:
    return {
        "stores": [
            {"name": "local-cas", "filesystem": {"content_path": "/d/cas"}},
            {"name": "mem", "memory": {}},
            {
                "name": "ac",
                "filesystem": {"content_path": "/d/ac", "eviction_policy": {"max_bytes": "1GiB"}},
            },
            {"name": "up-cas", "grpc": {"endpoints": [{"address": "grpcs://up.example:443"}]}},
            {
                "name": "up-ac",
                "grpc": {"endpoints": [{"address": "grpc://up.example:80"}], "store_type": "ac"},
            },
            {"name": "cas", "fast_slow": {"fast": "local-cas", "slow": "up-cas"}},
            {"name": "checked", "verify": {"backend": "cas"}},
        ],
        "schedulers": [
            {
                "name": "main",
                "property_modifier": {
                    "modifications": [{"add": {"name": "cpu_count", "value": "1"}}],
                    "scheduler": "fwd",
                },
            },
            {
                "name": "fwd",
                "forward": {
                    "local": "queue",
                    "endpoint": {"address": "grpcs://up.example:443"},
                    "upstream_cas_store": "up-cas",
                },
            },
            {"name": "queue", "simple": {"ac_store": "ac", "cas_store": "cas"}},
        ],
        "workers": [
            {
                "local": {
                    "name": "w1",
                    "scheduler": "queue",
                    "cas_store": "cas",
                    "work_directory": "/d/w1",
                    "upload_action_result": {"ac_store": "ac"},
                }
            },
            {
                "local": {
                    "name": "w2",
                    "scheduler": "queue",
                    "cas_store": "local-cas",
                    "work_directory": "/d/w2",
                }
            },
        ],
        "servers": [
            {
                "instances": [
                    {
                        "instance_name": "*",
                        "cas_store": "checked",
                        "ac_store": "ac",
                        "scheduler": "main",
                    },
                    {"instance_name": "cache-only", "cas_store": "mem", "ac_store": "up-ac"},
                ]
            },
        ],
    }


def messages_for(config: dict[str, Any]) -> list[str]:
    return problems(json.dumps(config, indent=2))


def test_base_is_valid() -> None:
    config = load(json.dumps(base()))
    assert len(config.stores) == 7


def mutate(path: str, value: Any) -> dict[str, Any]:
    """``base()`` with the value at a dotted path (ints index lists) replaced."""
    config = base()
    node: Any = config
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return copy.deepcopy(config)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            "stores.5.fast_slow.slow",
            "up_cas",
            "stores[5].fast_slow.slow: no store is named 'up_cas'; did you mean 'up-cas'?",
        ),
        (
            "stores.5.fast_slow.fast",
            "up-cas",
            "stores[5].fast_slow.fast: 'up-cas' is a grpc store; the fast tier must be local",
        ),
        ("stores.6.verify.backend", "nope", "stores[6].verify.backend: no store is named 'nope'"),
        (
            "schedulers.2.simple.ac_store",
            "up-cas",
            "schedulers[2].simple.ac_store: store 'up-cas' is a grpc cas store; "
            "an action cache store is needed",
        ),
        (
            "schedulers.2.simple.cas_store",
            "up-ac",
            "schedulers[2].simple.cas_store: store 'up-ac' is a grpc ac store",
        ),
        (
            "schedulers.0.property_modifier.scheduler",
            "mian",
            "schedulers[0].property_modifier.scheduler: no scheduler is named 'mian'",
        ),
        (
            "schedulers.1.forward.local",
            "gone",
            "schedulers[1].forward.local: no scheduler is named",
        ),
        (
            "schedulers.1.forward.upstream_cas_store",
            "cas",
            "schedulers[1].forward.upstream_cas_store: store 'cas' is a fast_slow store; "
            "a grpc store with store_type cas is needed here",
        ),
        (
            "schedulers.1.forward.upstream_cas_store",
            "missing",
            "schedulers[1].forward.upstream_cas_store: no store is named 'missing'",
        ),
        (
            "workers.0.local.scheduler",
            "main",
            "workers[0].local.scheduler: scheduler 'main' is a property_modifier scheduler; "
            "workers take actions from a simple scheduler",
        ),
        ("workers.0.local.scheduler", "nope", "workers[0].local.scheduler: no scheduler is named"),
        (
            "workers.0.local.cas_store",
            "mem",
            "workers[0].local.cas_store: store 'mem' is a memory store; a worker hardlinks inputs",
        ),
        (
            "workers.0.local.cas_store",
            "checked",
            "workers[0].local.cas_store: store 'checked' is a verify",
        ),
        (
            "workers.0.local.upload_action_result.ac_store",
            "checked",
            "workers[0].local.upload_action_result.ac_store: store 'checked' is a verify store",
        ),
        (
            "servers.0.instances.0.cas_store",
            "up-ac",
            "servers[0].instances[0].cas_store: store 'up-ac' is a grpc ac store",
        ),
        (
            "servers.0.instances.1.ac_store",
            "up-cas",
            "servers[0].instances[1].ac_store: store 'up-cas' is a grpc cas store",
        ),
        (
            "servers.0.instances.0.scheduler",
            "nah",
            "servers[0].instances[0].scheduler: no scheduler is named 'nah'",
        ),
        (
            "servers.0.instances.1.instance_name",
            "*",
            "servers[0].instances[1].instance_name: '*' is already served by instances[0]",
        ),
        ("stores.1.name", "ac", "stores[2].name: store name 'ac' is already used by stores[1]"),
        ("stores.1.name", "", "stores[1].name: a store name cannot be empty"),
        ("workers.1.local.name", "w1", "workers[1].local.name: worker name 'w1' is already used"),
        (
            "workers.1.local.work_directory",
            "/d/w1",
            "workers[1].local.work_directory: '/d/w1' is already the work_directory",
        ),
        (
            "stores.1.memory",
            {"eviction_policy": {"max_bytes": 0}},
            "stores[1].memory.eviction_policy.max_bytes: 0 would make the store unbounded",
        ),
        (
            "stores.2.filesystem.eviction_policy",
            {"max_bytes": "1MiB", "evict_bytes": "2MiB"},
            "stores[2].filesystem.eviction_policy.evict_bytes: 2097152 must be below max_bytes",
        ),
        (
            "schedulers.2.simple.resources",
            {"ladder": ["2GiB", "1GiB", "4GiB"]},
            "schedulers[2].simple.resources.ladder[1]: 1073741824 is not above the step before",
        ),
        (
            "schedulers.2.simple.resources",
            {"ladder": []},
            "schedulers[2].simple.resources.ladder: at least one",
        ),
        (
            "workers.0.local.resources",
            {"cpu_count": 0},
            "workers[0].local.resources.cpu_count: 0 must",
        ),
        (
            "schedulers.2.simple.resources",
            {"kill_factor": 0.5},
            "schedulers[2].simple.resources.kill_factor: 0.5 would kill",
        ),
        (
            "schedulers.2.simple.resources",
            {"learner": {"percentile": 150}},
            "schedulers[2].simple.resources.learner.percentile: 150.0 must be in (0, 100]",
        ),
        (
            "schedulers.2.simple.progress_interval_s",
            60,
            "schedulers[2].simple.progress_interval_s: 60 must be above 0 and at most 30",
        ),
        (
            "workers.0.local.max_inflight_tasks",
            -1,
            "workers[0].local.max_inflight_tasks: -1 cannot be negative",
        ),
        (
            "workers.0.local.nice",
            -3,
            "workers[0].local.nice: -3 is not in 0..19",
        ),
        (
            "workers.0.local.default_timeout_s",
            "2h",
            "workers[0].local.default_timeout_s: 7200.0 must be above 0 and at most "
            "max_action_timeout_s",
        ),
        (
            "workers.0.local.limits",
            {"max_tree_depth": 0},
            "workers[0].local.limits.max_tree_depth: 0 must be at least 1",
        ),
        (
            "workers.0.local.limits",
            {"max_tree_entries": 10, "max_tree_directories": 20},
            "workers[0].local.limits.max_tree_directories: 20 is above max_tree_entries (10)",
        ),
        (
            "workers.0.local.limits",
            {"max_output_bytes": 0},
            "workers[0].local.limits.max_output_bytes: must be at least 1 byte",
        ),
        (
            "workers.0.local.sandbox_tmpfs_size",
            0,
            "workers[0].local.sandbox_tmpfs_size: must be at least 1MiB",
        ),
        (
            "servers.0.listener",
            {"address": "0.0.0.0:50051"},
            "servers[0].listener.address: '0.0.0.0:50051' is reachable from other machines",
        ),
        (
            "servers.0.listener",
            {"address": "localhost:99999"},
            "servers[0].listener.address: 'localhost:99999': the port must be 1-65535",
        ),
        (
            "stores.3.grpc.endpoints",
            [{"address": "http://x:1"}],
            "stores[3].grpc.endpoints[0].address: 'http://x:1' is not \"grpc://host:port\"",
        ),
        ("stores.3.grpc.endpoints", [], "stores[3].grpc.endpoints: at least one endpoint"),
        ("servers.0.instances", [], "servers[0].instances: at least one instance is needed"),
        (
            "global",
            {"status": {"address": "0.0.0.0:50061"}},
            "global.status.address: '0.0.0.0:50061' is reachable from other machines",
        ),
    ],
)
def test_reference_and_value_errors(path: str, value: Any, expected: str) -> None:
    messages = messages_for(mutate(path, value))
    assert any(expected in message for message in messages), messages


def test_a_negative_connection_bound_is_refused() -> None:
    config = base()
    config["servers"][0]["listener"] = {"address": "127.0.0.1:0", "max_connections": -1}
    messages = messages_for(config)
    expected = "servers[0].listener.max_connections: -1 cannot be negative (0: no bound)"
    assert any(expected in message for message in messages), messages


def test_store_cycle() -> None:
    config = base()
    config["stores"].append({"name": "a", "verify": {"backend": "b"}})
    config["stores"].append({"name": "b", "fast_slow": {"fast": "local-cas", "slow": "a"}})
    messages = messages_for(config)
    assert any(
        "stores[7]: stores refer to each other in a cycle: a -> b -> a" in m for m in messages
    ), messages


def test_scheduler_cycle() -> None:
    config = mutate("schedulers.1.forward.local", "main")
    messages = messages_for(config)
    assert any(
        "schedulers hand over to each other in a cycle: main -> fwd -> main" in m for m in messages
    ), messages


def test_non_loopback_listener_allowed_with_token() -> None:
    config = mutate("servers.0.listener", {"address": "0.0.0.0:50051", "auth_token_file": "/t"})
    assert load(json.dumps(config)).servers[0].listener.address == "0.0.0.0:50051"


def test_unix_socket_and_ipv6_loopback_listeners() -> None:
    config = base()
    config["servers"].append(
        {
            "name": "unix",
            "listener": {"address": "unix:/run/lre.sock"},
            "instances": [{"cas_store": "cas"}],
        }
    )
    config["servers"].append(
        {"name": "v6", "listener": {"address": "[::1]:50052"}, "instances": [{"cas_store": "cas"}]}
    )
    assert len(load(json.dumps(config)).servers) == 3


def test_check_errors_have_lines() -> None:
    text = json.dumps(mutate("workers.0.local.cas_store", "mem"), indent=2)
    (message,) = problems(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if '"cas_store": "mem"' in row)
    assert message.startswith(f"test.json5:{line}: workers[0].local.cas_store:")


def test_several_check_errors_at_once() -> None:
    config = mutate("workers.0.local.scheduler", "main")
    config["workers"][1]["local"]["cas_store"] = "mem"
    assert len(messages_for(config)) == 2
