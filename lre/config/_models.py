"""The root config model, ``Config``, and its process-wide sections (global, client).

The other sections' models are in ``_store_models``, ``_scheduler_models``,
``_worker_models`` and ``_server_models``; the conventions every model
follows are in ``_model_fields``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from lre.config._model_fields import ByteSize, doc
from lre.config._scheduler_models import SchedulerSpec
from lre.config._server_models import ServerSpec
from lre.config._store_models import StoreSpec
from lre.config._worker_models import WorkerSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusSpec:
    address: str = doc(
        "HTTP listener for /status, /metrics and /api/v1/stats (port 1-65535, or 0 for any "
        'free port); "" disables it. When `lre up --port P` finds this port taken, it moves '
        "to P+10, else to any free port; `lre status` prints where it is.",
        default="127.0.0.1:50061",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySpec:
    enabled: bool = doc(
        "Record every finished action in the state dir (lre history, builds, trace, report).",
        default=True,
    )
    max_bytes: ByteSize = doc(
        "Bound of the history on disk (two rotating files of half this each; the oldest "
        "actions go first). About 500 bytes per action.",
        default=ByteSize(64 << 20),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GlobalSpec:
    state_dir: str = doc(
        "lre's own state: pid file, logs, learned reservations.",
        default="${LRE_HOME:-${XDG_STATE_HOME:-${HOME}/.local/state}/lre}",
    )
    max_open_files: int = doc(
        "Raise the soft RLIMIT_NOFILE to this at start, up to 128 below the hard limit: "
        "those 128 are kept for lre's own upkeep when clients hold every other descriptor "
        "(docs/security.md).",
        default=24576,
    )
    log_level: Literal["debug", "info", "warning", "error"] = doc(
        "Lowest level logged.", default="info"
    )
    status: StatusSpec = doc("HTTP status and metrics listener.", default_factory=StatusSpec)
    history: HistorySpec = doc("The action history in the state dir.", default_factory=HistorySpec)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSpec:
    exec_properties: dict[str, str] | None = doc(
        "Platform properties the client config `lre up` writes sends with every action. "
        "null = none: actions keep the platform the repository's own flags give them (what "
        "lre needs to run them it adds on the server side), so a laptop's action digests "
        "equal CI's. Set it only to what the team's own clients send as well.",
        default=None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    stores: tuple[StoreSpec, ...] = doc("Blob stores and action caches.")
    servers: tuple[ServerSpec, ...] = doc("gRPC listeners.")
    schedulers: tuple[SchedulerSpec, ...] = doc("Schedulers.", default=())
    workers: tuple[WorkerSpec, ...] = doc("Workers running in this process.", default=())
    global_: GlobalSpec = doc(
        'Process-wide settings (JSON key "global").', default_factory=GlobalSpec
    )
    client: ClientSpec = doc(
        "What the client config written by `lre up` sends.", default_factory=ClientSpec
    )

    #: JSON keys that differ from the Python field name.
    KEY_ALIASES: ClassVar[dict[str, str]] = {"global": "global_"}
