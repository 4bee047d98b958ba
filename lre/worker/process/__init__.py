"""Running an action's command: a ``Command`` turned into argv, environment and outputs
(``_command``, ``_paths``), the process tree spawned and waited for (``_process``), and
its limits: processes (``_process_limit``), open files (``_open_files``) and CPU slots
shared through a jobserver (``_jobserver``, ``_action_jobservers``).
"""

from lre.worker.process._action_jobservers import ActionJobservers
from lre.worker.process._command import PreparedCommand, prepare_command
from lre.worker.process._jobserver import JobserverPool
from lre.worker.process._process import (
    ProcessOutcome,
    SpawnRequest,
    default_containment,
    run_process,
)
from lre.worker.process._process_limit import limit_error, process_limits

__all__ = [
    "ActionJobservers",
    "JobserverPool",
    "PreparedCommand",
    "ProcessOutcome",
    "SpawnRequest",
    "default_containment",
    "limit_error",
    "prepare_command",
    "process_limits",
    "run_process",
]
