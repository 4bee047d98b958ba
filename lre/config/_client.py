"""Which platform properties the client config written by ``lre up`` sends.

An action's platform is part of its digest, so a laptop shares cache hits
with a team only when it sends exactly what the team's own clients send.
``client.exec_properties`` says what that is. Left null, the client config
sends none, with or without an upstream: an action's key is then what the
repository's own flags make it, the same on a laptop as on CI. What lre
needs to run an action it adds on the server side (the property modifier
adds the reservation default ``cpu_count``, and a worker that offers an
``OSFamily`` runs actions that name none), without changing any digest.
"""

from __future__ import annotations

from lre.config._models import Config


def client_exec_properties(config: Config) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs the written client config sends, sorted by name
    when configured (see the module docstring)."""
    configured = config.client.exec_properties
    if configured is not None:
        return tuple(sorted(configured.items()))
    return ()
