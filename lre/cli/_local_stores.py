"""The on-disk stores of a configuration, as ``lre cache`` and ``lre doctor`` see them.

Built through the composition root (``lre.app.build_stores``), so a store
name means here exactly what it means to a running lre: a name used as an
``ac_store`` is an action cache, every other filesystem store holds blobs.
Memory and upstream (grpc) stores hold nothing on this disk and are left out.
The server modules are imported when this runs, not when ``lre`` starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lre.config import Config

if TYPE_CHECKING:
    from lre.cas import FilesystemActionCache, FilesystemStore


class LocalStoresError(Exception):
    """The configuration's stores cannot be built (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class LocalStores:
    """Filesystem blob stores and filesystem action caches, by config name."""

    blobs: tuple[tuple[str, FilesystemStore], ...]
    action_caches: tuple[tuple[str, FilesystemActionCache], ...]


def local_stores(config: Config) -> LocalStores:
    """The filesystem stores of ``config`` (which must be ``resolve``d), not
    opened. Raises ``LocalStoresError`` when a store cannot be built."""
    from lre.app import StoreBuildError, build_stores
    from lre.errors import LreError

    try:
        stores = build_stores(config)
    except (StoreBuildError, LreError, ValueError) as error:
        raise LocalStoresError(str(error)) from None
    return LocalStores(
        blobs=tuple(stores.filesystems.items()),
        action_caches=tuple(stores.filesystem_caches.items()),
    )
