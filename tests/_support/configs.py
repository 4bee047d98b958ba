"""Small complete lre configs for tests, and reading one into a ``Config``.

Every directory lives under the ``root`` the test gives; every listener is on
127.0.0.1 (port 0 unless told otherwise).
"""

from __future__ import annotations

from pathlib import Path

from lre.config import Config, resolve
from lre.config._loader import load_config_text

#: Worker properties the integration clients' platforms need: the embedded
#: default config's OSFamily spellings (append to ``app_config_text``'s worker).
WORKER_EXTRA = ', platform_properties: { OSFamily: { values: ["Linux", "linux"] } }'


def app_config_text(
    root: Path,
    *,
    port: int = 0,
    status_port: int | None = None,
    max_inflight: int = 2,
    extra_worker: str = "",
    worker_name: str = "local",
    extra_scheduler: str = "",
) -> str:
    """Filesystem CAS and AC, a property modifier "main" in front of a
    simple scheduler "queue", one local worker with 2 CPUs and 2 GiB, one
    listener serving every instance name. ``extra_worker`` and
    ``extra_scheduler`` are appended to the worker's and the simple
    scheduler's fields (each starting with a comma)."""
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
    {{ name: "queue", simple: {{ ac_store: "ac", cas_store: "cas"{extra_scheduler} }} }},
  ],
  workers: [
    {{ local: {{ name: "{worker_name}", scheduler: "queue", cas_store: "cas",
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


def config_of(text: str, source: str = "test.json5") -> Config:
    """``text`` loaded and resolved; raises lre's config errors naming ``source``."""
    return resolve(load_config_text(text, source=source))
