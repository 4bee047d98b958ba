"""An action's outputs: found and described on disk (``_outputs``, through the overlay's
layers, ``_layers``), checked before anything is read (``_output_checks``, bounds in
``_limits``), collected (``_output_collection``) and put into the CAS (``_upload``,
``_adoption``); ``_task_errors`` ends one action with one status when a nursery fails.
"""

from lre.worker.outputs._adoption import unshared_adopter
from lre.worker.outputs._limits import ActionLimits
from lre.worker.outputs._output_collection import OutputPolicy, collect_outputs
from lre.worker.outputs._outputs import (
    FoundFile,
    FoundOutputs,
    OutputRequest,
    hash_file,
    open_own_log,
)
from lre.worker.outputs._task_errors import single_error_nursery
from lre.worker.outputs._upload import Adopter, upload_outputs

__all__ = [
    "ActionLimits",
    "Adopter",
    "FoundFile",
    "FoundOutputs",
    "OutputPolicy",
    "OutputRequest",
    "collect_outputs",
    "hash_file",
    "open_own_log",
    "single_error_nursery",
    "unshared_adopter",
    "upload_outputs",
]
