"""lre's command line (typer). ``main`` is the ``lre`` console script.

Command modules register on ``app`` (``lre.cli._app``) when imported here.
"""

from lre.cli import (  # noqa: F401  (register their commands)
    _cache_cmd,
    _completion,
    _config_cmd,
    _doctor,
    _history_cmd,
    _lifecycle,
    _link,
    _logs,
    _service,
    _top,
    _trace_cmd,
    _up,
)
from lre.cli._app import app


def main() -> None:
    """Run the ``lre`` command line; exits the process with the command's status."""
    app()


__all__ = ["app", "main"]
