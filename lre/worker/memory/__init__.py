"""Acting on memory: the policy of what to freeze, thaw or kill (``_governor``), carried
out (``_memory_control``, with a cgroup freezer, ``_freezer``), woken by host readings and
stalls (``_pressure``, ``_psi_trigger``); the memory figure recorded for a run
(``_memory_figure``) and why an action killed for memory is not run again (``_doomed``).
"""

from lre.worker.memory._doomed import MemoryCeiling, doomed_explanation
from lre.worker.memory._freezer import cgroup_freezer
from lre.worker.memory._governor import GovernorLimits, MemoryGovernor
from lre.worker.memory._memory_control import ControlPace, MemoryAction, MemoryControl
from lre.worker.memory._memory_figure import memory_figure
from lre.worker.memory._pressure import PressureMonitor
from lre.worker.memory._psi_trigger import PsiTrigger

__all__ = [
    "ControlPace",
    "GovernorLimits",
    "MemoryAction",
    "MemoryCeiling",
    "MemoryControl",
    "MemoryGovernor",
    "PressureMonitor",
    "PsiTrigger",
    "cgroup_freezer",
    "doomed_explanation",
    "memory_figure",
]
