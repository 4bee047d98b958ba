"""The collect phase's reading: an action's outputs scanned and its stdout
and stderr hashed, in one thread round trip (or none when it asked for no
outputs and its logs are small).

Errors of the scan propagate (``LreError`` subclasses for outputs the
policy or the limits refuse, ``OSError`` for the filesystem).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.digest import EMPTY_DIGEST
from lre.worker.directories import WorkDirectory
from lre.worker.outputs._limits import ActionLimits
from lre.worker.outputs._output_checks import OutputBudget
from lre.worker.outputs._outputs import (
    FoundFile,
    FoundOutputs,
    OutputRequest,
    close_held,
    log_file,
    scan_outputs,
)
from lre.worker.view import OverlayXattrs

__all__ = ["SMALL_LOGS", "OutputPolicy", "collect_outputs"]

#: When an action asked for no outputs and its stdout and stderr are at most
#: this big, they are hashed on the event loop instead of in a thread (a
#: thread round trip costs more than reading and hashing 64 KiB).
SMALL_LOGS = 64 << 10


@dataclass(frozen=True, slots=True)
class OutputPolicy:
    """How a worker reads its actions' outputs: within ``limits``, symlinks
    out of the input root refused unless ``allow_escaping_symlinks``;
    ``owner``: the uid actions run as (their files may be moved too)."""

    limits: ActionLimits
    allow_escaping_symlinks: bool
    owner: int | None = None


async def collect_outputs(
    workdir: WorkDirectory,
    root: Path,
    lower: Path | None,
    xattrs: OverlayXattrs,
    outputs: list[OutputRequest],
    logs: tuple[Path, Path],
    identities: tuple[tuple[int, int], tuple[int, int]],
    policy: OutputPolicy,
) -> tuple[FoundOutputs, list[FoundFile]]:
    """Scan the outputs (``root`` over ``lower``, its overlay marks in
    ``xattrs``, see ``scan_outputs``) and hash the ``logs`` (stdout, stderr;
    ``identities`` their device and inode as the action got them). The
    descriptors the files found hold (``FoundFile.held``) are the caller's
    to close (``upload_outputs`` does)."""
    stdout_path, stderr_path = logs
    # Mounts the action left in lre's namespace (cheap while the table is
    # unchanged): what they show is copied, never moved out of its place.
    mounts = tuple(
        point
        for point in workdir.mounts.below(root.parent)
        if point == str(root) or point.startswith(f"{root}/")
    )

    def collect() -> tuple[FoundOutputs, list[FoundFile]]:
        budget = OutputBudget(policy.limits)
        found = scan_outputs(
            root,
            outputs,
            allow_escaping_symlinks=policy.allow_escaping_symlinks,
            budget=budget,
            lower=lower,
            xattrs=xattrs,
            mounts=mounts,
            owner=policy.owner,
        )
        try:
            return found, [
                log_file(stdout_path, identities[0], budget),
                log_file(stderr_path, identities[1], budget),
            ]
        except BaseException:
            close_held([f for _, f in found.files] + found.tree_files)
            raise

    if not outputs:
        sizes = os.stat(stdout_path).st_size, os.stat(stderr_path).st_size
        if sizes == (0, 0):
            return FoundOutputs(), [
                FoundFile(stdout_path, EMPTY_DIGEST, False, b""),
                FoundFile(stderr_path, EMPTY_DIGEST, False, b""),
            ]
        if max(sizes) <= SMALL_LOGS:
            return collect()
    return await trio.to_thread.run_sync(collect)
