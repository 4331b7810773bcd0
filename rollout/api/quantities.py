"""Kubernetes quantities (`512Mi`, `1.5`, `250m`, `2e3`) as exact numbers, for comparing.

The grammar is Kubernetes' own (`resource.Quantity`): a signed decimal number followed by
a binary suffix (`Ki Mi Gi Ti Pi Ei`), a decimal suffix (`n u m k M G T P E`, none) or a
decimal exponent (`e3`, `E-2`). Numbers are parsed as `Decimal`, so `1Gi` and `1024Mi` are
equal and `0.1` is exactly a tenth. JSON numbers count too (Helm values often hold
`replicas: 3`), but `true` is not a quantity.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[KMGTPE]i)|[eE][+-]?[0-9]+|[numkMGTPE])?\Z")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_CHARS = 64


def parse_quantity(value: Any) -> Decimal | None:
    """The exact number a quantity stands for, or None if `value` is not a quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        try:
            return Decimal(repr(value)) if value == value and abs(value) != float("inf") else None
        except InvalidOperation:  # pragma: no cover - repr of a finite float always parses
            return None
    if not isinstance(value, str) or len(value) > _MAX_CHARS:
        return None
    match = _QUANTITY.match(value)
    if match is None:
        return None
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * (Decimal(1024) ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    exponent = int(suffix[1:])
    if abs(exponent) > 64:
        return None  # Kubernetes caps quantities far below this; refuse absurd exponents
    return number.scaleb(exponent)


def is_quantity(value: Any) -> bool:
    return parse_quantity(value) is not None
