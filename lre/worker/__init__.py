"""Local workers: take a leased action, stage its inputs, run it, report.

``LocalWorker`` is the live worker built by ``lre.app`` from a
``LocalWorkerSpec``; ``ActionRunner`` runs one leased action end to end;
``WorkDirectory`` is a worker's locked private directory.
"""

from lre.worker._action import ActionResultWriter, ActionRunner
from lre.worker._process import ProcessOutcome, run_process
from lre.worker._upload import Adopter
from lre.worker._workdir import WorkDirectory, WorkDirectoryInUse
from lre.worker._worker import LocalWorker, WorkerStatistics

__all__ = [
    "ActionResultWriter",
    "ActionRunner",
    "Adopter",
    "LocalWorker",
    "ProcessOutcome",
    "WorkDirectory",
    "WorkDirectoryInUse",
    "WorkerStatistics",
    "run_process",
]
