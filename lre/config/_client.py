"""Which platform properties the client config written by ``lre up`` sends.

An action's platform is part of its digest, so a laptop shares cache hits
with a team only when it sends exactly what the team's own clients send.
``client.exec_properties`` says what that is. Left null, lre decides:

- without an upstream: ``cpu_count=1`` and ``OSFamily=Linux`` (lre's own
  reservation default and the family its local worker offers);
- with an upstream (a ``grpc`` store or a ``forward`` scheduler): nothing,
  since lre's own keys would make every digest differ from the team's
  (the property modifier still adds the reservation defaults to what runs
  locally, without changing any digest).
"""

from __future__ import annotations

from lre.config._models import Config

#: What ``lre up`` sends when no upstream is configured and nothing is set.
LOCAL_EXEC_PROPERTIES: tuple[tuple[str, str], ...] = (("cpu_count", "1"), ("OSFamily", "Linux"))


def has_upstream(config: Config) -> bool:
    """Whether ``config`` reads from or forwards to an upstream REAPI server."""
    return any(s.grpc is not None for s in config.stores) or any(
        s.forward is not None for s in config.schedulers
    )


def client_exec_properties(config: Config) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs the written client config sends, sorted by name
    when configured (see the module docstring)."""
    configured = config.client.exec_properties
    if configured is not None:
        return tuple(sorted(configured.items()))
    return () if has_upstream(config) else LOCAL_EXEC_PROPERTIES
