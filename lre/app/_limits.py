"""Process limits lre raises for itself at start (``global.max_open_files``)."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_open_files_limit(wanted: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to ``wanted`` (never lowers it); the
    soft limit in force afterwards.

    The hard limit caps it: when ``wanted`` is above it, the soft limit goes
    to the hard one and a warning says so (lre still starts; thousands of
    actions in flight may then run out of descriptors). A refusal by the
    kernel is logged the same way, never raised.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or (soft >= wanted):
        return soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as error:
        log.warning("global.max_open_files: cannot raise the open-files limit to %d: %s",
                    target, error)  # fmt: skip
        return soft
    if target < wanted:
        log.warning(
            "global.max_open_files: %d asked, but the hard limit is %d; "
            "raise it (ulimit -Hn, or LimitNOFILE= in a systemd unit) for more",
            wanted,
            hard,
        )
    return target
