"""Durations given as seconds or as ISO-8601 durations (``PT30S``, ``P1D``, ``P1W``)."""

from __future__ import annotations

import re
from datetime import timedelta

_ISO_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration_seconds(value: int | float | str) -> int:
    """Return a whole number of seconds from ``86400``, ``"86400"`` or ``"P1D"``.

    Years and months are refused: their length is not fixed. Fractions of a second are refused:
    windows and lookbacks are whole seconds.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected seconds or an ISO-8601 duration, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected a whole number of seconds, got {value!r}")
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    match = _ISO_DURATION.match(text.upper())
    if not match or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        raise ValueError(
            f"{value!r} is neither a number of seconds nor an ISO-8601 duration "
            "such as 'PT30S', 'PT5M', 'PT1H', 'P1D' or 'P1W' (years and months are not allowed)"
        )
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    total = timedelta(
        weeks=parts["weeks"], days=parts["days"], hours=parts["hours"],
        minutes=parts["minutes"], seconds=parts["seconds"],
    ).total_seconds()
    if not float(total).is_integer():
        raise ValueError(f"{value!r} is not a whole number of seconds")
    return int(total)
