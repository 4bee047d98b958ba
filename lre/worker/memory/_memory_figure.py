"""The memory figure recorded for one run, and where it came from.

Two sources, both the action's own processes only:

- the sampler's peak (``ActionUsage.peak_memory_bytes``: the largest sum of
  its processes' RSS plus its private tmpfs any pass saw), when at least
  one pass saw the run;
- the kernel's figure of its reaped processes (``ru_maxrss``: the largest
  single process of the tree, ``ProcessOutcome.kernel_peak_bytes``): as the
  action's pid 1 reported it for the command's tree (GNU time,
  ``_tree_peak.py``), and lre's own ``wait4`` of the first process when
  that is above lre's own image (``_own_image.py``; below it, it may be
  lre's).

The figure is the larger of the two that are known: the kernel's catches a
process that peaked between two passes, the sampler's the sum of processes
running together and the tmpfs. Being the larger, a kernel figure the
action forged (it can write to pid 1's report) never lowers what a pass
saw. A pass that counted nothing of the action (only lre's helpers were
there yet) is no figure. A run no pass saw, with no report from pid 1 (no
GNU time) and whose own ``wait4`` is hidden by lre's image, gets 0, marked
``MEMORY_BELOW_IMAGE``: it was too short to be sampled and smaller than
lre itself.
"""

from __future__ import annotations

from lre.snapshot import MEMORY_BELOW_IMAGE, MEMORY_KERNEL, MEMORY_SAMPLED
from lre.worker.process import ProcessOutcome
from lre.worker.usage import ActionUsage

__all__ = ["memory_figure"]


def memory_figure(process: ProcessOutcome, sampled: ActionUsage | None) -> tuple[int, str]:
    """(bytes, source) for the run (see the module docstring)."""
    kernel = process.kernel_peak_bytes
    if sampled is not None and sampled.samples and sampled.peak_memory_bytes:
        if sampled.peak_memory_bytes >= kernel:
            return sampled.peak_memory_bytes, MEMORY_SAMPLED
        return kernel, MEMORY_KERNEL
    if kernel:
        return kernel, MEMORY_KERNEL
    return 0, MEMORY_BELOW_IMAGE
