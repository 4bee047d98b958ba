"""``lre logs [-f]``: print (and follow) the log of the running or last lre.

The log is the file the pid file names while lre runs, else
``{state_dir}/lre.log``: ``lre up --detach`` sends everything the server
prints there, and ``lre up`` with the dashboard sends its log records there
(a plain ``lre up --no-tui`` logs to its terminal and to that file).
``--tail N`` prints only the last N lines, ``--since 10m`` (or an ISO time)
only what was logged since then.

Following works like ``tail -F``: new bytes are copied as they arrive; when
the file is replaced (rotation renames it and starts a new one) the rest of
the old file is printed and the new one is followed from its start; when it
is truncated, from its new start. Ctrl-C (SIGINT) ends it with status 0.
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from lre.cli._app import app
from lre.cli._daemon import LOG_FILE, read_pid_file
from lre.cli._running import look_up
from lre.cli._up import ConfigOption

#: Seconds between looks at a log that has no new bytes.
POLL_S = 0.2
_CHUNK = 1 << 16


def log_path(state_dir: Path) -> Path:
    """The log of the running lre (from its pid file), else the state directory's."""
    server = read_pid_file(state_dir)
    if server is not None and server.log_file:
        return Path(server.log_file)
    return state_dir / LOG_FILE


_TIMESTAMP = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z ")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a duration back from now (``90s``, ``10m``, ``2h``, ``1d``) or
    an ISO 8601 time (``2026-12-01T09:00``, local time unless it names a zone)
    as a Unix time. ``typer.BadParameter`` naming the value otherwise."""
    match = _DURATION.match(text.strip())
    if match:
        return (time.time() if now is None else now) - float(match[1]) * _UNIT_S[match[2]]
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a duration (30s, 10m, 2h, 1d) nor an ISO time (2026-12-01T09:00)",
            param_hint="--since",
        ) from None
    return when.timestamp()


def _line_time(line: bytes) -> float | None:
    """The Unix time a log line starts with (lre's UTC timestamps), else None."""
    match = _TIMESTAMP.match(line)
    if match is None:
        return None
    stamp = datetime.datetime.fromisoformat(match[1].decode()).replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


def _since(lines: Iterable[bytes], cutoff: float) -> Iterator[bytes]:
    """The lines logged at ``cutoff`` or later; a line without a timestamp
    (a traceback's) goes with the line before it."""
    keep = False
    for line in lines:
        stamp = _line_time(line)
        if stamp is not None:
            keep = stamp >= cutoff
        if keep:
            yield line


def copy_rest(f: BinaryIO, out: BinaryIO, lines: int | None, since: float | None = None) -> None:
    """Copy ``f`` from its position to its end into ``out``; only the lines
    logged at ``since`` or later, and of those the last ``lines``, when given.
    ``OSError`` propagates."""
    if lines is None and since is None:
        while chunk := f.read(_CHUNK):
            out.write(chunk)
    else:
        source: Iterable[bytes] = f if since is None else _since(f, since)
        kept: deque[bytes] = deque(source, maxlen=lines)
        out.write(b"".join(kept))
    out.flush()


def follow(
    path: Path,
    out: BinaryIO,
    current: BinaryIO | None,
    *,
    stop: Callable[[], bool] = lambda: False,
    poll_s: float = POLL_S,
) -> None:
    """Copy what is appended to ``path`` into ``out`` until ``stop()`` is true
    (or KeyboardInterrupt), reading on from ``current`` (``path`` opened and
    read up to where printing should start) or, when None, from the start of
    ``path`` once it exists. Follows a replaced file (rotation) and a
    truncated one. Errors reading the file other than its absence propagate
    as ``OSError``; ``current`` is closed at the end."""
    try:
        while not stop():
            if current is None:
                try:
                    current = path.open("rb")
                except FileNotFoundError:
                    time.sleep(poll_s)
                    continue
            data = current.read(_CHUNK)
            if data:
                out.write(data)
                out.flush()
                continue
            try:
                now = path.stat()
            except FileNotFoundError:
                time.sleep(poll_s)  # rotated away; the new file is not there yet
                continue
            opened = os.fstat(current.fileno())
            if (now.st_ino, now.st_dev) != (opened.st_ino, opened.st_dev):
                out.write(current.read())  # the end of the old file, then the new one
                out.flush()
                current.close()
                current = None
            elif now.st_size < current.tell():
                current.seek(0)  # truncated: start again from its beginning
            else:
                time.sleep(poll_s)
    finally:
        if current is not None:
            current.close()


@app.command("logs")
def logs(
    config_path: ConfigOption = None,
    follow_log: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines (Ctrl-C ends).")
    ] = False,
    lines: Annotated[
        int | None,
        typer.Option(
            "--tail",
            "--lines",
            "-n",
            min=0,
            help="Print only the last N lines first.",
            show_default="every line",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only lines logged since then: a duration back (30s, 10m, 2h, 1d) "
            "or an ISO time (2026-12-01T09:00).",
            show_default="the whole log",
        ),
    ] = None,
) -> None:
    """Print the log of the running (or last) lre; -f follows it like tail -F."""
    cutoff = None if since is None else parse_since(since)
    path = log_path(look_up(config_path).state_dir)
    out = sys.stdout.buffer
    current: BinaryIO | None = None
    try:
        try:
            current = path.open("rb")
        except FileNotFoundError:
            message = (
                f"no lre log at {path}: lre has not run in the background with this "
                "state directory (`lre up --detach` and the dashboard of `lre up` write "
                "it; `lre up --no-tui` logs to its terminal)"
            )
            if not follow_log:
                typer.echo(message, err=True)
                raise typer.Exit(1) from None
            typer.echo(message + "; waiting for it to appear", err=True)
        if current is not None:
            copy_rest(current, out, lines, cutoff)
        if follow_log:
            follow(path, out, current)
            current = None
    except KeyboardInterrupt:
        pass
    except OSError as error:
        typer.echo(f"cannot read {path}: {error.strerror or error}", err=True)
        raise typer.Exit(1) from error
    finally:
        if current is not None:
            current.close()
