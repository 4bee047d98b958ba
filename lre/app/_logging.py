"""Structured single-line logs: ``ts level logger msg key=value ...``.

- ``configure_logging(level, file=..., stream=...)`` installs one handler on
  the root logger (replacing one it installed before): to ``file`` (created
  with its directory, mode 0600 since records name paths and commands,
  rotated at 10 MiB, 3 kept) when given, else to
  ``stream``. Use ``log_file(state_dir)`` for the file of a detached lre or
  of ``lre up`` while the dashboard owns the terminal.
- Fields: ``log.info("msg", extra={"kv": {"worker": "local"}})`` appends
  ``worker=local``; values with spaces, quotes or ``=`` are double-quoted
  with backslash escapes, so every record is one line, tracebacks included
  (as an ``exc="..."`` field with ``\\n`` escapes).
- ``log_rejected(logger, ...)`` logs one refused client request at INFO with
  its status and reason, never a traceback (client errors are not bugs).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "LOG_FILE_MODE",
    "LOG_FILE_NAME",
    "LineFormatter",
    "configure_logging",
    "format_fields",
    "log_file",
    "log_rejected",
    "open_private_log",
    "parse_level",
]

LOG_FILE_NAME = "lre.log"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
_LEVELS["error"] = logging.ERROR
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+,%")


def parse_level(name: str) -> int:
    """``"info"`` -> ``logging.INFO``; ``ValueError`` naming the value and the choices."""
    level = _LEVELS.get(name.lower())
    if level is None:
        raise ValueError(f"log_level: {name!r} is not one of {', '.join(_LEVELS)}")
    return level


def _quote(value: object) -> str:
    text = str(value)
    if text and all(c in _SAFE for c in text):
        return text
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def format_fields(fields: Mapping[str, object]) -> str:
    """``{"a": 1, "b": "x y"}`` -> ``a=1 b="x y"`` (keys as given, in order)."""
    return " ".join(f"{key}={_quote(value)}" for key, value in fields.items())


class LineFormatter(logging.Formatter):
    """Formats a record as one line; see the module docstring."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        millis = int(record.msecs)
        message = record.getMessage().replace("\\", "\\\\").replace("\n", "\\n")
        parts = [f"{ts}.{millis:03d}Z", record.levelname, record.name, message]
        fields: dict[str, object] = {}
        extra = getattr(record, "kv", None)
        if isinstance(extra, Mapping):
            fields.update(extra)
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            fields["exc"] = record.exc_text
        if fields:
            parts.append(format_fields(fields))
        return " ".join(parts)


_HANDLER_MARK = "_lre_handler"

#: Mode of lre.log and its rotated copies: owner only.
LOG_FILE_MODE = 0o600


def open_private_log(path: Path) -> int:
    """Open ``path`` for appending, created with ``LOG_FILE_MODE``, and return the fd.

    A file an older lre created with wider permissions is narrowed to
    ``LOG_FILE_MODE``. ``OSError`` when it cannot be opened.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, LOG_FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o777 & ~LOG_FILE_MODE:
            os.fchmod(fd, LOG_FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating handler whose every file (the first and each after a
    rollover) is created owner-only."""

    def _open(self) -> Any:
        return open(
            open_private_log(Path(self.baseFilename)),
            "a",
            encoding=self.encoding,
            errors=self.errors,
        )


def log_file(state_dir: str | Path) -> Path:
    """Where a detached lre logs: ``<state_dir>/lre.log``."""
    return Path(state_dir) / LOG_FILE_NAME


class _OncePerMinute(logging.Filter):
    """Lets one record through per ``interval`` seconds, without its
    traceback: Trio's accept loop logs every 0.1 s while lre is out of file
    descriptors (``trio.serve_listeners``), each with a traceback."""

    def __init__(self, interval: float = 60.0) -> None:
        super().__init__()
        self.interval = interval
        self._last = -interval

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        record.exc_info = None
        record.exc_text = None
        return True


#: Loggers of libraries that repeat one complaint many times a second.
_REPEATING = ("trio.serve_listeners",)


def configure_logging(
    level: str,
    *,
    file: Path | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log record at ``level`` or above through ``LineFormatter``.

    Writes to ``file`` when given (``OSError`` if its directory cannot be
    created or the file opened), else to ``stream`` (default stderr); to
    both when both are given (a foreground lre: its terminal, and the file
    ``lre logs`` reads). Calling it again replaces the handlers installed
    before. Returns the first handler (tests and shutdown may
    ``flush``/``close`` it).
    """
    numeric = parse_level(level)
    handlers: list[logging.Handler] = []
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(
            _PrivateRotatingFileHandler(file, maxBytes=10 << 20, backupCount=3, encoding="utf-8")
        )
    if file is None or stream is not None:
        handlers.append(logging.StreamHandler(stream if stream is not None else sys.stderr))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    for handler in handlers:
        handler.setFormatter(LineFormatter())
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
    root.setLevel(numeric)
    for name in _REPEATING:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OncePerMinute) for f in logger.filters):
            logger.addFilter(_OncePerMinute())
    return handlers[0]


def log_rejected(
    logger: logging.Logger,
    what: str,
    *,
    status: str,
    reason: str,
    **fields: Any,
) -> None:
    """Log one refused request once, at INFO, without a traceback:
    ``rejected <what> status=<status> reason="..." <fields>``."""
    logger.info("rejected %s", what, extra={"kv": {"status": status, "reason": reason, **fields}})
