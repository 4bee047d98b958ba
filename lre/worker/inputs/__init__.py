"""An action's inputs: the input tree fetched and validated (``_input_tree``),
materialised on disk (``_staging``), hardlinked CAS files recorded (``_input_journal``)
and checked for changes made by the action (``_input_guard``).
"""

from lre.worker.inputs._input_guard import SMALL_CHECK, LinkedInputs, altered_inputs
from lre.worker.inputs._input_journal import InputJournal, recover_linked_inputs
from lre.worker.inputs._input_tree import InputTree, fetch_input_tree
from lre.worker.inputs._staging import stage_inputs

__all__ = [
    "SMALL_CHECK",
    "InputJournal",
    "InputTree",
    "LinkedInputs",
    "altered_inputs",
    "fetch_input_tree",
    "recover_linked_inputs",
    "stage_inputs",
]
