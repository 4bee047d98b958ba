"""Rows of ``/status``, ``/metrics`` and the TUI for every upstream connection.

One row per grpc store (its read-through counters) and one per forward
scheduler (its Execution client, with what was forwarded, what fell back to
the local workers and what was refused, by reason or gRPC code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lre.scheduler import ForwardStatistics
from lre.snapshot import UpstreamRow
from lre.upstream import UpstreamStatistics


def _row(stats: UpstreamStatistics, extra: Mapping[str, int] | None = None) -> UpstreamRow:
    counters = dict(stats.counters)
    counters.update(extra or {})
    return UpstreamRow(
        name=stats.name,
        address=stats.address,
        state=stats.state,
        last_error=stats.last_error,
        calls=stats.calls,
        failed_calls=stats.failed_calls,
        retries=stats.retries,
        counters=dict(sorted(counters.items())),
    )


def _forward_counters(stats: ForwardStatistics) -> dict[str, int]:
    out = {f"forwarded_{reason}": n for reason, n in stats.forwarded.items()}
    out.update({f"fallback_{code}": n for code, n in stats.fallbacks.items()})
    out.update({f"refused_{code}": n for code, n in stats.refused.items()})
    out["completed_upstream"] = stats.completed_upstream
    out["failed_upstream"] = stats.failed_upstream
    out["fell_back_local"] = stats.fell_back_local
    out["forwarded_inflight"] = len(stats.inflight)
    return out


def upstream_rows(
    stores: Iterable[UpstreamStatistics], forwarders: Iterable[ForwardStatistics]
) -> list[UpstreamRow]:
    """Rows for the grpc stores' clients, then the forward schedulers'."""
    rows = [_row(stats) for stats in stores]
    rows += [_row(f.upstream, _forward_counters(f)) for f in forwarders]
    return rows
