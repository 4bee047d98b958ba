"""The embedded default and the shipped example configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.config import default_config, load_config
from lre.config._loader import default_config_text

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.json5"))


def test_laptop_json5_is_the_embedded_default() -> None:
    assert (ROOT / "configs" / "laptop.json5").read_text() == default_config_text()


def test_the_expected_examples_ship() -> None:
    names = {path.name for path in CONFIGS}
    assert {"laptop.json5", "multi-worker.json5", "ci-runner.json5", "team-cache.json5"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_each_example_loads_and_is_documented(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("//"), "each example starts with a comment saying what it is for"
    config = load_config(path, env={"HOME": "/home/dev"})
    assert config.servers and config.stores


def test_default_layout_under_home() -> None:
    config = default_config({"HOME": "/home/dev"})
    paths = {
        store.name: store.filesystem.content_path
        for store in config.stores
        if store.filesystem is not None
    }
    assert paths == {"cas": "/home/dev/.cache/lre/cas", "ac": "/home/dev/.cache/lre/ac"}
    (worker,) = config.workers
    assert worker.local is not None
    assert worker.local.name == "local"
    assert worker.local.work_directory == "/home/dev/.cache/lre/work"
    assert worker.local.max_inflight_tasks == "auto"
    cas = config.stores[0].filesystem
    assert cas is not None and cas.eviction_policy.max_bytes == "auto"
    assert cas.temp_path.startswith("/home/dev/.cache/lre/tmp")
    (server,) = config.servers
    assert server.listener.address == "127.0.0.1:50051"
    (instance,) = server.instances
    assert (instance.instance_name, instance.cas_store, instance.ac_store) == ("*", "cas", "ac")
    main = next(s for s in config.schedulers if s.name == instance.scheduler)
    assert main.property_modifier is not None
    (modification,) = main.property_modifier.modifications
    assert modification.add is not None
    assert (modification.add.name, modification.add.value) == ("cpu_count", "1")
    queue = next(s for s in config.schedulers if s.name == main.property_modifier.scheduler)
    assert queue.simple is not None
    assert (queue.simple.ac_store, queue.simple.cas_store) == ("ac", "cas")


def test_default_follows_xdg_and_lre_home() -> None:
    xdg = default_config({"HOME": "/home/dev", "XDG_CACHE_HOME": "/xdg"})
    assert xdg.stores[0].filesystem is not None
    assert xdg.stores[0].filesystem.content_path == "/xdg/lre/cas"
    own = default_config({"HOME": "/home/dev", "XDG_CACHE_HOME": "/xdg", "LRE_HOME": "/opt/lre"})
    assert own.stores[0].filesystem is not None
    assert own.stores[0].filesystem.content_path == "/opt/lre/cas"
    assert own.global_.state_dir == "/opt/lre"
    # with LRE_HOME set, HOME is not needed at all
    assert default_config({"LRE_HOME": "/opt/lre"}).stores[0].name == "cas"
