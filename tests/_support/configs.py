"""Small complete lre configs for tests, and reading one into a ``Config``.

Every directory lives under the ``root`` the test gives; every listener is on
127.0.0.1 (port 0 unless told otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lre.config import Config, resolve
from lre.config._loader import load_config_text

#: Worker properties the integration clients' platforms need: the embedded
#: default config's OSFamily spellings (append to ``app_config_text``'s worker).
WORKER_EXTRA = ', platform_properties: { OSFamily: { values: ["Linux", "linux"] } }'


def filesystem_store(root: Path, name: str, max_bytes: str = "1GiB", *, directory: str = "") -> str:
    """A filesystem store ``name`` in ``root/<directory>`` (default: its
    name), temp files in ``root/tmp/<directory>``."""
    directory = directory or name
    return f"""{{ name: "{name}", filesystem: {{ content_path: "{root}/{directory}",
        temp_path: "{root}/tmp/{directory}",
        eviction_policy: {{ max_bytes: "{max_bytes}" }} }} }}"""


#: A property modifier "main" (adds ``cpu_count: 1``) in front of "queue".
MAIN_MODIFIER = """{ name: "main", property_modifier: {
        modifications: [{ add: { name: "cpu_count", value: "1" } }], scheduler: "queue" } }"""


def simple_scheduler(fields: str = "") -> str:
    """A simple scheduler "queue" over stores "cas" and "ac"; ``fields``
    (starting with a comma) are appended."""
    return f'{{ name: "queue", simple: {{ ac_store: "ac", cas_store: "cas"{fields} }} }}'


#: A local worker's default resources: 2 CPUs and 2 GiB.
RESOURCES = 'cpu_count: 2, memory_budget: "2GiB"'


def local_worker(
    root: Path,
    *,
    name: str = "local",
    max_inflight: int | str = 2,
    resources: str = RESOURCES,
    work: str = "work",
    upload: str = 'ac_store: "ac"',
    fields: str = "",
) -> str:
    """A local worker of scheduler "queue" over store "cas" with
    ``resources``, uploading results as ``upload`` says, working in
    ``root/<work>``; ``fields`` (starting with a comma) are appended."""
    return f"""{{ local: {{ name: "{name}", scheduler: "queue", cas_store: "cas",
        work_directory: "{root}/{work}", max_inflight_tasks: {max_inflight},
        upload_action_result: {{ {upload} }},
        resources: {{ {resources} }}{fields} }} }}"""


def config_text(
    root: Path,
    *,
    stores: Sequence[str] = (),
    schedulers: Sequence[str] = (),
    workers: Sequence[str] | None = None,
    front: str = "main",
    ac_store: str | None = "ac",
    port: int = 0,
    status: str = "",
    extra_global: str = "",
    listener: str = "",
) -> str:
    """A whole config: ``stores`` (default filesystem "cas" and "ac"),
    ``schedulers`` (default ``MAIN_MODIFIER`` and a simple "queue"),
    ``workers`` (default one ``local_worker``), and one listener on
    ``port`` (or with the fields ``listener``) serving every instance name
    through scheduler ``front``;
    ``extra_global`` (starting with a comma) is appended to ``global``."""
    stores = stores or [filesystem_store(root, "cas"), filesystem_store(root, "ac", "64MiB")]
    schedulers = schedulers or [MAIN_MODIFIER, simple_scheduler()]
    workers = [local_worker(root)] if workers is None else workers
    ac = f', ac_store: "{ac_store}"' if ac_store else ""
    listener = listener or f'address: "127.0.0.1:{port}"'
    return f"""{{
  stores: [{", ".join(stores)}],
  schedulers: [{", ".join(schedulers)}],
  workers: [{", ".join(workers)}],
  servers: [
    {{ listener: {{ {listener} }},
      instances: [{{ instance_name: "*", cas_store: "cas"{ac}, scheduler: "{front}" }}] }},
  ],
  global: {{ state_dir: "{root}/state", status: {{ address: "{status}" }}{extra_global} }},
}}
"""


def app_config_text(
    root: Path,
    *,
    port: int = 0,
    status_port: int | None = None,
    max_inflight: int | str = 2,
    extra_worker: str = "",
    worker_name: str = "local",
    extra_scheduler: str = "",
    resources: str = RESOURCES,
    cas_bytes: str = "1GiB",
    extra_stores: Sequence[str] = (),
    extra_global: str = "",
    listener: str = "",
) -> str:
    """``config_text``'s defaults: filesystem CAS (``cas_bytes``) and AC
    besides ``extra_stores``, a property modifier "main" in front of a simple
    scheduler "queue", one local worker with ``resources``.
    ``extra_worker``, ``extra_scheduler`` and ``extra_global`` are appended
    to the worker's, the simple scheduler's and ``global``'s fields (each
    starting with a comma)."""
    return config_text(
        root,
        stores=[
            *extra_stores,
            filesystem_store(root, "cas", cas_bytes),
            filesystem_store(root, "ac", "64MiB"),
        ],
        schedulers=[MAIN_MODIFIER, simple_scheduler(extra_scheduler)],
        workers=[
            local_worker(
                root,
                name=worker_name,
                max_inflight=max_inflight,
                resources=resources,
                fields=extra_worker,
            )
        ],
        port=port,
        status=f"127.0.0.1:{status_port}" if status_port is not None else "",
        extra_global=extra_global,
        listener=listener,
    )


def config_of(text: str, source: str = "test.json5") -> Config:
    """``text`` loaded and resolved; raises lre's config errors naming ``source``."""
    return resolve(load_config_text(text, source=source))
