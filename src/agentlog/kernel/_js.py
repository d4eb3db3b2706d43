"""JavaScript value rendering, for error texts that must match the original harness exactly.

The original interpolates values with ``String(value)``; logs and tests compare those texts, so the
Python port renders numbers (``1.0`` → ``1``, ``1e21`` → ``1e+21``), ``null``/``undefined``, booleans
and arrays the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final


class _Undefined:
    """JavaScript's ``undefined``: a key that is absent (distinct from JSON ``null``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Final = _Undefined()


def js_number(value: float) -> str:
    """ECMAScript ``Number::toString(value)``: shortest round-trip digits, JS exponent thresholds."""
    if isinstance(value, int):
        if -(2**53) <= value <= 2**53:
            return str(value)
        try:
            value = float(value)  # JS numbers are doubles: a huge integer lost its low digits
        except OverflowError:
            return "Infinity" if value > 0 else "-Infinity"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"  # includes -0, which String() renders as "0"
    if value < 0:
        return "-" + js_number(-value)
    # value = 0.d1d2...dk × 10^n, with the shortest digits Python's repr already computes.
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    n = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{head}e{sign}{abs(e)}"


def js_string(value: object) -> str:
    """JavaScript's ``String(value)`` for a parsed JSON value (or :data:`UNDEFINED`)."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, (list, tuple)):
        return ",".join("" if item is None or item is UNDEFINED else js_string(item) for item in value)
    if isinstance(value, Mapping):
        return "[object Object]"
    return str(value)
