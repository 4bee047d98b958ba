"""``lre cache`` (size, entries, hit rate), ``lre cache clean`` and ``lre cache gc``.

Figures come from the running lre when there is one (its ``/api/v1/stats``:
live counts, and the hit rate since it started), else from the disk
(``lre.cas.content_usage``, which only reads). Action-cache entries are
always counted on disk.

``clean`` and ``gc`` run through the running lre when there is one (its
status listener's POST routes, ``lre.app.CacheAdmin``: the server keeps the
CAS index in memory, so only it can shrink the CAS safely), else offline:
they open each filesystem store as the server would (which also removes
uploads a crash left behind) and evict least recently used blobs through
``FilesystemStore.evict_to``; ``clean`` also empties the action caches.
Either way blobs under the cache contract (told to a client within
``eviction_policy.keep_told``, known offline from the files' mtimes) stay
unless ``--force``, which then prints what Bazel and Buck2 must do
(``lre.cli._force_steps``: for the Bazel on PATH and this repository's flags).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from lre.cli._app import command_group
from lre.cli._byte_text import human_bytes, size_option
from lre.cli._daemon import post_admin, read_admin_token
from lre.cli._force_steps import after_force_steps_here
from lre.cli._local_stores import LocalStores, LocalStoresError, local_stores
from lre.cli._quarantine_report import quarantine_entries, quarantine_lines
from lre.cli._running import Lookup, look_up
from lre.cli._up import ConfigOption

if TYPE_CHECKING:
    from lre.cas import FilesystemStore

T = TypeVar("T")

cache_app = command_group(
    "cache", "Size, entries and hit rate of lre's cache; clean it or shrink it.", runs_alone=True
)


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """One store as ``lre cache`` prints it (``max_bytes`` 0: not bounded;
    for an action cache, the size its log is compacted to)."""

    name: str
    kind: str  # "cas" or "action_cache"
    path: str
    entries: int
    bytes: int
    max_bytes: int


def _stores_of(lookup: Lookup) -> LocalStores:
    try:
        return local_stores(lookup.config)
    except LocalStoresError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


def _action_cache_figures(stores: LocalStores) -> list[StoreFigures]:
    import trio

    async def count() -> list[StoreFigures]:
        out = []
        for name, cache in stores.action_caches:
            usage = await cache.usage()
            out.append(
                StoreFigures(
                    name,
                    "action_cache",
                    cache.path,
                    usage.count,
                    usage.stored_bytes,
                    cache.max_bytes or 0,
                )
            )
        return out

    return trio.run(count)


def _disk_figure(name: str, store: FilesystemStore) -> StoreFigures:
    from lre.cas import content_usage

    usage = content_usage(store.content_path)
    return StoreFigures(
        name, "cas", store.content_path, usage.count, usage.stored_bytes, store.max_bytes
    )


def _disk_figures(stores: LocalStores) -> list[StoreFigures]:
    return [_disk_figure(name, store) for name, store in stores.blobs]


def _live_figures(stores: LocalStores, data: dict[str, Any]) -> list[StoreFigures]:
    """The CAS figures from a ``/api/v1/stats`` document (from disk for a
    store it does not list)."""
    rows = {str(row["name"]): row for row in data.get("stores", ())}
    out = []
    for name, store in stores.blobs:
        row = rows.get(name)
        if row is None:
            out.append(_disk_figure(name, store))
            continue
        out.append(
            StoreFigures(
                name,
                "cas",
                store.content_path,
                int(row["blob_count"]),
                int(row["used_bytes"]),
                int(row["max_bytes"]),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Lookups:
    """Action-cache lookups since the counts were last zeroed (``lre stats
    --zero``; they survive restarts), counted per action: a hit is
    an action answered from the action cache, by GetActionResult (Bazel and
    Buck2 ask that first) or by Execute (lre's scheduler looks there before
    running anything); a miss is an action lre had to run."""

    get_action_result_hits: int
    execute_hits: int
    misses: int

    @property
    def hits(self) -> int:
        return self.get_action_result_hits + self.execute_hits

    @property
    def rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None


def since_text(live: dict[str, Any]) -> str:
    """``since 2026-12-07 09:12`` (local time): when the hit counts began (the
    first count, or the last ``lre stats --zero``); ``counted so far`` unknown."""
    since = float(live.get("client_hits_since", 0.0) or 0.0)
    if since <= 0:
        return "counted so far"
    return "since " + time.strftime("%Y-%m-%d %H:%M", time.localtime(since))


def _lookups(live: dict[str, Any]) -> Lookups:
    """The client-visible lookups of a ``/api/v1/stats`` document (kept across
    restarts since ``client_hits_since``)."""
    return Lookups(
        get_action_result_hits=int(live.get("client_get_action_result_hits", 0)),
        execute_hits=int(live.get("client_execute_hits", 0)),
        misses=int(live.get("client_misses", 0)),
    )


@cache_app.callback()
def cache_summary(
    ctx: typer.Context,
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the cache's size, entries and hit rate (live when lre runs, else from disk)."""
    if ctx.invoked_subcommand is not None:
        return
    lookup = look_up(config_path)
    stores = _stores_of(lookup)
    live: dict[str, Any] | None = None
    problem = ""
    if lookup.server is not None and lookup.server.status_address:
        from lre.tui import fetch_snapshot_json

        try:
            live = fetch_snapshot_json(lookup.server.status_address)
        except (OSError, ValueError) as error:
            problem = str(error)
    figures = _live_figures(stores, live) if live is not None else _disk_figures(stores)
    figures += _action_cache_figures(stores)
    lookups = _lookups(live) if live is not None else None
    if as_json:
        document = {
            "running": lookup.server is not None,
            "source": "live" if live is not None else "disk",
            "stores": [asdict(f) for f in figures],
            "hits": lookups.hits if lookups else None,
            "misses": lookups.misses if lookups else None,
            "hit_rate": lookups.rate if lookups else None,
            "lookups": asdict(lookups) if lookups else None,
            "quarantine": [
                {"path": str(e.path), "reason": e.reason} for e in quarantine_entries(lookup.config)
            ],
        }
        typer.echo(json.dumps(document, indent=2))
        return
    for line in _summary_lines(lookup, figures, live, problem, lookups):
        typer.echo(line)
    for line in quarantine_lines(lookup.config):
        typer.echo(line)


def _summary_lines(
    lookup: Lookup,
    figures: list[StoreFigures],
    live: dict[str, Any] | None,
    problem: str,
    lookups: Lookups | None,
) -> list[str]:
    """The text of ``lre cache``: where the figures come from, one line per
    store, and the hit rate."""
    if live is not None and lookup.server is not None:
        lines = [f"lre is running (pid {lookup.server.pid}): live figures"]
    elif lookup.server is not None:
        why = problem or "it has no status listener"
        lines = [f"lre is running (pid {lookup.server.pid}) but {why}; figures from disk"]
    else:
        lines = ["lre is not running: figures from disk"]
    for f in figures:
        size = human_bytes(f.bytes)
        if f.max_bytes:
            size += f" of {human_bytes(f.max_bytes)} ({100 * f.bytes / f.max_bytes:.0f}%)"
        if f.kind == "cas":
            lines.append(f"  CAS {f.name}: {f.entries} blobs, {size} in {f.path}")
        else:
            lines.append(f"  action cache {f.name}: {f.entries} entries, {size} in {f.path}")
    if not figures:
        lines.append("  no store of this configuration is on local disk")
    if live is None or lookups is None:
        lines.append("  hit rate: unknown (lre counts hits while it runs)")
    elif lookups.rate is None:
        lines.append("  hit rate: no action looked up yet")
    else:
        lines.append(
            f"  hit rate: {100 * lookups.rate:.0f}% ({lookups.hits} of "
            f"{lookups.hits + lookups.misses} actions {since_text(live)}: "
            f"{lookups.get_action_result_hits} found by GetActionResult, "
            f"{lookups.execute_hits} by Execute in the action cache, {lookups.misses} executed)"
        )
    return lines


def _run_offline(work: Callable[[], Awaitable[T]]) -> T:
    """``work()`` in a Trio run; a store that cannot be opened or changed
    (permissions, temp and content on different filesystems, ...) ends the
    command with status 1 and the reason instead of a traceback."""
    import trio

    from lre.errors import LreError

    try:
        return trio.run(work)
    except (OSError, LreError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


def admin_post(lookup: Lookup, route: str, query: str) -> dict[str, Any] | None:
    """POST ``route`` to the running lre's status listener with its admin
    token; None when lre is not running. Exits with status 1 when lre runs
    without a status listener or does not answer."""
    server = lookup.server
    if server is None:
        return None
    if not server.status_address:
        typer.echo(
            f"error: lre is running (pid {server.pid}) without a status listener "
            "(global.status.address), so the cache cannot be changed through it; "
            "`lre down` first",
            err=True,
        )
        raise typer.Exit(1)
    try:
        token = read_admin_token(lookup.state_dir)
    except OSError as error:
        typer.echo(f"error: cannot read lre's admin token: {error}", err=True)
        raise typer.Exit(1) from None
    try:
        answer: dict[str, Any] = json.loads(post_admin(server, route, query, token, timeout=600))
    except (OSError, ValueError) as error:
        typer.echo(f"error: the running lre (pid {server.pid}) did not do it: {error}", err=True)
        raise typer.Exit(1) from None
    return answer


def _shrink_lines(rows: list[dict[str, Any]], to: int) -> list[str]:
    """One line per CAS of a gc/clean answer."""
    lines = []
    for row in rows:
        before, after = int(row["before_bytes"]), int(row["after_bytes"])
        line = f"CAS {row['name']}: "
        if before <= to:
            line += f"{human_bytes(before)}, already within {human_bytes(to)}"
        else:
            line += (
                f"evicted {row['evicted_blobs']} blobs, {human_bytes(before)} -> "
                f"{human_bytes(after)}"
            )
        kept = int(row.get("kept_told_bytes", 0))
        if kept and after > to:
            hours = float(row.get("keep_told_s", 0)) / 3600
            line += (
                f"; kept {human_bytes(kept)} that lre told clients exist in the last "
                f"{hours:g} h (the cache contract; --force deletes them too)"
            )
        lines.append(line)
    return lines


async def _shrink_offline(stores: LocalStores, to: int, force: bool) -> list[dict[str, Any]]:
    """``CacheAdmin.gc`` on stores opened here (no server has them open)."""
    from lre.app import shrink_store

    rows = []
    for name, store in stores.blobs:
        await store.open()
        rows.append(await shrink_store(name, store, to, force=force))
        await store.close()
    return rows


ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Also delete blobs lre told a client exists within eviction_policy.keep_told "
        "(builds relying on them then need the steps printed).",
    ),
]


@cache_app.command("clean")
def clean(
    config_path: ConfigOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: ForceOption = False,
) -> None:
    """Delete every blob and action result lre stored (asks first); while lre runs,
    through it. Blobs clients may still rely on stay unless --force."""

    lookup = look_up(config_path)
    stores = _stores_of(lookup)
    figures = _disk_figures(stores) + _action_cache_figures(stores)
    if not figures:
        typer.echo("no store of this configuration is on local disk; nothing to clean")
        return
    total = sum(f.bytes for f in figures)
    listing = "\n".join(f"  {f.path}: {f.entries} entries, {human_bytes(f.bytes)}" for f in figures)
    typer.echo(f"lre's cache on disk:\n{listing}")
    if not yes:
        if not sys.stdin.isatty():
            typer.echo("error: not deleting without confirmation; pass --yes", err=True)
            raise typer.Exit(1)
        if not typer.confirm(f"Delete all of it ({human_bytes(total)})?", default=False):
            typer.echo("nothing deleted")
            raise typer.Exit(1)
    answer = admin_post(lookup, "/api/v1/cache/clean", f"force={int(force)}")
    if answer is not None:
        rows = list(answer["stores"])
        cleared = sum(int(c["bytes"]) for c in answer["action_caches"])
        typer.echo(f"through the running lre (pid {lookup.server.pid}):")  # type: ignore[union-attr]
    else:

        async def empty() -> tuple[list[dict[str, Any]], int]:
            shrunk = await _shrink_offline(stores, 0, force)
            emptied = 0
            for _, cache in stores.action_caches:
                emptied += (await cache.clear()).stored_bytes
            return shrunk, emptied

        rows, cleared = _run_offline(empty)
    for line in _shrink_lines(rows, 0):
        typer.echo(line)
    typer.echo(f"deleted {human_bytes(sum(int(r['evicted_bytes']) for r in rows) + cleared)}")
    if force:
        typer.echo(after_force_steps_here(Path.cwd()))


@cache_app.command("gc")
def gc(
    to: Annotated[
        int,
        typer.Option(
            "--to",
            parser=size_option,
            metavar="SIZE",
            help="Shrink each CAS to at most SIZE (10G, 500MiB, 1073741824; K/M/G/KiB/MiB/GiB "
            "are powers of 1024, KB/MB/GB of 1000).",
        ),
    ],
    config_path: ConfigOption = None,
    force: ForceOption = False,
) -> None:
    """Evict least recently used blobs until each CAS holds at most --to SIZE; while
    lre runs, through it. Blobs clients may still rely on stay unless --force."""

    lookup = look_up(config_path)
    answer = admin_post(lookup, "/api/v1/cache/gc", f"to={to}&force={int(force)}")
    if answer is not None:
        rows = list(answer["stores"])
        typer.echo(f"through the running lre (pid {lookup.server.pid}):")  # type: ignore[union-attr]
    else:
        stores = _stores_of(lookup)
        if not stores.blobs:
            typer.echo("no CAS of this configuration is on local disk; nothing to do")
            return
        rows = _run_offline(lambda: _shrink_offline(stores, to, force))
    for line in _shrink_lines(rows, to):
        typer.echo(line)
    if force:
        typer.echo(after_force_steps_here(Path.cwd()))
