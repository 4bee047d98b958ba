"""The domain error for an upstream REAPI server that cannot be reached."""

from __future__ import annotations

from lre.errors import Unavailable


class UpstreamUnavailable(Unavailable):
    """The upstream could not be reached (down, refused our credentials, or
    its circuit is open). Callers that can do without the upstream catch
    exactly this and carry on local-only."""
