"""A worker's directories on disk: its locked work directory (``_workdir``), the action
directories made ahead and recycled (``_action_dirs``), removal that never leaves a tree
(``_removal``), leftovers moved aside (``_quarantine``), an input root emptied to its
skeleton (``_skeleton``), paths opened beneath a directory without symlinks (``_beneath``),
paths longer than ``PATH_MAX`` (``_long_paths``) and a full disk under an action
(``_disk_full``).
"""

from lre.worker.directories._action_dirs import (
    ROOT_MODE,
    TMP_NAME,
    ActionDirectories,
    ActionDirectory,
    ActionLayers,
    LayerSource,
)
from lre.worker.directories._beneath import SymlinkInPath, open_beneath
from lre.worker.directories._disk_full import request_error
from lre.worker.directories._long_paths import fits, too_long
from lre.worker.directories._quarantine import QuarantinedEntry, quarantined
from lre.worker.directories._skeleton import plan_directories
from lre.worker.directories._workdir import WorkDirectory

__all__ = [
    "ROOT_MODE",
    "TMP_NAME",
    "ActionDirectories",
    "ActionDirectory",
    "ActionLayers",
    "LayerSource",
    "QuarantinedEntry",
    "SymlinkInPath",
    "WorkDirectory",
    "fits",
    "open_beneath",
    "plan_directories",
    "quarantined",
    "request_error",
    "too_long",
]
