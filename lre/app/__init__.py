"""The composition root: builds every live object from a Config and runs them.

``Application(config)`` builds; ``Application.serve`` runs (started with
``nursery.start``, returns ``ReadyInfo``); ``run_server`` is the foreground
entry used by ``lre up``; ``shrink_store`` is the one ``lre cache gc`` of one
store, for the running server (``CacheAdmin``) and the CLI with lre down.
"""

from lre.app._app import Application, ReadyInfo
from lre.app._build_error import AppBuildError
from lre.app._cache_admin import CacheAdmin, shrink_store
from lre.app._hits import HitCounts
from lre.app._run import run_server
from lre.app._stores import StoreBuildError, Stores, build_stores

__all__ = [
    "AppBuildError",
    "Application",
    "CacheAdmin",
    "HitCounts",
    "ReadyInfo",
    "StoreBuildError",
    "Stores",
    "build_stores",
    "run_server",
    "shrink_store",
]
