"""Local workers: take a leased action, stage its inputs, run it, report.

``LocalWorker`` is the live worker built by ``lre.app`` from a
``LocalWorkerSpec``; ``ActionRunner`` runs one leased action end to end;
``WorkDirectory`` is a worker's locked private directory.
"""

from lre.worker._action import ActionResultWriter, ActionRunner
from lre.worker._workdir import WorkDirectory, WorkDirectoryInUse

__all__ = [
    "ActionResultWriter",
    "ActionRunner",
    "WorkDirectory",
    "WorkDirectoryInUse",
]
