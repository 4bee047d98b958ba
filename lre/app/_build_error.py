"""The error of the composition root's builders."""

from __future__ import annotations


class AppBuildError(Exception):
    """The config is valid but its objects cannot be built (names the block)."""
