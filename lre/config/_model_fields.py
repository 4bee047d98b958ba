"""The building blocks every config model uses: ``ByteSize``, ``Seconds``, ``doc``.

The models are split by config section (``_store_models``, ``_scheduler_models``,
``_worker_models``, ``_server_models``, and ``_models`` with the root ``Config``
and the process-wide sections). Conventions the loader (``_loader.py``) relies on:

- Every model is a frozen dataclass; each field's ``metadata["doc"]`` is its
  one-line documentation (docs/configuration.md is generated from it).
- ``ByteSize`` fields take an integer or a string such as ``"512MiB"``,
  ``"10gb"``; ``Seconds`` fields take a number or a string such as ``"1h2m"``,
  ``"250ms"``.
- A class with a ``ONE_OF`` tuple is a tagged union: exactly one of the named
  fields must be given (``{"name": "CAS", "filesystem": {...}}``).
- Unknown keys are an error everywhere. Every string value may use ``${VAR}``
  and ``${VAR:-default}``.

Parsing builds no live objects; ``lre.app`` builds them from these models.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, NewType

ByteSize = NewType("ByteSize", int)
Seconds = NewType("Seconds", float)


def doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field with its documentation attached."""
    metadata = {"doc": text}
    return field(metadata=metadata, **kwargs)
