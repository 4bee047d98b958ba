"""What an action uses, measured: its process tree's RSS and CPU sampled (``_sampler``),
the kernel's peak of its command tree (``_tree_peak``), lre's own image in that figure
(``_own_image``), kernel OOM kills (``_oom``), and lre's reserve of file descriptors that
the readings need (``_descriptors``).
"""

from lre.worker.usage._descriptors import SkipLog, keep_reserve, using_reserve
from lre.worker.usage._oom import OomCounters
from lre.worker.usage._own_image import own_image
from lre.worker.usage._sampler import ActionUsage, ProcessTreeSampler
from lre.worker.usage._tree_peak import (
    open_report,
    peak_tool,
    peak_tool_missing,
    read_report,
    report_argv,
)

__all__ = [
    "ActionUsage",
    "OomCounters",
    "ProcessTreeSampler",
    "SkipLog",
    "keep_reserve",
    "open_report",
    "own_image",
    "peak_tool",
    "peak_tool_missing",
    "read_report",
    "report_argv",
    "using_reserve",
]
