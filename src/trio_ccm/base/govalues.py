"""Go's value syntax, as the Go cloud-controller-manager reads and writes it: `time.Duration`
(`ParseDuration`, `String`) and `strconv.ParseBool`. The one parser of each kind in the
package: flags, labels and the test tooling's command lines all use these.

Errors are `ValueError`s saying what was wrong with the text; callers add the flag or the
object it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Final

__all__ = ["MAX_DURATION_S", "format_duration", "parse_bool", "parse_duration"]

_BOOLS: Final[Mapping[str, bool]] = MappingProxyType(
    {
        **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
        **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
    }
)
_BARE_NUMBER_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DURATION_PART_RE: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")
_NS_PER_UNIT: Final[Mapping[str, int]] = MappingProxyType(
    {
        "ns": 1,
        "us": 1_000,
        "\u00b5s": 1_000,  # micro sign, as Go accepts
        "\u03bcs": 1_000,  # Greek mu, as Go accepts
        "ms": 1_000_000,
        "s": 1_000_000_000,
        "m": 60_000_000_000,
        "h": 3_600_000_000_000,
    }
)
_MAX_NS: Final = 2**63 - 1  # Go's time.Duration is an int64 of nanoseconds
MAX_DURATION_S: Final = _MAX_NS / 1e9
"""The longest duration Go can hold (about 2562047 h)."""


def parse_bool(text: str) -> bool | None:
    """Go's strconv.ParseBool: 1, t, T, TRUE, true, True and their false twins; None for
    anything else."""
    return _BOOLS.get(text)


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration, in seconds (nanosecond resolution, truncated as Go does).

    Raises ValueError: a bare number other than 0 ("a duration needs a unit"), an unknown
    unit, or a value beyond Go's range.
    """
    body = text
    sign = -1 if body.startswith("-") else 1
    body = body.removeprefix("-") if sign < 0 else body.removeprefix("+")
    if body == "0":
        return 0.0
    if _BARE_NUMBER_RE.fullmatch(text):
        raise ValueError(f"a duration needs a unit, e.g. {text}s")
    bad = ValueError("not a duration; write e.g. 15s, 1m30s or 500ms")
    total = Decimal(0)
    pos = 0
    while pos < len(body) or pos == 0:
        match = _DURATION_PART_RE.match(body, pos)
        assert match is not None  # both groups may be empty, so it always matches
        number, unit = match.groups()
        if number in ("", ".") or unit not in _NS_PER_UNIT:
            raise bad
        total += Decimal(number) * _NS_PER_UNIT[unit]
        pos = match.end()
    ns = int(total)  # Go truncates below a nanosecond
    if ns > _MAX_NS:
        raise ValueError("too long (Go durations end near 2562047h)")
    return sign * ns / 1e9


def format_duration(seconds: float, *, micro: str = "us") -> str:
    """Go's Duration.String() form of `seconds` (nanosecond resolution). Go writes `µs`;
    flags take `us` too, and `--help` writes that (the default)."""
    ns = round(seconds * 1_000_000_000)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_decimal(ns, 1_000)}{micro}"
    if ns < 1_000_000_000:
        return f"{sign}{_decimal(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = sign
    if hours:
        text += f"{hours}h"
    if hours or minutes:
        text += f"{minutes}m"
    return f"{text}{_decimal(rest, 1_000_000_000)}s"


def _decimal(count: int, unit: int) -> str:
    whole, part = divmod(count, unit)
    if not part:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{part:0{digits}d}".rstrip("0")
