"""The one rule for the ids an operator chooses (device, camera, zone, line): each is an MQTT topic level.

1 to 64 of letters, digits, ``_``, ``.`` and ``-``, starting with a letter or digit, so ``Dock-1`` and
``line.3`` are ids; no ``/``, no wildcard, no space (docs/mqtt.md, "Ids"). Config models use :data:`Id`; code
that builds topics calls :func:`check_id`."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from appliance.config.shown import shown

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
ID_RULE = "1-64 of letters, digits, '_', '.', '-', starting with a letter or digit"
_ID = re.compile(ID_PATTERN)


def id_problem(value: object) -> str | None:
    """Why ``value`` is not an id, or None when it is one."""
    if not isinstance(value, str):
        return f"an id is a string, not {type(value).__name__}"
    if not _ID.match(value):
        return f"{shown(value)} is not a valid id: use {ID_RULE}"
    return None


def check_id(kind: str, value: str) -> str:
    """``value`` when it is an id; else ValueError naming ``kind`` (``camera id``) and the rule."""
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(f"{kind} {problem}")
    return value


def _validated(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Id = Annotated[str, AfterValidator(_validated)]
"""A config field holding an id: ``id: Id = Field(description=...)``."""
