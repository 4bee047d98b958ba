"""The history as ``lre history``, ``builds``, ``trace`` and ``report`` read it.

``read_state_history(state_dir)`` first asks the lre running with that state
dir, if any, to write what it holds (``POST /api/v1/history/flush`` on its
status listener, with its admin token), so a build whose client has its
last reply is whole in the file; then it reads the file directly (lre may
be down). When the running lre cannot be asked (no status listener, the
admin token unreadable, no answer within ``FLUSH_TIMEOUT_S``) it says so
on stderr and reads what is written: the newest second may be missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from lre.cli._daemon import post_admin, read_admin_token, read_pid_file

if TYPE_CHECKING:
    from lre.snapshot import ActionRecord, BuildSpan, BuildSummary, HostSample, ServerStart

__all__ = ["HistoryRead", "flush_running", "read_state_history"]

FLUSH_TIMEOUT_S = 10.0


@dataclass(slots=True)
class HistoryRead:
    """Every line of the history by kind, oldest first."""

    actions: list[ActionRecord] = field(default_factory=list)
    samples: list[HostSample] = field(default_factory=list)
    spans: list[BuildSpan] = field(default_factory=list)
    starts: list[ServerStart] = field(default_factory=list)

    def builds(self) -> list[BuildSummary]:
        """The builds (``lre.snapshot.summarize_builds``), timed by their spans."""
        from lre.snapshot import summarize_builds

        return summarize_builds(self.actions, spans=self.spans, starts=self.starts)


def flush_running(state_dir: Path) -> None:
    """Ask the lre running with ``state_dir`` to write its history now (see
    the module docstring for what happens when it cannot)."""
    server = read_pid_file(state_dir)
    if server is None or not server.alive():
        return
    if not server.status_address:
        typer.echo(
            f"note: lre (pid {server.pid}) has no status listener to ask for its newest "
            "records; the last second may be missing",
            err=True,
        )
        return
    try:
        token = read_admin_token(state_dir)
        post_admin(server, "/api/v1/history/flush", "", token, timeout=FLUSH_TIMEOUT_S)
    except (OSError, ValueError) as error:
        typer.echo(
            f"note: the running lre (pid {server.pid}) did not write its newest records "
            f"({error}); the last second may be missing",
            err=True,
        )


def read_state_history(state_dir: Path) -> HistoryRead:
    """The history in ``state_dir``, after the running lre wrote its newest lines."""
    from lre.snapshot import ActionRecord, BuildSpan, HostSample, ServerStart, read_history

    flush_running(state_dir)
    read = HistoryRead()
    for line in read_history(state_dir):
        if isinstance(line, ActionRecord):
            read.actions.append(line)
        elif isinstance(line, HostSample):
            read.samples.append(line)
        elif isinstance(line, BuildSpan):
            read.spans.append(line)
        elif isinstance(line, ServerStart):
            read.starts.append(line)
    return read
