"""The worker's precondition script: may this worker take one more action now?

The script runs through ``/bin/sh -c`` with stdin, stdout and stderr on
/dev/null. Exit status 0 means yes; anything else, a failure to start it, or
running longer than ``timeout`` seconds means no (backpressure).
"""

from __future__ import annotations

import logging
import subprocess

import trio

log = logging.getLogger(__name__)


async def precondition_allows(script: str, *, timeout: float = 10.0) -> bool:
    """Run ``script``; True when it exits 0 (an empty script always allows)."""
    if not script:
        return True
    with trio.move_on_after(timeout):
        try:
            completed = await trio.run_process(
                ["/bin/sh", "-c", script],
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as error:
            log.warning("precondition script could not start: %s", error)
            return False
        return completed.returncode == 0
    log.warning("precondition script ran longer than %g s; treated as backpressure", timeout)
    return False
