"""``lre history`` (recent actions) and ``lre builds`` / ``lre builds show`` (builds).

These read the history files in the state dir directly (``lre.snapshot``'s
``read_history``), so they work while lre is down and never load the
server. The state dir is the one of ``--config`` (else the embedded
default config, i.e. ``$LRE_HOME`` or ``~/.local/state/lre``). A running
lre is asked first to write what it holds (``_history_read``), so a build
whose client has its last reply is whole. Exit status 1 with a message
when the build asked for is unknown.
``lre.snapshot`` is imported when a command runs, not when ``lre`` starts.
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lre.cli._app import app, command_group
from lre.cli._byte_text import human_bytes
from lre.cli._config_cmd import config_option
from lre.cli._history_read import HistoryRead, read_state_history
from lre.cli._running import look_up

if TYPE_CHECKING:
    from lre.snapshot import ActionRecord, BuildSummary

__all__ = ["duration_text", "history_dir", "table"]

ConfigOption = Annotated[
    Path | None,
    config_option(
        "Config whose state dir holds the history ($LRE_HOME with the embedded default)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

builds_app = command_group(
    "builds",
    "Recent builds (by the client's tool invocation id), from the history.",
    runs_alone=True,
)


def history_dir(config: Path | None) -> Path:
    """The state dir of ``config`` (or the default config), where the history is."""
    return look_up(config).state_dir


def duration_text(seconds: float) -> str:
    if seconds >= 60:
        return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"
    if seconds >= 1:
        return f"{seconds:.2f}s"
    return f"{seconds * 1000:.1f}ms"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """Columns as wide as their widest cell; ``numeric`` columns right-aligned."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def _read(config: Path | None) -> HistoryRead:
    return read_state_history(history_dir(config))


def record_json(record: ActionRecord) -> dict[str, Any]:
    """One record for ``--json`` (full field names, phases in seconds)."""
    return {
        "finished_at": record.at,
        "source": record.source.value,
        "invocation": record.invocation,
        "repository": record.repository,
        "tool": record.tool,
        "instance": record.instance,
        "target": record.target,
        "mnemonic": record.mnemonic,
        "action_digest": record.action,
        "worker": record.worker,
        "exit_code": record.exit_code,
        "error": record.error,
        "wall_s": round(record.wall_seconds, 4),
        "phases_s": {s.phase.value: round(s.seconds, 4) for s in record.spans},
        "waited_for": list(record.waited_for),
        "reserved_millicpus": record.reserved_millicpus,
        "reserved_memory_bytes": record.reserved_memory_bytes,
        "peak_rss_bytes": record.peak_rss_bytes,
        "memory_source": record.memory_source,
        "cpu_s": round(record.cpu_seconds, 4),
        "attempts": record.attempts,
        "kills": record.kills,
        "kill_reason": record.kill_reason,
        "killed_for_good": record.kill_ended,
        "memory_retries": record.memory_retries,
        "cancelled": record.cancelled,
        "retries": record.retries,
        "freezes": record.freezes,
    }


#: Printed under a table whose peaks carry ``memory_mark``s.
PEAK_LEGEND = (
    "peak: s sampled (RSS plus private tmpfs), k the kernel's rusage of the action's "
    "reaped processes (it ended before its first sample, or its largest process peaked "
    "between samples); <lre: it ended before its first sample, below lre's own size"
)


def peak_text(peak_bytes: int, source: str) -> str:
    """A memory figure with its source's mark (``lre.snapshot.memory_mark``)."""
    from lre.snapshot import MEMORY_BELOW_IMAGE, memory_mark

    if source == MEMORY_BELOW_IMAGE:
        return "<lre k"
    if not peak_bytes:
        return "-"
    mark = memory_mark(source)
    return f"{human_bytes(peak_bytes)} {mark}" if mark else human_bytes(peak_bytes)


def _main_repo(label: str) -> str:
    """``@//pkg:x`` and ``@@//pkg:x`` (Bazel's spellings of the main repository) as ``//pkg:x``."""
    return label.lstrip("@") if label.lstrip("@").startswith("//") else label


def target_matches(target: str, pattern: str) -> bool:
    """Whether the recorded ``target`` label is one ``pattern`` names, as Bazel
    reads a target pattern: ``//pkg/...`` (the package and every package under
    it; ``//...`` is everything), ``//pkg:all`` or ``//pkg:*`` (the package's
    targets), ``//pkg`` (``//pkg:pkg``); else a glob (``*?[``) or the label."""
    target, pattern = _main_repo(target), _main_repo(pattern)
    if pattern.endswith("/..."):
        package = pattern.removesuffix("/...")
        if package in ("/", ""):
            return target.startswith("//")
        return target.startswith((package + ":", package + "/"))
    if pattern.endswith((":all", ":*", ":all-targets")):
        return target.partition(":")[0] == pattern.rpartition(":")[0]
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(target, pattern)
    if pattern.startswith("//") and ":" not in pattern:
        pattern = f"{pattern}:{pattern.rpartition('/')[2]}"
    return target == pattern


def _outcome(record: ActionRecord) -> str:
    if record.cancelled:
        return "cancelled"
    if record.kill_ended and record.exit_code is not None:
        return f"{record.exit_code} killed"
    if record.error:
        return record.error
    if record.exit_code is None:
        return "-"
    return str(record.exit_code)


#: ``--repo`` of ``history`` and ``builds``: one matching rule for both.
RepoOption = Annotated[
    str | None,
    typer.Option(
        "--repo",
        "-r",
        help="Only builds of this repository (its name as the repo column shows "
        "it, or a glob such as 'app-*').",
        show_default="every repository",
    ),
]


@app.command("history")
def history(
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            "-t",
            help="Only these targets: a label, a Bazel target pattern (//pkg/..., "
            "//pkg:all) or a glob ('//pkg*').",
            show_default="every target",
        ),
    ] = None,
    build: Annotated[
        str | None,
        typer.Option(
            "--build",
            "-b",
            help="Only this build (id, prefix or 'last').",
            show_default="every build",
        ),
    ] = None,
    repo: RepoOption = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="The newest N actions.")] = 50,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Recent actions: repository, target, mnemonic, wall time, queue wait and why,
    reservation, peak RSS, exit code, kills and retries (newest last)."""
    from lre.snapshot import WAIT_TEXT, find_build

    read = _read(config)
    records = read.actions
    summaries = read.builds()
    if build is not None:
        try:
            wanted = find_build(summaries, build)
        except LookupError as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(1) from None
        records = [r for r in records if r.invocation == wanted.invocation]
    if repo is not None:
        # An action counts under its build's repository: a client may name it
        # on some calls only (an lre.bazelrc written before the header went on
        # every call named it on Execute only, not on GetActionResult).
        of_build = {b.invocation: b.repository for b in summaries}
        records = [
            r
            for r in records
            if _repo_matches(r.repository or of_build.get(r.invocation, ""), repo)
        ]
        if not records:
            if as_json:
                typer.echo("[]")
            else:
                typer.echo(_no_such_repo(repo, summaries, "action"))
            return
    recorded = len(records)
    if target is not None:
        records = [r for r in records if target_matches(r.target, target)]
    records = records[-limit:] if limit > 0 else records
    if as_json:
        typer.echo(json.dumps([record_json(r) for r in records], indent=2))
        return
    if not records:
        if target is not None and recorded:
            typer.echo(
                f"no action of {target} among the {recorded} recorded; a target pattern "
                "such as //pkg/..., //pkg:all or a glob ('//pkg*') widens it"
            )
            return
        typer.echo("no actions recorded (yet) in " + str(history_dir(config)))
        return
    rows = []
    repositories = {b.invocation: b.repository for b in summaries}
    for r in records:
        cpus = f"{r.reserved_millicpus / 1000:g}" if r.reserved_millicpus else "-"
        memory = human_bytes(r.reserved_memory_bytes) if r.reserved_memory_bytes else "-"
        rows.append(
            [
                _when(r.at)[11:],
                r.repository or repositories.get(r.invocation, "") or "-",
                *_named(r),
                r.source.value,
                duration_text(r.wall_seconds),
                duration_text(r.queue_seconds),
                ", ".join(WAIT_TEXT.get(w, w) for w in r.waited_for) or "-",
                f"{cpus} / {memory}",
                peak_text(r.peak_rss_bytes, r.memory_source),
                _outcome(r),
                f"{r.kills}/{r.retries}",
            ]
        )
    header = [
        "time",
        "repo",
        "target",
        "mnemonic",
        "source",
        "wall",
        "queued",
        "waited for",
        "reserved cpu/mem",
        "peak",
        "exit",
        "kills/retries",
    ]
    typer.echo(table(header, rows, numeric={5, 6, 9}))
    typer.echo(PEAK_LEGEND)


def _repo_matches(repository: str, pattern: str) -> bool:
    return repository == pattern or fnmatch.fnmatchcase(repository, pattern)


def _build_of_repo(build: BuildSummary, pattern: str) -> bool:
    """Whether one of the repositories ``build`` names (``"a, b"`` when its
    client named several) is ``pattern``, by the rule of ``history --repo``."""
    return any(_repo_matches(name, pattern) for name in build.repository.split(", ") if name)


def _no_such_repo(pattern: str, summaries: list[BuildSummary], what: str) -> str:
    """What ``--repo pattern`` says when nothing matched: the names it could be."""
    known = sorted({name for b in summaries for name in b.repository.split(", ") if name})
    return f"no {what} of repository {pattern!r} recorded; repositories in the history: " + (
        ", ".join(known) or "none (lre link names them)"
    )


def _builds(config: Path | None) -> list[BuildSummary]:
    return _read(config).builds()


def _state(b: BuildSummary) -> str:
    """A build's duration as the table shows it, marked when lre died under it."""
    text = duration_text(b.duration_s)
    return text + " cut short" if b.cut_short else text


@builds_app.callback()
def builds(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", help="The newest N builds.")] = 20,
    repo: RepoOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Recent builds: repository, start, duration (first request to last reply),
    client, instance and what they did; "cut short" when lre stopped under one
    without ending it (kill -9, a crash)."""
    if ctx.invoked_subcommand is not None:
        return
    found = every = _builds(config)
    if repo is not None:
        found = [b for b in every if _build_of_repo(b, repo)]
    found = found[-limit:] if limit > 0 else found
    if as_json:
        typer.echo(json.dumps([b.to_json() for b in found], indent=2))
        return
    if not found:
        if repo is not None and every:
            typer.echo(_no_such_repo(repo, every, "build"))
        else:
            typer.echo("no builds recorded (yet) in " + str(history_dir(config)))
        return
    rows = [
        [
            b.invocation[:12] or "(no id)",
            b.repository or "-",
            _when(b.started_at),
            _state(b),
            b.client or "?",
            b.instance or "?",
            str(b.executed),
            str(b.cache_hits),
            str(b.failed),
            str(b.cancelled),
            str(b.killed),
            f"{b.share:.0%}",
        ]
        for b in found
    ]
    header = ["build", "repo", "started", "duration", "client", "instance", "run", "cached"]
    header += ["failed", "cancelled", "killed", "share"]
    typer.echo(table(header, rows, numeric={6, 7, 8, 9, 10, 11}))
    if any(b.cut_short for b in found):
        typer.echo(
            "cut short: lre stopped during the build without ending it (kill -9, a crash); "
            "the client saw its calls fail, and actions still running then are not counted"
        )


def _named(record: ActionRecord) -> tuple[str, str]:
    """The target and mnemonic cells of ``record``'s row."""
    return record.target or "?", record.mnemonic or "-"


def summary_text(b: BuildSummary) -> str:
    """``lre builds show`` as text."""
    from lre.snapshot import Phase

    lines = [
        f"build      {b.invocation or '(no id)'}",
        f"repository {b.repository or '-'}",
        f"client     {b.client or '?'}   instance {b.instance or '?'}",
        f"started    {_when(b.started_at)}   duration {duration_text(b.duration_s)}"
        " (first request to last reply)",
        *(
            [
                "cut short  lre stopped during this build without ending it (kill -9, a "
                "crash); actions still running then are not counted"
            ]
            if b.cut_short
            else []
        ),
        f"executed   {b.executed}",
        f"from cache {b.cache_hits} (Execute {b.execute_hits}, GetActionResult {b.lookup_hits})",
        f"failed     {b.failed}   cancelled {b.cancelled}   not run {b.not_run}",
        f"killed     {b.killed} for their memory (lre ran {b.memory_retried} of them again "
        f"one ladder step up)   frozen {b.frozen}",
        f"retried    {b.retried} by lre after an infrastructure failure   "
        f"re-submitted by the client {b.resubmitted}",
        f"share      {b.share:.0%} of the run time of the actions that ran meanwhile"
        f"   waited for other builds {b.share_waits}",
        f"queue wait p50 {duration_text(b.queue_p50_s)}   p95 {duration_text(b.queue_p95_s)}",
        f"lre's own time per action {duration_text(b.lre_per_action_s)} (staging + storing)",
        f"peak memory of one action {human_bytes(b.peak_rss_bytes)}"
        + (f" ({b.peak_memory_source})" if b.peak_memory_source else ""),
    ]
    if b.killed_actions:
        rows = [
            [
                *_named(r),
                duration_text(r.phase_seconds(Phase.RUNNING)),
                human_bytes(r.peak_rss_bytes),
                str(r.kills),
                "gave up" if r.kill_ended else "ran again",
                r.kill_reason or "-",
            ]
            for r in b.killed_actions
        ]
        header = ["target", "mnemonic", "running", "peak RSS", "kills", "lre", "why"]
        lines += ["", "killed for their memory:", table(header, rows, numeric={2, 3, 4})]
    if b.failed_actions:
        more = f" (the first {len(b.failed_actions)})" if b.failed > len(b.failed_actions) else ""
        rows = [[*_named(r), _outcome(r), r.action[:12] or "-"] for r in b.failed_actions]
        header = ["target", "mnemonic", "exit", "action"]
        lines += ["", f"failed actions{more}:", table(header, rows, numeric=set())]
    if b.slowest:
        rows = [
            [
                *_named(r),
                duration_text(r.wall_seconds),
                duration_text(r.phase_seconds(Phase.QUEUED)),
                duration_text(r.phase_seconds(Phase.RUNNING)),
                peak_text(r.peak_rss_bytes, r.memory_source),
            ]
            for r in b.slowest
        ]
        header = ["target", "mnemonic", "wall", "queued", "running", "peak"]
        lines += ["", "slowest actions:", table(header, rows, numeric={2, 3, 4, 5}), PEAK_LEGEND]
    return "\n".join(lines)


@builds_app.command("show")
def show(
    build: Annotated[str, typer.Argument(help="A build id, a unique prefix, or 'last'.")] = "last",
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """One build's summary: executed, from the cache, killed, failed, queue wait,
    lre's own time, peak memory and the slowest actions."""
    from lre.snapshot import find_build

    try:
        found = find_build(_builds(config), build)
    except LookupError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(found.to_json(), indent=2))
    else:
        typer.echo(summary_text(found))
