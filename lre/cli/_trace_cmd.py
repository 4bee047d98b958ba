"""``lre trace`` (Chrome trace-event JSON) and ``lre report`` (one HTML page) of a build.

Both read the history files in the state dir directly (lre may be down);
see ``_history_cmd`` for which state dir. ``-o -`` writes to stdout.
Exit status 1 with a message when the build is unknown or the file cannot
be written. The generators (and ``lre.snapshot``) are imported when a
command runs, not when ``lre`` starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lre.cli._app import app
from lre.cli._history_cmd import ConfigOption, history_dir

if TYPE_CHECKING:
    from lre.cli._build_data import BuildData

BuildArgument = Annotated[str, typer.Argument(help="A build id, a unique prefix, or 'last'.")]
OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="File to write ('-' for stdout).")
]


def _load(build: str, config: Path | None) -> BuildData:
    from lre.cli._build_data import load_build

    try:
        return load_build(history_dir(config), build)
    except LookupError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None


def _write(output: str, text: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        typer.echo(f"cannot write {output}: {error.strerror or error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {output}", err=True)


@app.command("trace")
def trace(
    build: BuildArgument = "last",
    output: OutputOption = "lre-trace.json",
    config: ConfigOption = None,
) -> None:
    """A build's timeline as Chrome trace-event JSON (open it in ui.perfetto.dev or
    chrome://tracing): one track per running slot, one event per action with its
    phases, CPU and memory counters."""
    from lre.cli._trace_file import chrome_trace

    data = _load(build, config)
    _write(output, json.dumps(chrome_trace(data), separators=(",", ":")) + "\n")


@app.command("report")
def report(
    build: BuildArgument = "last",
    output: OutputOption = "lre-report.html",
    config: ConfigOption = None,
) -> None:
    """A build as one self-contained HTML page (no network): the timeline, CPU and
    memory over time, kills marked, and the summary tables."""
    from lre.cli._report_page import report_html

    _write(output, report_html(_load(build, config)))
