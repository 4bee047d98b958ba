"""The snapshot model: what lre shows of itself, as plain frozen data.

``ProcessSnapshot`` is one picture of the whole process; its rows are
``InflightAction``, ``WorkerRow``, ``StoreRow``, ``UpstreamRow``,
``JobserverTokens`` and ``RecentEvent`` (tagged with an ``EventKind``).
A snapshot round-trips through JSON (``to_json`` / ``from_json``,
``dumps`` / ``loads``; ``from_json`` raises ``ValueError`` naming the field
when the document is not a snapshot of ``SCHEMA_VERSION``), which is how
``lre top`` and ``lre stats`` read one from ``/api/v1/stats``.
``action_summary`` is the one rule for what an action is called.

This package imports only the standard library, so the dashboard and the
scheduler can both use it without loading the server. The composition root
(``lre.app``) builds snapshots from the live components.
"""

from lre.snapshot._events import EventKind, RecentEvent
from lre.snapshot._process import SCHEMA_VERSION, ProcessSnapshot
from lre.snapshot._rows import (
    InflightAction,
    JobserverTokens,
    StoreRow,
    UpstreamRow,
    WorkerRow,
)
from lre.snapshot._summary import action_summary

__all__ = [
    "SCHEMA_VERSION",
    "EventKind",
    "InflightAction",
    "JobserverTokens",
    "ProcessSnapshot",
    "RecentEvent",
    "StoreRow",
    "UpstreamRow",
    "WorkerRow",
    "action_summary",
]
