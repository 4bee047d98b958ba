"""Configs for starting whole lre applications in tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.config import Config, load_config_text, resolve


def app_config_text(
    root: Path,
    *,
    port: int = 0,
    status_port: int | None = None,
    max_inflight: int = 2,
    extra_worker: str = "",
) -> str:
    """A small complete config with every directory under ``root``."""
    status = f"127.0.0.1:{status_port}" if status_port is not None else ""
    return f"""{{
  stores: [
    {{ name: "cas", filesystem: {{ content_path: "{root}/cas", temp_path: "{root}/tmp/cas",
                                  eviction_policy: {{ max_bytes: "1GiB" }} }} }},
    {{ name: "ac", filesystem: {{ content_path: "{root}/ac", temp_path: "{root}/tmp/ac",
                                 eviction_policy: {{ max_bytes: "64MiB" }} }} }},
  ],
  schedulers: [
    {{ name: "main", property_modifier: {{
        modifications: [{{ add: {{ name: "cpu_count", value: "1" }} }}], scheduler: "queue" }} }},
    {{ name: "queue", simple: {{ ac_store: "ac", cas_store: "cas" }} }},
  ],
  workers: [
    {{ local: {{ name: "local", scheduler: "queue", cas_store: "cas",
                work_directory: "{root}/work", max_inflight_tasks: {max_inflight},
                upload_action_result: {{ ac_store: "ac" }},
                resources: {{ cpu_count: 2, memory_budget: "2GiB" }} {extra_worker} }} }},
  ],
  servers: [
    {{ listener: {{ address: "127.0.0.1:{port}" }},
      instances: [{{ instance_name: "*", cas_store: "cas", ac_store: "ac", scheduler: "main" }}] }},
  ],
  global: {{ state_dir: "{root}/state", status: {{ address: "{status}" }} }},
}}
"""


@pytest.fixture
def app_config(tmp_path: Path) -> Config:
    return resolve(load_config_text(app_config_text(tmp_path), source="test.json5"))
