"""Operation names: ``{instance}/operations/{uuid}`` (``operations/{uuid}`` for
the empty instance). Instance names may contain '/' and even the word
``operations``; the uuid is always the last segment."""

from __future__ import annotations

import uuid

from lre.errors import NotFound

_MARK = "operations/"


def new_operation_name(instance_name: str) -> str:
    ident = uuid.uuid4()
    return f"{instance_name}/{_MARK}{ident}" if instance_name else f"{_MARK}{ident}"


def parse_operation_name(name: str) -> tuple[str, str]:
    """Split into ``(instance_name, uuid)``.

    Raises ``NotFound`` naming ``name`` when it is not of that form (a name lre
    never gave out cannot exist).
    """
    head, sep, ident = name.rpartition("/")
    valid = bool(sep) and _is_uuid(ident)
    if valid and head == "operations":
        return "", ident
    if valid and head.endswith("/operations") and len(head) > len("/operations"):
        return head[: -len("/operations")], ident
    raise NotFound(f"operation {name!r}: no such operation (not an lre operation name)")


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
