"""An action's view of the filesystem, as mounted: one mount namespace per action
(``_view``), its ``/dev`` (``_view_dev``), writable host paths opened without symlinks
(``_view_writable``), the helper that builds views for an unprivileged lre
(``_view_helper``) and the host sockets views hide (``_socket_masks``). Which view each
action gets is the worker's ``_view_policy``.
"""

from lre.worker.view._socket_masks import SHOWN_INSIDE, socket_masks
from lre.worker.view._view import (
    OVERLAY_OPTIONS,
    ActionView,
    OverlayXattrs,
    build_view,
    covered_by,
    make_layers,
    mount_children_proc,
    outermost,
    overlay_mount,
    proc_pidns_works,
)
from lre.worker.view._view_helper import ViewHelper
from lre.worker.view._view_writable import (
    Mark,
    Protected,
    WritableRefused,
    judge,
    mark_of,
    marks_above,
    open_without_symlinks,
)

__all__ = [
    "OVERLAY_OPTIONS",
    "SHOWN_INSIDE",
    "ActionView",
    "Mark",
    "OverlayXattrs",
    "Protected",
    "ViewHelper",
    "WritableRefused",
    "build_view",
    "covered_by",
    "judge",
    "make_layers",
    "mark_of",
    "marks_above",
    "mount_children_proc",
    "open_without_symlinks",
    "outermost",
    "overlay_mount",
    "proc_pidns_works",
    "socket_masks",
]
